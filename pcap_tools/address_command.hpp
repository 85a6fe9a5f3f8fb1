// `uroce address`: a running uroced's port addresses (its GID table), shown, added to and removed from
// while it runs, as `ip address` does for a RoCE NIC's netdev (emulator/daemon/port_address_service.hpp).
#pragma once

#include <CLI/CLI.hpp>

namespace uroce::pcap_tools {

void add_address_command(CLI::App& app, int& exit_code);

}  // namespace uroce::pcap_tools
