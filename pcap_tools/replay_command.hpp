// `uroce replay FILE`: a capture's RC connections replayed through uroce's own transport, one side at a
// time. The responder side (the default): the captured requests fed into uroce's responder, its answers set
// beside the captured ones (responder_replay.hpp). The requester side (--side requester): the work requests
// behind the captured requests posted to uroce's requester, the captured answers fed back, its requests
// and completions set beside the captured ones (requester_replay.hpp). For checking uroce against another
// RoCE stack from a capture of it (rxe, a ConnectX), or a capture of uroce against what it does now.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace uroce::pcap_tools {

struct ReplayOptions {
  std::string path;            // "-" = standard input
  bool lossy = false;          // --lossy: the capture point was past a lossy link (compare_lossy)
  bool coalesced = false;      // --coalesced: the captured responder acknowledged several requests at once
  uint32_t mtu = 4096;         // --mtu: the path MTU where no message spans packets
  bool json = false;           // --json: one JSON object per connection
  size_t max_differences = 10; // --max-differences: shown per connection
  bool responder_side = true;  // --side responder or both
  bool requester_side = false; // --side requester or both
};

void add_replay_command(CLI::App& app, int& exit_code);

// Returns the exit code: 0 every connection replayed on the chosen sides did as captured (a connection the
// requester side skips, with its reason, counts as neither), 1 some did not (or could not be replayed),
// 2 unreadable or damaged capture.
int run_replay(const ReplayOptions& options);

}  // namespace uroce::pcap_tools
