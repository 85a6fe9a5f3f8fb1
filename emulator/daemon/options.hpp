// uroced's command line and config file (CLI11: every option can also be given in a TOML file passed
// with --config, same names). Defaults make `uroced` alone useful: the internal loopback port at
// 192.0.2.1, so that two programs on this host talk RDMA through the full RoCEv2 path.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "emulator/net/routes.hpp"
#include "emulator/port/eal_args.hpp"
#include "transport/cm/service_level.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator {

// The loopback port's address: from TEST-NET-1 (RFC 5737), reserved for documentation, so it can never
// be a real host's; no kernel sees the loopback port, so it clashes with nothing.
inline constexpr const char* default_loopback_address = "192.0.2.1";
inline constexpr const char* default_socket_path = "/run/uroce/uroced.sock";

struct DaemonOptions {
  std::string port;                 // DPDK devargs; empty: the internal loopback
  std::vector<std::string> ip_text;
  std::vector<wire::IpAddress> addresses;  // the --ip addresses, in order (the link-local one is not here)
  std::vector<std::string> gateway_text;
  net::Routes routes;               // the --ip subnets and the --gateway routers
  bool no_router_discovery = false;  // ignore IPv6 Router Advertisements, send no solicitations
  bool no_slaac = false;             // form no address under an advertised prefix
  bool no_link_local = false;       // a real port gets no fe80:: GID after the configured addresses
  bool no_device_node = false;      // make no /dev/infiniband node (daemon/device_node.hpp)
  unsigned mtu = 0;                 // 0: keep the port's
  int vlan = -1;                    // the 802.1Q VLAN ID the port is on; -1: none (0: priority-tagged)
  std::vector<std::string> egress_qos_map_text;  // "FROM:TO" pairs, as ip link's egress-qos-map
  cm::EgressQosMap egress_qos_map{};  // priority -> PCP: the SL rdma_cm gives a TOS (cm/service_level.hpp)
  std::string trust = "pcp";        // what gives a frame's priority for PFC: "pcp" or "dscp"
  std::string socket = default_socket_path;
  std::string device_name = "uroce0";  // the RDMA device's name, as applications see it (ibv_get_device_name)
  std::string capture;
  double rx_loss = 0;
  uint64_t loss_seed = 1;
  unsigned spin_us = 1000;  // idle time before the engine sleeps (and clients must wake it)
  unsigned nap_us = 20;     // one timed idle nap before that (engine/back_off.hpp); 0: poll without napping
  std::string nap = "yield";  // what a nap is: "yield" (sched_yield) or "sleep" (nap_us)
  unsigned max_sleep_us = 500;
  std::string cnp = "on";           // answer CE-marked packets with CNPs
  std::string dcqcn = "on";         // cut a QP's rate on CNPs (and send data ECN-capable)
  unsigned cnp_interval_us = 50;
  std::string log_level_text = "info";
  spdlog::level::level_enum log_level = spdlog::level::info;
  std::string hugepages_text = "auto";
  unsigned core = 0;
  port::EalOptions eal;
};

void describe_options(CLI::App& app, DaemonOptions& o);
// Checks and converts what CLI11 parsed; throws std::invalid_argument with a message for the user.
void finish_options(DaemonOptions& o);

}  // namespace uroce::emulator
