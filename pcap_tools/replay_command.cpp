#include "pcap_tools/replay_command.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <nlohmann/json.hpp>

#include "pcap_tools/capture_reader.hpp"
#include "pcap_tools/requester_replay.hpp"
#include "pcap_tools/responder_replay.hpp"

namespace uroce::pcap_tools {

namespace {

struct Collected {
  FrameBytes frames;
  uint64_t records = 0, bad_icrc = 0;
};

// Keeps the RoCE frames a responder would accept (parsed, good ICRC), rebuilt as Ethernet frames whatever
// the capture's link type; a mirror copy of a frame (mirror_copies.hpp) only once.
ReadResult collect(const std::string& path, Collected& c) {
  return read_capture(path, [&](const Record& r, const wire::Frame& f) {
    ++c.records;
    if (r.copy_of != 0 || !f.is_roce()) return true;
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

nlohmann::json to_json(const Answer& a) {
  nlohmann::json j = {{"opcode", wire::opcode_name(a.opcode)}, {"psn", a.psn}, {"ack_req", a.ack_req},
                      {"length", a.length}};
  if (a.syndrome >= 0) {
    j["syndrome"] = a.syndrome;
    j["msn"] = a.msn;
  }
  return j;
}

nlohmann::json to_json(const Request& r) {
  const wire::OpcodeInfo& info = wire::opcode_info(r.opcode);
  nlohmann::json j = {{"opcode", wire::opcode_name(r.opcode)}, {"psn", r.psn}, {"dest_qp", r.dest_qp},
                      {"ack_req", r.ack_req}, {"solicited", r.solicited}, {"length", r.payload.size()}};
  if (info.has(wire::hdr_reth)) j["reth"] = {{"va", r.va}, {"rkey", r.rkey}, {"dma_length", r.dma_length}};
  if (info.has(wire::hdr_atomic_eth)) {
    j["atomic_eth"] = {{"va", r.va}, {"rkey", r.rkey}, {"swap_add", r.swap_add}, {"compare", r.compare}};
  }
  if (info.has(wire::hdr_immdt)) j["immdt"] = r.immdt;
  if (info.has(wire::hdr_ieth)) j["ieth"] = r.ieth;
  return j;
}

nlohmann::json to_json(const Completion& c) {
  nlohmann::json j = {{"work_request", c.work_request}, {"opcode", verbs::to_string(c.opcode)},
                      {"status", verbs::to_string(c.status)}};
  if (c.opcode == verbs::WcOpcode::rdma_read) j["read_length"] = c.read.size();
  if (c.opcode == verbs::WcOpcode::comp_swap || c.opcode == verbs::WcOpcode::fetch_add) j["original"] = c.original;
  return j;
}

template <class T>
nlohmann::json to_json(const std::optional<T>& item) {
  return item ? to_json(*item) : nlohmann::json(nullptr);
}

// Requests and completions say which of their fields differs first; answers are short enough to read.
template <class T>
std::string differs_in(const typename SequenceComparison<T>::Difference& d) {
  if constexpr (requires(const T& a) { what_differs(a, a); }) {
    if (d.uroce && d.captured) return what_differs(*d.uroce, *d.captured);
  }
  return {};
}

template <class T>
nlohmann::json differences_json(const SequenceComparison<T>& c) {
  nlohmann::json diffs = nlohmann::json::array();
  for (const auto& d : c.differences) {
    nlohmann::json j = {{"index", d.index}, {"uroce", to_json(d.uroce)}, {"captured", to_json(d.captured)}};
    if (std::string field = differs_in<T>(d); !field.empty()) j["differs_in"] = field;
    diffs.push_back(j);
  }
  return diffs;
}

template <class T>
void print_differences(const ReplayOptions& o, std::string_view what, const SequenceComparison<T>& c) {
  for (size_t i = 0; i < c.differences.size() && i < o.max_differences; ++i) {
    const auto& d = c.differences[i];
    const std::string field = differs_in<T>(d);
    fmt::print("    {} {}: uroce {} | captured {}{}\n", what, d.index, d.uroce ? to_string(*d.uroce) : "(nothing)",
               d.captured ? to_string(*d.captured) : "(nothing)", field.empty() ? "" : " -- " + field);
  }
}

std::string shown(const ReplayOptions& o, size_t differences) {
  return differences > o.max_differences ? fmt::format(" (the first {} shown)", o.max_differences) : "";
}

// The captured answers must appear in order among uroce's, uroce's others being plain ACKs: past a lossy
// link (answers lost before the capture point), or from a responder that coalesces acknowledgements (one
// ACK for several requests, as uroced itself does where rxe acknowledges each request that asks).
bool answers_as_subset(const ReplayOptions& o) { return o.lossy || o.coalesced; }

// An exact comparison that failed only because uroce acknowledged more often than the captured responder.
bool only_more_acks(const ReplayOptions& o, const ReplayResult& r, const Comparison& c) {
  return !answers_as_subset(o) && r.error.empty() && !c.same() && compare_lossy(r.expected, r.got).same();
}

// The responder side: the captured requests fed into uroce's responder.
bool print_responder(const ReplayOptions& o, size_t n, const ReplayConnection& k, const ReplayResult& r,
                     const Comparison& c) {
  fmt::print("Connection {}, responder side: {}\n", n, describe(k, o.mtu));
  if (!r.error.empty()) {
    fmt::print("  not replayed: {}\n\n", r.error);
    return false;
  }
  fmt::print("  {} requests fed in; uroce answered with {} packets, the capture shows {}", r.requests, r.got.size(),
             r.expected.size());
  if (c.same()) {
    fmt::print(": {}\n\n", answers_as_subset(o) ? "every captured answer, in order, and plain ACKs besides"
                                                  : "the same, in order");
    return true;
  }
  fmt::print(": {} differ{}\n", c.differences.size(), shown(o, c.differences.size()));
  if (only_more_acks(o, r, c)) {
    fmt::print("  every captured answer is among uroce's, in order; uroce also sent plain ACKs the capture does not "
               "show: a responder that coalesces acknowledgements (--coalesced) or a capture past a lossy link "
               "(--lossy)\n");
  }
  print_differences(o, "answer", c);
  fmt::print("\n");
  return false;
}

nlohmann::json responder_json(const ReplayOptions& o, const ReplayConnection& k, const ReplayResult& r,
                              const Comparison& c) {
  const bool same = r.error.empty() && c.same();
  nlohmann::json j = {{"side", "responder"}, {"requester", wire::to_string(k.requester)},
                      {"responder", wire::to_string(k.responder)}, {"responder_qpn", k.responder_qpn},
                      {"requester_qpn", k.requester_qpn}, {"first_psn", k.first_psn}, {"requests", r.requests},
                      {"uroce_answers", r.got.size()}, {"captured_answers", r.expected.size()},
                      {"matched", c.matched}, {"same", same},
                      {"outcome", !r.error.empty() ? "error" : same ? "same" : "different"}};
  if (!r.error.empty()) j["error"] = r.error;
  j["only_more_acks"] = only_more_acks(o, r, c);  // would pass with --coalesced or --lossy
  j["differences"] = differences_json(c);
  return j;
}

enum class Outcome { same, different, error, skipped };

Outcome outcome_of(const RequesterReplayResult& r, const RequesterComparison& c) {
  if (!r.skipped.empty()) return Outcome::skipped;
  if (!r.error.empty()) return Outcome::error;
  return c.same() ? Outcome::same : Outcome::different;
}

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::same: return "same";
    case Outcome::different: return "different";
    case Outcome::error: return "error";
    case Outcome::skipped: return "skipped";
  }
  return "?";
}

// The requester side: the work requests behind the captured requests posted to uroce's requester.
void print_requester(const ReplayOptions& o, size_t n, const ReplayConnection& k, const RequesterReplayResult& r,
                        const RequesterComparison& c) {
  fmt::print("Connection {}, requester side: {}\n", n, describe(k, o.mtu));
  if (!r.skipped.empty()) {
    fmt::print("  skipped: {}\n\n", r.skipped);
    return;
  }
  if (!r.error.empty()) {
    fmt::print("  not replayed: {}\n\n", r.error);
    return;
  }
  fmt::print("  {} work requests posted, {} answers fed back; uroce sent {} requests, the capture shows {}: {}\n",
             r.work_requests, r.answers, r.got.size(), r.expected.size(),
             c.requests.same() ? "the same, in order"
                               : fmt::format("{} differ{}", c.requests.differences.size(),
                                             shown(o, c.requests.differences.size())));
  print_differences(o, "request", c.requests);
  const bool results = std::any_of(r.expected_completions.begin(), r.expected_completions.end(), [](const Completion& e) {
    return e.opcode == verbs::WcOpcode::rdma_read || e.opcode == verbs::WcOpcode::comp_swap ||
           e.opcode == verbs::WcOpcode::fetch_add;
  });
  fmt::print("  uroce completed {} work requests, the capture's answers complete {}: {}\n", r.got_completions.size(),
             r.expected_completions.size(),
             !c.completions.same() ? fmt::format("{} differ{}", c.completions.differences.size(),
                                                 shown(o, c.completions.differences.size()))
             : results             ? "the same, READ data and atomic values too"
                                   : "the same");
  print_differences(o, "completion", c.completions);
  fmt::print("\n");
}

nlohmann::json requester_json(const ReplayConnection& k, const RequesterReplayResult& r,
                              const RequesterComparison& c) {
  const Outcome outcome = outcome_of(r, c);
  nlohmann::json j = {{"side", "requester"}, {"requester", wire::to_string(k.requester)},
                      {"responder", wire::to_string(k.responder)}, {"responder_qpn", k.responder_qpn},
                      {"requester_qpn", k.requester_qpn}, {"first_psn", k.first_psn},
                      {"work_requests", r.work_requests}, {"answers", r.answers},
                      {"uroce_requests", r.got.size()}, {"captured_requests", r.expected.size()},
                      {"matched", c.requests.matched}, {"uroce_completions", r.got_completions.size()},
                      {"captured_completions", r.expected_completions.size()},
                      {"matched_completions", c.completions.matched}, {"same", outcome == Outcome::same},
                      {"outcome", to_string(outcome)}};
  if (!r.skipped.empty()) j["skipped"] = r.skipped;
  if (!r.error.empty()) j["error"] = r.error;
  j["differences"] = differences_json(c.requests);
  j["completion_differences"] = differences_json(c.completions);
  return j;
}

// Replays every connection on the responder side; how many did as captured.
size_t replay_responders(const ReplayOptions& o, const FrameBytes& frames,
                         const std::vector<ReplayConnection>& connections) {
  size_t same = 0;
  for (size_t i = 0; i < connections.size(); ++i) {
    const ReplayResult r = replay_responder(frames, connections[i], o.mtu);
    const Comparison cmp = !r.error.empty()       ? Comparison{}
                           : answers_as_subset(o) ? compare_lossy(r.expected, r.got)
                                                  : compare_exact(r.expected, r.got);
    if (o.json) {
      fmt::print("{}\n", responder_json(o, connections[i], r, cmp).dump());
      same += r.error.empty() && cmp.same() ? 1 : 0;
    } else {
      same += print_responder(o, i + 1, connections[i], r, cmp) ? 1 : 0;
    }
  }
  if (!o.json && !connections.empty()) fmt::print("{} of {} connections answered as captured\n", same, connections.size());
  return same;
}

// Replays every connection on the requester side; how many did as captured and how many were skipped.
std::pair<size_t, size_t> replay_requesters(const ReplayOptions& o, const FrameBytes& frames,
                                            const std::vector<ReplayConnection>& connections) {
  size_t same = 0, skipped = 0;
  for (size_t i = 0; i < connections.size(); ++i) {
    RequesterReplayResult r;
    if (o.lossy) {
      r.skipped = "--lossy: past a lossy link the requester retransmitted when its timers and NAKs said so, "
                  "which a replay cannot reproduce";
    } else {
      r = replay_requester(frames, connections[i], o.mtu);
    }
    const RequesterComparison cmp = r.skipped.empty() && r.error.empty() ? compare_requester(r) : RequesterComparison{};
    const Outcome outcome = outcome_of(r, cmp);
    if (o.json) {
      fmt::print("{}\n", requester_json(connections[i], r, cmp).dump());
    } else {
      print_requester(o, i + 1, connections[i], r, cmp);
    }
    same += outcome == Outcome::same ? 1 : 0;
    skipped += outcome == Outcome::skipped ? 1 : 0;
  }
  if (!o.json && !connections.empty()) {
    fmt::print("{} of {} connections sent and completed as captured (requester side){}\n", same, connections.size(),
               skipped == 0 ? "" : fmt::format(", {} skipped: not replayable on the requester side", skipped));
  }
  return {same, skipped};
}

}  // namespace

int run_replay(const ReplayOptions& o) {
  Collected c;
  const ReadResult read = collect(o.path, c);
  if (read.outcome == ReadResult::Outcome::unreadable) return read.report(o.path);
  const std::vector<ReplayConnection> connections = rc_connections(c.frames);
  if (!o.json) {
    fmt::print("{}: {} frames, {} RoCE frames replayable ({} with a bad ICRC left out), {} RC connection{}\n",
               o.path, c.records, c.frames.size(), c.bad_icrc, connections.size(),
               connections.size() == 1 ? "" : "s");
    if (read.mirror_copies != 0) {
      fmt::print("{} frames left out as mirror copies of frames another tunnel carried first\n", read.mirror_copies);
    }
    fmt::print("\n");
  }
  bool all_same = true;
  if (o.responder_side) all_same &= replay_responders(o, c.frames, connections) == connections.size();
  if (o.responder_side && o.requester_side && !o.json && !connections.empty()) fmt::print("\n");
  if (o.requester_side) {
    const auto [same, skipped] = replay_requesters(o, c.frames, connections);
    all_same &= same + skipped == connections.size();
  }
  if (!o.json && connections.empty()) {
    fmt::print("No RC requests to replay (replay covers RC: UD and UC have no answers to compare)\n");
  }
  std::fflush(stdout);
  const int read_status = read.report(o.path);
  if (read_status != 0) return read_status;
  return all_same ? 0 : 1;
}

void add_replay_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Replay a capture's RC connections through uroce's responder (its answers to the captured requests) "
                "or requester (its requests for the captured ones' work requests) and compare with the capture");
  cmd->add_option("file", options->path, "pcap or pcapng file, or - for standard input")->required();
  cmd->add_flag("--lossy", options->lossy,
                "The capture point was past a lossy link: captured answers must appear in order among uroce's, "
                "and uroce may send plain ACKs besides");
  cmd->add_flag("--coalesced", options->coalesced,
                "The captured responder acknowledged several requests with one ACK (as uroced does; rxe "
                "acknowledges each): captured answers must appear in order among uroce's, and uroce may send "
                "plain ACKs besides. Unlike --lossy, the requester side is still replayed");
  cmd->add_option("--mtu", options->mtu, "Path MTU where no message in the capture spans packets (default 4096)")
      ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u}));
  cmd->add_flag("--json", options->json, "One JSON object per connection");
  cmd->add_option("--max-differences", options->max_differences, "Differences shown per connection (default 10)");
  auto side = std::make_shared<std::string>("responder");
  cmd->add_option("--side", *side,
                  "responder (default): the captured requests into uroce's responder; requester: the work requests "
                  "behind them into uroce's requester, the captured answers fed back; both")
      ->check(CLI::IsMember({"responder", "requester", "both"}));
  cmd->callback([options, side, &exit_code] {
    options->responder_side = *side != "requester";
    options->requester_side = *side != "responder";
    exit_code = run_replay(*options);
  });
}

}  // namespace uroce::pcap_tools
