#include "pcap_tools/replay_command.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "pcap_tools/capture_reader.hpp"
#include "pcap_tools/responder_replay.hpp"

namespace uroce::pcap_tools {

namespace {

struct Collected {
  FrameBytes frames;
  uint64_t records = 0, bad_icrc = 0;
};

// Keeps the RoCE frames a responder would accept (parsed, good ICRC), rebuilt as Ethernet frames whatever
// the capture's link type.
ReadResult collect(const std::string& path, Collected& c) {
  return read_capture(path, [&](const Record&, const wire::Frame& f) {
    ++c.records;
    if (!f.is_roce()) return true;
    if (!wire::icrc_ok(f)) {
      ++c.bad_icrc;
      return true;
    }
    add_rebuilt(c.frames, f);
    return true;
  });
}

std::string describe(const ReplayConnection& k, uint32_t default_mtu) {
  const std::string mtu = k.path_mtu != 0 ? fmt::format("path MTU {}", k.path_mtu)
                                          : fmt::format("path MTU {} (--mtu: no message spans packets)", default_mtu);
  return fmt::format("{} -> {} QP {:#x} (requester QP {:#x}), first PSN {}, {}", wire::to_string(k.requester),
                     wire::to_string(k.responder), k.responder_qpn, k.requester_qpn, k.first_psn, mtu);
}

nlohmann::json to_json(const std::optional<Answer>& a) {
  if (!a) return nullptr;
  nlohmann::json j = {{"opcode", wire::opcode_name(a->opcode)}, {"psn", a->psn}, {"ack_req", a->ack_req},
                      {"length", a->length}};
  if (a->syndrome >= 0) {
    j["syndrome"] = a->syndrome;
    j["msn"] = a->msn;
  }
  return j;
}

void print_text(const ReplayOptions& o, size_t n, const ReplayConnection& k, const ReplayResult& r,
                const Comparison& c) {
  fmt::print("Connection {}: {}\n", n, describe(k, o.mtu));
  if (!r.error.empty()) {
    fmt::print("  not replayed: {}\n\n", r.error);
    return;
  }
  fmt::print("  {} requests fed in; uroce answered with {} packets, the capture shows {}", r.requests, r.got.size(),
             r.expected.size());
  if (c.same()) {
    fmt::print(": {}\n\n", o.lossy ? "every captured answer, in order, and plain ACKs besides" : "the same, in order");
    return;
  }
  fmt::print(": {} differ{}\n", c.differences.size(), c.differences.size() > o.max_differences
                                                            ? fmt::format(" (the first {} shown)", o.max_differences)
                                                            : "");
  for (size_t i = 0; i < c.differences.size() && i < o.max_differences; ++i) {
    const auto& d = c.differences[i];
    fmt::print("    answer {}: uroce {} | captured {}\n", d.index, d.uroce ? to_string(*d.uroce) : "(nothing)",
               d.captured ? to_string(*d.captured) : "(nothing)");
  }
  fmt::print("\n");
}

nlohmann::json connection_json(const ReplayConnection& k, const ReplayResult& r, const Comparison& c) {
  nlohmann::json j = {{"requester", wire::to_string(k.requester)}, {"responder", wire::to_string(k.responder)},
                      {"responder_qpn", k.responder_qpn}, {"requester_qpn", k.requester_qpn},
                      {"first_psn", k.first_psn}, {"requests", r.requests}, {"uroce_answers", r.got.size()},
                      {"captured_answers", r.expected.size()}, {"matched", c.matched},
                      {"same", r.error.empty() && c.same()}};
  if (!r.error.empty()) j["error"] = r.error;
  nlohmann::json diffs = nlohmann::json::array();
  for (const auto& d : c.differences) diffs.push_back({{"index", d.index}, {"uroce", to_json(d.uroce)},
                                                       {"captured", to_json(d.captured)}});
  j["differences"] = diffs;
  return j;
}

}  // namespace

int run_replay(const ReplayOptions& o) {
  Collected c;
  const ReadResult read = collect(o.path, c);
  if (read.outcome == ReadResult::Outcome::unreadable) return read.report(o.path);
  const std::vector<ReplayConnection> connections = rc_connections(c.frames);
  if (!o.json) {
    fmt::print("{}: {} frames, {} RoCE frames replayable ({} with a bad ICRC left out), {} RC connection{}\n\n",
               o.path, c.records, c.frames.size(), c.bad_icrc, connections.size(),
               connections.size() == 1 ? "" : "s");
  }
  size_t same = 0;
  for (size_t i = 0; i < connections.size(); ++i) {
    const ReplayConnection& k = connections[i];
    const ReplayResult r = replay_responder(c.frames, k, o.mtu);
    const Comparison cmp = r.error.empty() ? (o.lossy ? compare_lossy(r.expected, r.got) : compare_exact(r.expected, r.got))
                                           : Comparison{};
    const bool ok = r.error.empty() && cmp.same();
    same += ok ? 1 : 0;
    if (o.json) {
      fmt::print("{}\n", connection_json(k, r, cmp).dump());
    } else {
      print_text(o, i + 1, k, r, cmp);
    }
  }
  if (!o.json) {
    if (connections.empty()) {
      fmt::print("No RC requests to replay (replay covers RC: UD and UC have no answers to compare)\n");
    } else {
      fmt::print("{} of {} connections answered as captured\n", same, connections.size());
    }
  }
  std::fflush(stdout);
  const int read_status = read.report(o.path);
  if (read_status != 0) return read_status;
  return same == connections.size() ? 0 : 1;
}

void add_replay_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Feed a capture's RC requests into uroce's responder and compare its answers with the captured ones");
  cmd->add_option("file", options->path, "pcap or pcapng file, or - for standard input")->required();
  cmd->add_flag("--lossy", options->lossy,
                "The capture point was past a lossy link: captured answers must appear in order among uroce's, "
                "and uroce may send plain ACKs besides");
  cmd->add_option("--mtu", options->mtu, "Path MTU where no message in the capture spans packets (default 4096)")
      ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u}));
  cmd->add_flag("--json", options->json, "One JSON object per connection");
  cmd->add_option("--max-differences", options->max_differences, "Differences shown per connection (default 10)");
  cmd->callback([options, &exit_code] { exit_code = run_replay(*options); });
}

}  // namespace uroce::pcap_tools
