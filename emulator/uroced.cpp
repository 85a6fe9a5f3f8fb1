// uroced: the daemon that is the NIC. See docs/daemon.md for how it is built and `uroced --help` for
// how to run it.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "emulator/control/control_server.hpp"
#include "emulator/daemon/control_adapter.hpp"
#include "emulator/daemon/device_node.hpp"
#include "emulator/daemon/autoconf_watch.hpp"
#include "emulator/daemon/link_watch.hpp"
#include "emulator/daemon/options.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "emulator/engine/engine.hpp"
#include "emulator/net/nd_frames.hpp"
#include "emulator/port/control_thread.hpp"
#include "emulator/port/dpdk_port.hpp"
#include "emulator/port/eal.hpp"
#include "emulator/port/pmd_choice.hpp"

using namespace uroce::emulator;

namespace {

int serve(const DaemonOptions& o) {
  port::Eal eal(o.eal);
  spdlog::info("EAL started in {:.0f} ms ({})", eal.init_milliseconds(),
               eal.hugepages() ? "hugepages" : "no hugepages");
  port::PortOptions po;
  if (o.mtu != 0 && !o.port.empty()) po.mtu = uint16_t(o.mtu);
  std::unique_ptr<port::DpdkPort> port;
  if (o.port.empty()) {
    port = port::DpdkPort::loopback("uroce_lo", po);
  } else {
    port = port::DpdkPort::open(o.port, po);
  }

  engine::EngineConfig config;
  config.addresses = o.addresses;
  config.routes = o.routes;
  config.router_discovery = !o.no_router_discovery;
  config.slaac = !o.no_slaac;
  config.congestion.notify = o.cnp == "on";
  config.congestion.cnp_interval_ns = uint64_t(o.cnp_interval_us) * 1000;
  config.congestion.react = o.dcqcn == "on";
  // DCQCN starts and ends at line rate: the port's speed when its driver says (the loopback has none: a
  // 100 Gb/s NIC's).
  if (const uint32_t mbps = o.port.empty() ? 0 : port->link().speed_mbps; mbps != 0) {
    config.congestion.dcqcn.line_rate_bps = double(mbps) * 1e6;
    config.link_bits_per_second = uint64_t(mbps) * 1'000'000;  // what the link partner's pause quanta last
  }
  // A real port also has its IPv6 link-local address (fe80::/64 from its MAC, RFC 4291), as a GID after
  // the configured ones: GID 0 stays the first --ip (rxe and ConnectX put the link-local GID first).
  if (!o.port.empty() && !o.no_link_local) {
    const uroce::wire::IpAddress ll = uroce::emulator::net::link_local_from_mac(port->mac());
    if (std::find(config.addresses.begin(), config.addresses.end(), ll) == config.addresses.end()) {
      config.addresses.push_back(ll);
    }
  }
  if (o.vlan >= 0) config.vlan = uint16_t(o.vlan);
  config.trust_dscp = o.trust == "dscp";
  config.capture_path = o.capture;
  config.capture_received = !o.port.empty();  // on the loopback every frame received was just sent
  config.wire_loops_back = o.port.empty();
  config.rx_loss = o.rx_loss;
  config.loss_seed = o.loss_seed;
  config.back_off.doze_ns = uint64_t(o.spin_us) * 1000;
  config.back_off.nap_ns = uint64_t(o.nap_us) * 1000;
  config.back_off.yield_naps = o.nap == "yield";
  config.back_off.max_sleep_ns = uint64_t(o.max_sleep_us) * 1000;
  // The ring under the loopback carries frames of any size: it runs with jumbo frames, so its RoCE path
  // MTU is 4096 as on a real NIC's loopback. A real port's MTU is what its driver (or kernel) says.
  config.ip_mtu = o.port.empty() ? (o.mtu != 0 ? o.mtu : 9000) : port->mtu();
  if (o.port.empty()) {
    // DPDK's ring ports have no MAC (all zero) and cannot be given one: the loopback gets a locally
    // administered address made from our pid.
    const uint32_t pid = uint32_t(getpid());
    config.mac = uroce::wire::MacAddress{{0x02, 0x75, uint8_t(pid >> 24), uint8_t(pid >> 16), uint8_t(pid >> 8), uint8_t(pid)}};
  }
  engine::Engine engine(*port, config);

  PortDescription description;
  description.port_name = o.port.empty() ? "loopback" : o.port;
  description.device_name = o.device_name;
  description.mac = config.mac.value_or(port->mac());
  description.gids = config.addresses;
  description.ip_mtu = config.ip_mtu;
  description.active_mtu = engine.active_mtu();
  description.link_up = port->link().up || o.port.empty();
  description.egress_qos_map = o.egress_qos_map;
  if (!o.port.empty()) description.link_state = [&p = *port] { return p.link().up; };
  VerbsService service(engine, description, config.limits, engine.wake_fd(), engine.status_fd());
  std::optional<DeviceNode> device_node;
  if (!o.no_device_node) device_node.emplace(description.dev_name());
  ControlAdapter adapter(service);

  boost::asio::io_context io;
  // rdma_cm: its QP1 handler is installed once the engine runs (start() waits for the engine).
  CmService cm_service(engine, io, description);
  adapter.set_cm_service(&cm_service);
  io.post([&] { cm_service.start(); });
  // The port's addresses while it runs (uroce address add|del).
  PortAddressService port_addresses(engine, config.addresses, config.routes, getuid(),
                                    [&](const std::vector<uroce::wire::IpAddress>& gids, uint32_t generation) {
                                      service.set_gids(gids, generation);
                                      cm_service.set_gids(gids);
                                    });
  adapter.set_port_addresses(&port_addresses);
  // Addresses SLAAC forms and lets lapse join and leave the table as `uroce address add|del` would.
  std::optional<AutoconfWatch> autoconf_watch;
  if (!o.port.empty() && config.router_discovery && config.slaac) {
    autoconf_watch.emplace(io, engine, [&](const std::vector<uroce::emulator::net::AutoconfAddress>& valid) {
      port_addresses.follow_autoconf(valid);
    });
  }
  control::ControlServer server(io, o.socket, adapter);
  // Port events for the applications; the internal loopback's link never changes.
  std::optional<LinkWatch> link_watch;
  if (!o.port.empty()) {
    link_watch.emplace(io, description.link_state, [&](bool up) {
      if (up) {
        spdlog::info("port {}: link up", description.port_name);
      } else {
        spdlog::warn("port {}: link down", description.port_name);
      }
      service.port_link_changed(up);
    });
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("{}: shutting down", strsignal(signal));
    engine.announce_shutdown();   // clients see it in shared memory at once,
    service.announce_shutdown();  // as IBV_EVENT_DEVICE_FATAL on their async event fd,
    cm_service.announce_removal();  // as RDMA_CM_EVENT_DEVICE_REMOVAL to their rdma_cm IDs,
    server.stop();                // and as a "shutdown" event; then their objects are freed
    if (link_watch) link_watch->stop();
    if (autoconf_watch) autoconf_watch->stop();
    engine.stop();
  });
  for (const bool v4 : {true, false}) {
    if (const auto g = config.routes.gateway(v4)) spdlog::info("gateway {}", uroce::wire::to_string(*g));
  }
  spdlog::info("uroced ready: device {}, port {} ({}), address {}, control socket {}", description.device_name,
               description.port_name, uroce::wire::to_string(description.mac),
               uroce::wire::to_string(o.addresses.front()), o.socket);
  // Off the engine's CPU (control_thread.hpp). A control thread that fails stops the engine, and serve()
  // then reports its error: a daemon must not go on polling with nobody left to answer its clients.
  port::ControlThread control("uroce-control", [&] {
    try {
      io.run();
    } catch (...) {
      engine.stop();
      throw;
    }
  });
  try {
    engine.run();  // the engine runs on the EAL's main lcore, this thread
  } catch (...) {
    io.stop();  // or the control thread's join, on the way out, would wait for ever
    throw;
  }
  io.post([&] {
    signals.cancel();
    server.stop();
    if (link_watch) link_watch->stop();
    if (autoconf_watch) autoconf_watch->stop();
  });
  control.join();
  // A memif peer that is still polling can crash in DPDK 22.11's memif driver when our end disappears
  // under it, unless it guards its bursts as uroced does (emulator/port/unmap_guard.hpp): another DPDK
  // program may not. When both ends shut down together, a short pause lets the peer stop polling first.
  if (o.port.rfind("net_memif", 0) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  spdlog::info("uroced stopped");
  return 0;
}

#ifndef UROCED_ALL_PMDS
// A port that only a libibverbs-based driver (mlx4/mlx5) can drive is served by uroced-all-pmds, built
// beside uroced from the same sources on Debian's shared DPDK (emulator/dpdk.cmake). It replaces this
// process with the same arguments; returns only if it could not.
int run_all_pmds_build(char** argv, const std::string& devargs) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string sibling = (ec ? std::filesystem::path(".") : self.parent_path()) / "uroced-all-pmds";
  std::fprintf(stderr, "uroced: port %s is driven by DPDK's mlx driver (through libibverbs): running %s\n",
               devargs.c_str(), sibling.c_str());
  execv(sibling.c_str(), argv);
  std::fprintf(stderr, "uroced: cannot run %s: %s\n", sibling.c_str(), std::strerror(errno));
  return 2;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  DaemonOptions options;
  CLI::App app{"uroced: a software RoCEv2 NIC on DPDK"};
  describe_options(app, options);
  try {
    app.parse(argc, argv);
    finish_options(options);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uroced: %s\n", e.what());
    return 2;
  }
  // Under uroce-run the verbs shim comes first on the library path, and DPDK's mlx5 driver, which EAL
  // loads at start-up, would bind to it instead of the real libibverbs: the NIC would talk to itself.
  const char* shim_dir = std::getenv("UROCE_SHIM_DIR");
  const char* library_path = std::getenv("LD_LIBRARY_PATH");
  if (shim_dir != nullptr && library_path != nullptr && std::strstr(library_path, shim_dir) != nullptr) {
    std::fprintf(stderr, "uroced: do not run uroced under uroce-run (the verbs shim is on LD_LIBRARY_PATH)\n");
    return 2;
  }
#ifndef UROCED_ALL_PMDS
  if (port::needs_verbs_based_driver(options.port)) return run_all_pmds_build(argv, options.port);
#endif
  spdlog::set_level(options.log_level);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e uroced[%P] %^%l%$ %v");
  signal(SIGPIPE, SIG_IGN);  // a client that vanished is an error on its socket, not the daemon's death
  try {
    return serve(options);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
