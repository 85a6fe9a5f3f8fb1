// `uroce check FILE`: the capture's RoCEv2 traffic held to the protocol's rules (conformance.hpp); a list
// of violations and an exit status, for CI.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>

namespace uroce::pcap_tools {

struct CheckOptions {
  std::string path;              // "-" = standard input
  bool json = false;             // --json: one JSON object for the whole capture
  size_t max_shown = 20;         // --max-shown: violations listed per rule
};

void add_check_command(CLI::App& app, int& exit_code);

// 0 no violation, 1 violations, 2 unreadable or damaged capture.
int run_check(const CheckOptions& options);

}  // namespace uroce::pcap_tools
