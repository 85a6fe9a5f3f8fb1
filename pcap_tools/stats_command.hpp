// `uroce stats`: a running uroced's counters (port, network layer, transport, queues, engine), read over
// its control socket while it runs.
#pragma once

#include <CLI/CLI.hpp>

namespace uroce::pcap_tools {

void add_stats_command(CLI::App& app, int& exit_code);

}  // namespace uroce::pcap_tools
