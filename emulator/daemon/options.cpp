#include "emulator/daemon/options.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace uroce::emulator {

void describe_options(CLI::App& app, DaemonOptions& o) {
  app.footer(
      "Without --port, uroced runs an internal loopback port (address 192.0.2.1): programs on this host\n"
      "talk RDMA to each other through it, every packet taking the full RoCEv2 path.\n"
      "With --port, give the port an address the kernel does NOT own on that interface (e.g. a veth\n"
      "whose kernel side has no address, or ARP off): the kernel would otherwise answer ARP and ICMP too\n"
      "(for IPv6 addresses: disable IPv6 on it, net.ipv6.conf.IF.disable_ipv6=1, or it answers ND).\n"
      "Examples:\n"
      "  uroced\n"
      "  uroced --port net_af_packet0,iface=veth0 --ip 10.0.0.1 --socket /run/uroce/a.sock\n"
      "  uroced --port net_memif0,role=server,socket=/run/memif.sock --ip 10.0.1.1\n"
      "  uroced --port net_af_packet0,iface=veth0 --ip 10.0.0.1 --ip fd00:75::1   (GIDs: those two, then fe80::)\n"
      "  uroced --port net_af_packet0,iface=veth0 --ip 10.81.1.1/24 --gateway 10.81.1.254   (routed RoCEv2)\n"
      "  uroced --config /etc/uroce/uroced.toml   (same names as the options: port = \"...\")");
  app.set_config("--config", "", "read options from a TOML file (keys are the long option names)");
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error, not ignored
  app.add_option("--port", o.port,
                 "DPDK devargs of the Ethernet port: a vdev (net_af_packet0,iface=IF / net_memif0,... / "
                 "net_tap0,... / net_pcap0,...) or a PCI address; default: the internal loopback");
  app.add_option("--ip", o.ip_text,
                 "an IPv4 or IPv6 address of the port, with its prefix length or not (10.0.0.1/24: other "
                 "destinations go through --gateway; 10.0.0.1: every destination is on the link) "
                 "(repeatable; GID index order; a real port also gets its fe80:: link-local address after "
                 "these, unless --no-link-local)");
  app.add_option("--gateway", o.gateway_text,
                 "the router for destinations outside the port's subnets: one IPv4 and one IPv6 at most, "
                 "each inside a subnet of an --ip (routed RoCEv2)");
  app.add_flag("--no-router-discovery", o.no_router_discovery,
               "learn no IPv6 default router or on-link prefix from Router Advertisements (a real port with "
               "a link-local address solicits them at start; a --gateway always wins over a learned router)");
  app.add_flag("--no-slaac", o.no_slaac,
               "form no IPv6 address under a prefix a Router Advertisement marks autonomous (SLAAC, RFC 4862: "
               "by default such an address, the prefix and the port's EUI-64, joins the GID table for the "
               "prefix's valid lifetime, as the kernel gives a RoCE NIC's netdev one)");
  app.add_flag("--no-link-local", o.no_link_local,
               "do not add the port's IPv6 link-local address (from its MAC) as the last GID");
  app.add_flag("--no-device-node", o.no_device_node,
               "do not make /dev/infiniband/uverbs-NAME (NAME: --device-name), the node without a driver that UCX "
               "looks for before it uses a device (made by default, and removed when the last uroced stops)");
  app.add_option("--mtu", o.mtu, "set the port's IP MTU (the RoCE path MTU follows, as in rxe)")->check(
      CLI::Range(576u, 9000u));
  CLI::Option* vlan = app.add_option("--vlan", o.vlan,
                 "put the port on this 802.1Q VLAN: every frame it sends is tagged with the ID, RoCE frames with "
                 "their address vector's service level (ibv_ah_attr.sl) as priority (PCP), as RoCE NICs do; "
                 "only frames tagged with the ID are taken (0: untagged and priority-tagged frames are taken, "
                 "RoCE frames are sent priority-tagged)")
      ->check(CLI::Range(0, 4094));
  app.add_option("--egress-qos-map", o.egress_qos_map_text,
                 "with --vlan: map Linux packet priorities to 802.1p priorities as a VLAN device's "
                 "egress-qos-map does (FROM:TO pairs, e.g. \"0:3 6:5\"; unmapped priorities give 0). rdma_cm "
                 "connections get the SL of their TOS this way, as on Linux with a RoCE NIC: the TOS gives "
                 "the priority (rt_tos2priority: 0 for TOS 0, 6 for 0x10 ...), the map the SL and so the PCP")
      ->needs(vlan)
      ->delimiter(',');
  app.add_option("--trust", o.trust,
                 "what gives a RoCE frame's priority when the link partner pauses priorities with PFC: pcp (its "
                 "802.1p priority: the SL on a --vlan port, 0 untagged) or dscp (its IP DSCP >> 3, ConnectX's "
                 "default map under mlnx_qos --trust dscp, for routed fabrics without VLAN tags)")
      ->check(CLI::IsMember({"pcp", "dscp"}))
      ->capture_default_str();
  app.add_option("--socket", o.socket, "the control socket applications connect to")->capture_default_str();
  app.add_option("--device-name", o.device_name,
                 "the RDMA device's name, as applications see it (ibv_devices, -d NAME): give each of several "
                 "uroced a program uses at once its own (UROCE_SOCKET=A:B lists both)")
      ->capture_default_str();
  app.add_option("--capture", o.capture, "write every frame sent and received to this pcap file");
  app.add_option("--rx-loss", o.rx_loss, "drop this fraction of received RoCE frames (testing recovery)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--loss-seed", o.loss_seed, "seed of --rx-loss's random choice")->capture_default_str();
  app.add_option("--spin-us", o.spin_us,
                 "stay awake this long after the last work (polling, then short naps), then sleep: clients "
                 "must wake a sleeping engine with a system call")
      ->capture_default_str();
  app.add_option("--nap", o.nap,
                 "what an idle nap is: yield (give the CPU to a thread that waits for it, back at once if none "
                 "does) or sleep (a timed sleep of --nap-us)")
      ->capture_default_str()
      ->check(CLI::IsMember({"yield", "sleep"}));
  app.add_option("--nap-us", o.nap_us,
                 "one timed nap (--nap sleep): lets an application that shares the engine's CPU run (0: poll "
                 "without napping, either kind)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 10000u));
  app.add_option("--max-sleep-us", o.max_sleep_us, "longest idle sleep (bounds idle rx latency)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 100000u));
  app.add_option("--cnp", o.cnp,
                 "congestion notification: answer a RoCE packet marked ECN Congestion Experienced with a CNP to "
                 "its sender's QP (RC, UC), as RoCE NICs do for DCQCN")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--cnp-interval-us", o.cnp_interval_us, "at most one CNP per QP in this time")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1000000u));
  app.add_option("--dcqcn", o.dcqcn,
                 "congestion reaction (DCQCN): a CNP cuts its QP's sending rate, which recovers in DCQCN's "
                 "stages; data packets go ECN-capable (ECT(0)) so that switches mark rather than drop them")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--core", o.core, "the CPU the engine runs on")->capture_default_str();
  app.add_option("--memory-mb", o.eal.memory_mb, "DPDK memory (mbuf pools)")->capture_default_str();
  app.add_option("--hugepages", o.hugepages_text, "use hugepages: auto, on, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_option("--log-level", o.log_level_text, "trace, debug, info, warn, error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
}

namespace {

// ip link's egress-qos-map syntax: FROM:TO pairs separated by spaces (or given as several values). Linux
// takes any 32-bit skb priority as FROM; rdma_cm's priorities come from a TOS and are 0-7, so uroce takes
// those only and says so rather than keep a mapping nothing can use.
cm::EgressQosMap parse_egress_qos_map(const std::vector<std::string>& texts) {
  cm::EgressQosMap map{};
  for (const std::string& text : texts) {
    std::istringstream pairs(text);
    for (std::string pair; pairs >> pair;) {
      unsigned from = 8, to = 8;
      char colon = 0;
      std::istringstream in(pair);
      if (!(in >> from >> colon >> to) || colon != ':' || in.peek() != EOF || from > 7 || to > 7) {
        throw std::invalid_argument("--egress-qos-map " + pair +
                                    ": not FROM:TO with a priority FROM and an 802.1p priority TO, each 0-7");
      }
      map[from] = uint8_t(to);
    }
  }
  return map;
}

}  // namespace

void finish_options(DaemonOptions& o) {
  std::vector<net::Subnet> subnets;
  for (const std::string& text : o.ip_text) {
    const auto subnet = net::parse_subnet(text);
    if (!subnet) throw std::invalid_argument("--ip " + text + ": not an IPv4 or IPv6 address (with a valid /prefix)");
    const wire::IpAddress& a = subnet->address;
    // A v4-mapped address is how an IPv4 GID is written: take it as that IPv4 address. Multicast and ::
    // can be no interface's address.
    if (a.is_multicast() || a == wire::IpAddress{}) throw std::invalid_argument("--ip " + text + ": not a unicast address");
    // One address is one GID entry, as a netdev holds an address once (ip addr add: "File exists"); twice
    // would give two GID indexes for one address and two subnets, possibly different, for one route.
    if (std::ranges::find(o.addresses, a) != o.addresses.end()) {
      throw std::invalid_argument("--ip " + text + ": the port has this address already");
    }
    o.addresses.push_back(a);
    subnets.push_back(*subnet);
  }
  std::vector<wire::IpAddress> gateways;
  for (const std::string& text : o.gateway_text) {
    const auto g = wire::parse_ip(text);
    if (!g) throw std::invalid_argument("--gateway " + text + ": not an IPv4 or IPv6 address");
    gateways.push_back(*g);
  }
  o.routes = net::Routes(subnets, gateways);  // (throws std::invalid_argument, which names the gateway)
  if (o.addresses.empty()) {
    if (!o.port.empty()) throw std::invalid_argument("--port needs at least one --ip for the port");
    uint8_t v4[4];
    inet_pton(AF_INET, default_loopback_address, v4);
    o.addresses.push_back(wire::IpAddress::from_v4_bytes(v4));
  }
  // A kernel RDMA device's name is at most 63 bytes (IB_DEVICE_NAME_MAX), and uroce's also names a file
  // (/dev/infiniband/uverbs-NAME) and a lock (/run/uroce/NAME.node-lock): no '/', no surprises.
  if (o.device_name.empty() || o.device_name.size() > 63 ||
      o.device_name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
          std::string::npos) {
    throw std::invalid_argument("--device-name '" + o.device_name +
                                "': 1 to 63 letters, digits, '_' or '-'");
  }
  o.egress_qos_map = parse_egress_qos_map(o.egress_qos_map_text);
  o.log_level = spdlog::level::from_str(o.log_level_text);
  o.eal.log_level = std::max(o.log_level, spdlog::level::warn);
  o.eal.cores = {o.core};
  o.eal.hugepages = o.hugepages_text == "on"    ? port::HugepageMode::On
                    : o.hugepages_text == "off" ? port::HugepageMode::Off
                                                : port::HugepageMode::Auto;
  // A PCI address (dddd:bb:dd.f or bb:dd.f) must be allowed on the EAL command line; vdevs are probed later.
  if (!o.port.empty() && o.port.rfind("net_", 0) != 0) {
    o.eal.pci_devices.push_back(o.port.substr(0, o.port.find(',')));
  }
}

}  // namespace uroce::emulator
