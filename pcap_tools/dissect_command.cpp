#include "pcap_tools/dissect_command.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "pcap_tools/capture_reader.hpp"
#include "pcap_tools/dissection.hpp"
#include "pcap_tools/explain.hpp"
#include "pcap_tools/render.hpp"

namespace uroce::pcap_tools {

namespace {

struct Filter {
  std::vector<uint32_t> qps;
  wire::OpcodeSet opcodes;
  bool any_opcode = true;

  bool active() const { return !qps.empty() || !any_opcode; }
  bool keep(const wire::Frame& f) const {
    if (!active()) return true;
    if (!f.has(wire::layer_bth)) return false;  // filters select RoCE packets only
    const wire::Bth& b = f.roce.bth();
    if (!qps.empty() && std::find(qps.begin(), qps.end(), b.dest_qp) == qps.end()) return false;
    return any_opcode || opcodes.contains(b.opcode);
  }
};

struct Totals {
  uint64_t frames = 0, roce = 0, bad_icrc = 0, malformed = 0, arp = 0, pause = 0, other = 0;
};

void count(Totals& t, const Dissection& d) {
  const wire::Frame& f = *d.frame;
  ++t.frames;
  if (!f.ok()) {
    ++t.malformed;
  } else if (f.kind == wire::FrameKind::roce) {
    ++t.roce;
    if (d.icrc_ok && !*d.icrc_ok) ++t.bad_icrc;
  } else if (f.kind == wire::FrameKind::arp) {
    ++t.arp;
  } else if (f.kind == wire::FrameKind::mac_control) {
    ++t.pause;
  } else {
    ++t.other;
  }
}

}  // namespace

int run_dissect(const DissectOptions& o) {
  Filter filter;
  filter.qps = o.qps;
  for (const std::string& name : o.opcodes) {
    const auto set = wire::parse_opcode_names(name);
    if (!set) {
      spdlog::error("unknown opcode '{}' (try a name such as RC_SEND_ONLY, SEND_FIRST or a number)", name);
      return 1;
    }
    for (unsigned op = 0; op < 256; ++op) {
      if (set->contains(uint8_t(op))) filter.opcodes.add(uint8_t(op));
    }
    filter.any_opcode = false;
  }

  Totals totals;
  uint64_t shown = 0;
  int64_t first_time = 0;
  const ReadResult read = read_capture(o.path, [&](const Record& record, const wire::Frame& frame) {
    if (record.number == 1) first_time = record.time_ns;
    const Dissection d = dissect(record, frame, first_time);
    count(totals, d);
    if (!filter.keep(frame)) return true;
    if (o.json) {
      fmt::print("{}\n", to_json(d).dump());
    } else if (o.verbose) {
      fmt::print("{}\n", field_tree(d));
    } else {
      fmt::print("{}\n", summary_line(d));
    }
    return o.count == 0 || ++shown < o.count;
  });
  std::fflush(stdout);
  if (read.outcome == ReadResult::Outcome::unreadable) return read.report(o.path);
  spdlog::info("{} frames: {} RoCE ({} with a bad ICRC), {} malformed, {} ARP, {} PFC/PAUSE, {} other",
               totals.frames, totals.roce, totals.bad_icrc, totals.malformed, totals.arp, totals.pause, totals.other);
  return read.report(o.path);
}

void add_dissect_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<DissectOptions>();
  CLI::App* cmd = app.add_subcommand("dissect", "Decode every frame of a capture and verify each RoCEv2 ICRC");
  cmd->add_option("file", options->path, "pcap or pcapng file, or - for standard input")->required();
  auto* verbose = cmd->add_flag("-V,--verbose", options->verbose, "Show every field of every frame as a tree");
  cmd->add_flag("--json", options->json, "One JSON object per frame and line, with every field")->excludes(verbose);
  cmd->add_option("--qp", options->qps, "Only RoCE frames to this destination QP (repeatable; 17 or 0x11)")
      ->check(CLI::Range(0u, 0xffffffu));
  cmd->add_option("--opcode", options->opcodes,
                  "Only these opcodes (repeatable): RC_SEND_FIRST, SEND_ONLY (any transport), CNP, 0x11 ...");
  cmd->add_option("-c,--count", options->count, "Stop after showing this many frames");
  cmd->callback([options, &exit_code] { exit_code = run_dissect(*options); });
}

void add_explain_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ExplainOptions>();
  CLI::App* cmd = app.add_subcommand(
      "explain", "Tell what happens in a capture: connections, messages, ACKs, NAKs, retransmissions");
  cmd->add_option("file", options->path, "pcap or pcapng file, or - for standard input")->required();
  cmd->callback([options, &exit_code] { exit_code = run_explain(*options); });
}

}  // namespace uroce::pcap_tools
