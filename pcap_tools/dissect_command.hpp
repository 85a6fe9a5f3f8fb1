// `uroce dissect FILE`: every frame of a capture, decoded and ICRC-checked.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace uroce::pcap_tools {

struct DissectOptions {
  std::string path;               // "-" = standard input
  bool verbose = false;           // -V: the full field tree
  bool json = false;              // --json: one JSON object per line
  std::vector<uint32_t> qps;      // --qp: keep RoCE frames to these destination QPs
  std::vector<std::string> opcodes;  // --opcode: keep these opcodes (names or numbers)
  uint64_t count = 0;             // -c: stop after this many frames shown (0 = all)
};

// Registers the subcommand on `app`; `run` is called with the options when it is chosen.
void add_dissect_command(CLI::App& app, int& exit_code);

// `uroce explain FILE`: the capture as a story (see explain.hpp).
void add_explain_command(CLI::App& app, int& exit_code);

// Runs the dissection; returns the process exit code (0 ok, 2 unreadable or damaged capture).
int run_dissect(const DissectOptions& options);

}  // namespace uroce::pcap_tools
