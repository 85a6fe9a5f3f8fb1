#include "pcap_tools/check_command.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "pcap_tools/capture_reader.hpp"
#include "pcap_tools/conformance.hpp"

namespace uroce::pcap_tools {

namespace {

void print_text(const CheckOptions& o, const ConformanceChecker& c, uint64_t mirror_copies) {
  fmt::print("{}: {} frames, {} RoCE, {} RC/UC/XRC request flows\n", o.path, c.frames(), c.roce_frames(), c.flows());
  if (mirror_copies != 0) {
    fmt::print("{} more frames left out as mirror copies of frames another tunnel carried first\n", mirror_copies);
  }
  std::map<std::string, std::vector<const Violation*>> by_rule;
  for (const Violation& v : c.violations()) by_rule[v.rule].push_back(&v);
  for (const auto& [rule, list] : by_rule) {
    fmt::print("\n{}: {}\n", rule, list.size());
    for (size_t i = 0; i < list.size() && i < o.max_shown; ++i) {
      fmt::print("  frame {}: {}\n", list[i]->frame, list[i]->text);
    }
    if (list.size() > o.max_shown) fmt::print("  ... and {} more\n", list.size() - o.max_shown);
  }
  fmt::print("\n{}\n", c.violations().empty() ? "OK: no violation"
                                              : fmt::format("FAIL: {} violations", c.violations().size()));
}

nlohmann::json to_json(const ConformanceChecker& c, bool damaged, uint64_t mirror_copies) {
  nlohmann::json violations = nlohmann::json::array();
  for (const Violation& v : c.violations()) violations.push_back({{"rule", v.rule}, {"frame", v.frame}, {"text", v.text}});
  return {{"frames", c.frames()}, {"roce", c.roce_frames()}, {"flows", c.flows()}, {"mirror_copies", mirror_copies},
          {"damaged", damaged}, {"ok", c.violations().empty() && !damaged}, {"violations", violations}};
}

}  // namespace

int run_check(const CheckOptions& o) {
  ConformanceChecker checker;
  const ReadResult read = read_capture(o.path, [&](const Record& record, const wire::Frame& frame) {
    // A frame mirrored at several places is checked once: its copies would read as retransmissions.
    if (record.copy_of == 0) checker.add(record.number, frame);
    return true;
  });
  if (read.outcome == ReadResult::Outcome::unreadable) return read.report(o.path);
  if (o.json) {
    fmt::print("{}\n", to_json(checker, read.outcome == ReadResult::Outcome::damaged, read.mirror_copies).dump());
  } else {
    print_text(o, checker, read.mirror_copies);
  }
  std::fflush(stdout);
  const int read_status = read.report(o.path);
  if (read_status != 0) return read_status;
  return checker.violations().empty() ? 0 : 1;
}

void add_check_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Hold a capture's RoCEv2 traffic to the protocol's rules: ICRCs, opcode sequences, lengths, MSNs");
  cmd->add_option("file", options->path, "pcap or pcapng file, or - for standard input")->required();
  cmd->add_flag("--json", options->json, "One JSON object: counts and every violation");
  cmd->add_option("--max-shown", options->max_shown, "Violations listed per rule (default 20)");
  cmd->callback([options, &exit_code] { exit_code = run_check(*options); });
}

}  // namespace uroce::pcap_tools
