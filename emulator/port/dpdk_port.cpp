#include "emulator/port/dpdk_port.hpp"

#include "emulator/port/devargs.hpp"
#include "emulator/port/interrupt_thread.hpp"
#include "emulator/port/kernel_interface.hpp"
#include "emulator/port/mbuf_pool.hpp"
#include "emulator/port/unmap_guard.hpp"

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_pause.h>
#include <spdlog/spdlog.h>

#include <dirent.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <set>

namespace uroce::emulator::port {
namespace {

constexpr uint32_t kMemifDefaultBuffer = 2048;  // the memif driver's bsize when none is given

std::set<int> open_fds() {
  std::set<int> fds;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') fds.insert(std::atoi(e->d_name));
    }
    closedir(d);
  }
  return fds;
}

bool is_packet_socket(int fd) {
  int domain = 0;
  socklen_t len = sizeof domain;
  return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_PACKET;
}

// How many times send_or_drop retries a tx burst that took nothing before it drops the rest: a few
// hundred nanoseconds, enough for a driver to reclaim descriptors, short enough not to stall the engine.
constexpr int kTxRetries = 32;

std::string reason(int rc) { return rte_strerror(rc < 0 ? -rc : rc); }

void check(int rc, const std::string& what, const std::string& port) {
  if (rc < 0) throw PortError(port + ": " + what + " failed: " + reason(rc));
}

// The port a probe created: ethdev names vdev ports after their device; a PCI device's ports are found
// through the device (one device may have several ports, e.g. mlx5 representors: the first is ours).
std::optional<uint16_t> find_port(const std::string& device) {
  uint16_t port_id;
  if (rte_eth_dev_get_port_by_name(device.c_str(), &port_id) == 0) return port_id;
  RTE_ETH_FOREACH_DEV(port_id) {
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(port_id, &info) == 0 && info.device &&
        device == rte_dev_name(info.device))
      return port_id;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<DpdkPort> DpdkPort::open(const std::string& devargs, const PortOptions& options) {
  std::string args = with_frame_size_settings(devargs, options.max_frame);
  std::string device(device_name(args));
  // af_packet's kernel ring drops what arrives while it is full, and the PMD's default (512 slots) is
  // about 5 ms of traffic at 100 k frames/s: less than a scheduling delay on a loaded machine, and a UD
  // burst is lost. 2048 slots (unless the user chose framecnt) ride that out.
  if (device.starts_with("net_af_packet") && !has_key(args, "framecnt")) args += ",framecnt=2048";
  // memif likewise: a sender finding the ring full drops; 4096 slots (2^12) instead of 1024 (2^10).
  const bool memif = device.starts_with("net_memif");
  if (memif && !has_key(args, "rsize")) args += ",rsize=12";
  // memif's buffers are 2 KiB, and a larger frame goes as a chain of them; DPDK 22.11's server (master) end
  // sends such chains wrong (seen at MTU 4200: its READ responses arrived at the client as millions of
  // frames, most of them garbage). So with a larger MTU every frame gets one buffer.
  if (memif && options.mtu && !has_key(args, "bsize")) {
    const uint32_t frame = uint32_t{*options.mtu} + RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN;
    if (frame > kMemifDefaultBuffer) args += ",bsize=" + std::to_string((frame + 127) / 128 * 128);
  }
  if (is_pci_address(device) && device.size() == 7) device = "0000:" + device;  // as DPDK names it
  // The pool first: if EAL memory is short, nothing has been probed yet that would need undoing.
  auto pool = make_frame_pool(options.mbufs, options.max_frame, SOCKET_ID_ANY);
  // Devices named with -a at EAL start-up are probed already: -EEXIST then just means "use it".
  const bool af_packet = device.starts_with("net_af_packet");
  const std::set<int> fds_before = af_packet ? open_fds() : std::set<int>{};
  int rc = rte_dev_probe(args.c_str());
  if (rc < 0 && rc != -EEXIST) throw PortError("cannot open port " + args + ": " + reason(rc));
  // The af_packet PMD's sockets (one per queue pair, made by the probe) poll readable when their mmap'ed
  // rx ring holds a frame: the rx "interrupt" the PMD itself does not offer. DPDK does not hand them
  // out, so they are recognised as the AF_PACKET sockets the probe opened.
  std::vector<int> rx_wait_fds;
  if (af_packet) {
    for (int fd : open_fds()) {
      if (!fds_before.contains(fd) && is_packet_socket(fd)) rx_wait_fds.push_back(fd);
    }
  }
  auto port_id = find_port(device);
  if (!port_id) throw PortError("port " + args + " was probed but no ethdev port appeared");
  std::unique_ptr<DpdkPort> port(new DpdkPort(device, *port_id, std::move(pool), {}, options.max_frame));
  if (device.starts_with("net_af_packet") || device.starts_with("net_tap"))
    port->kernel_interface_ = value_of(args, "iface").value_or("");
  port->rx_wait_fds_ = std::move(rx_wait_fds);
  port->memif_ = memif;
  port->start(options);  // on failure the destructor closes and detaches the device
  return port;
}

DpdkPort::DpdkPort(std::string name, uint16_t port_id, std::shared_ptr<rte_mempool> pool,
                   std::vector<std::shared_ptr<rte_ring>> rings, uint32_t max_frame)
    : name_(std::move(name)), port_id_(port_id), pool_(std::move(pool)), rings_(std::move(rings)),
      max_frame_(max_frame) {}

void DpdkPort::start(const PortOptions& options) {
  rte_eth_dev_info info{};
  check(rte_eth_dev_info_get(port_id_, &info), "reading device info", name_);
  rte_eth_conf conf{};
  // Without an MTU in the configuration ethdev resets it to 1500; keep the one the device came up with
  // (options.mtu, if any, is set below). af_packet's ethdev MTU is 1500 whatever its kernel interface has
  // (see kernel_interface.hpp), and configuring it does not touch the kernel interface.
  uint16_t current_mtu = 0;
  if (rte_eth_dev_get_mtu(port_id_, &current_mtu) == 0 && current_mtu >= info.min_mtu &&
      current_mtu <= info.max_mtu)
    conf.rxmode.mtu = current_mtu;
  check(rte_eth_dev_configure(port_id_, 1, 1, &conf), "configure", name_);
  uint16_t rx_descriptors = options.rx_descriptors, tx_descriptors = options.tx_descriptors;
  check(rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rx_descriptors, &tx_descriptors), "sizing queues", name_);
  int socket = rte_eth_dev_socket_id(port_id_);
  check(rte_eth_rx_queue_setup(port_id_, 0, rx_descriptors, socket, nullptr, pool_.get()), "rx queue setup",
        name_);
  check(rte_eth_tx_queue_setup(port_id_, 0, tx_descriptors, socket, nullptr), "tx queue setup", name_);
  if (options.mtu) set_mtu(*options.mtu);
  check(rte_eth_dev_start(port_id_), "start", name_);
  if (options.promiscuous) {
    int rc = rte_eth_promiscuous_enable(port_id_);
    if (rc < 0) spdlog::warn("{}: promiscuous mode not enabled: {}", name_, reason(rc));
  }
  if (options.all_multicast && !options.promiscuous) {
    // af_packet and the ring ports have no such switch (an af_packet socket sees multicast anyway).
    int rc = rte_eth_allmulticast_enable(port_id_);
    if (rc < 0) spdlog::debug("{}: all-multicast mode not enabled: {}", name_, reason(rc));
  }
  spdlog::info("port {} (id {}, driver {}) started: MAC {}, MTU {}, {} rx / {} tx descriptors", name_, port_id_,
               info.driver_name ? info.driver_name : "?", wire::to_string(mac()), mtu(), rx_descriptors,
               tx_descriptors);
}

DpdkPort::~DpdkPort() {
  rte_eth_dev_info info{};
  rte_device* device = rte_eth_dev_info_get(port_id_, &info) == 0 ? info.device : nullptr;
  auto stop_and_close = [this] {
    int rc = rte_eth_dev_stop(port_id_);
    if (rc < 0) spdlog::debug("{}: stop: {}", name_, reason(rc));
    rc = rte_eth_dev_close(port_id_);
    if (rc < 0) spdlog::warn("{}: close: {}", name_, reason(rc));
  };
  // A memif port's peer can disconnect on the interrupt thread while we stop it (interrupt_thread.hpp).
  // Once closed, the port has no control channel left for that thread to act on.
  if (memif_) {
    run_on_interrupt_thread(stop_and_close);
  } else {
    stop_and_close();
  }
  // Detach the device from its bus, so the same devargs can be opened again (hotplug).
  if (device) {
    int rc = rte_dev_remove(device);
    if (rc < 0) spdlog::warn("{}: detach: {}", name_, reason(rc));
  }
  spdlog::debug("port {} closed", name_);
}

uint16_t DpdkPort::rx_burst(rte_mbuf** out, uint16_t n) {
  if (!memif_) return rte_eth_rx_burst(port_id_, 0, out, n);
  const UnmapGuard guard;
  return guard.admitted() ? rte_eth_rx_burst(port_id_, 0, out, n) : 0;
}

uint16_t DpdkPort::tx_burst(rte_mbuf** pkts, uint16_t n) {
  if (!memif_) return rte_eth_tx_burst(port_id_, 0, pkts, n);
  const UnmapGuard guard;
  return guard.admitted() ? rte_eth_tx_burst(port_id_, 0, pkts, n) : 0;
}

uint16_t DpdkPort::send_or_drop(rte_mbuf** pkts, uint16_t n) {
  uint16_t sent = 0;
  for (int idle = 0; sent < n && idle < kTxRetries;) {
    uint16_t taken = tx_burst(pkts + sent, n - sent);
    sent += taken;
    if (taken == 0) {
      ++idle;
      rte_pause();
    } else {
      idle = 0;
    }
  }
  if (sent < n) {
    rte_pktmbuf_free_bulk(pkts + sent, n - sent);
    tx_dropped_ += n - sent;
  }
  return sent;
}

rte_mbuf* DpdkPort::alloc() { return rte_pktmbuf_alloc(pool_.get()); }

wire::MacAddress DpdkPort::mac() const {
  rte_ether_addr address{};
  rte_eth_macaddr_get(port_id_, &address);
  wire::MacAddress result;
  std::memcpy(result.bytes.data(), address.addr_bytes, result.bytes.size());
  return result;
}

uint16_t DpdkPort::mtu() const {
  if (!kernel_interface_.empty())
    if (auto value = kernel_mtu(kernel_interface_)) return *value;
  if (software_mtu_) return *software_mtu_;
  uint16_t value = 0;
  rte_eth_dev_get_mtu(port_id_, &value);
  return value;
}

void DpdkPort::set_mtu(uint16_t mtu) {
  if (uint32_t{mtu} + RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN > max_frame_)
    throw PortError(name_ + ": MTU " + std::to_string(mtu) + " does not fit into mbufs of " +
                    std::to_string(max_frame_) + " bytes");
  if (!kernel_interface_.empty()) {
    set_kernel_mtu(kernel_interface_, mtu);
    return;
  }
  const int rc = rte_eth_dev_set_mtu(port_id_, mtu);
  if (rc == -ENOTSUP && memif_) {
    software_mtu_ = mtu;
    return;
  }
  check(rc, "set MTU " + std::to_string(mtu), name_);
}

LinkStatus DpdkPort::link() const {
  rte_eth_link status{};
  if (rte_eth_link_get_nowait(port_id_, &status) < 0) return {};
  LinkStatus result{status.link_status == RTE_ETH_LINK_UP,
                    status.link_speed == RTE_ETH_SPEED_NUM_UNKNOWN ? 0u : status.link_speed,
                    status.link_duplex == RTE_ETH_LINK_FULL_DUPLEX};
  // af_packet's driver reports its link up for as long as the port runs; the interface's carrier is the
  // real state (kernel_interface.hpp). A port that is not started stays down whatever the kernel says.
  if (result.up && !kernel_interface_.empty()) {
    if (const auto carrier = kernel_link_up(kernel_interface_)) result.up = *carrier;
  }
  return result;
}

PortStats DpdkPort::stats() const {
  rte_eth_stats raw{};
  PortStats result;
  if (rte_eth_stats_get(port_id_, &raw) == 0) {
    result.ipackets = raw.ipackets;
    result.opackets = raw.opackets;
    result.ibytes = raw.ibytes;
    result.obytes = raw.obytes;
    result.ierrors = raw.ierrors;
    result.imissed = raw.imissed;
    result.oerrors = raw.oerrors;
    result.rx_nombuf = raw.rx_nombuf;
  }
  result.tx_dropped = tx_dropped_;
  return result;
}

void DpdkPort::reset_stats() {
  rte_eth_stats_reset(port_id_);
  rte_eth_xstats_reset(port_id_);
  tx_dropped_ = 0;
}

std::optional<uint64_t> DpdkPort::xstat(const std::string& name) const {
  uint64_t id = 0, value = 0;
  if (rte_eth_xstats_get_id_by_name(port_id_, name.c_str(), &id) != 0) return std::nullopt;
  if (rte_eth_xstats_get_by_id(port_id_, &id, &value, 1) != 1) return std::nullopt;
  return value;
}

std::vector<std::pair<std::string, uint64_t>> DpdkPort::xstats() const {
  int count = rte_eth_xstats_get_names(port_id_, nullptr, 0);
  if (count <= 0) return {};
  std::vector<rte_eth_xstat_name> names(static_cast<size_t>(count));
  std::vector<rte_eth_xstat> values(static_cast<size_t>(count));
  if (rte_eth_xstats_get_names(port_id_, names.data(), count) != count) return {};
  int got = rte_eth_xstats_get(port_id_, values.data(), count);
  if (got <= 0 || got > count) return {};
  std::vector<std::pair<std::string, uint64_t>> result;
  for (int i = 0; i < got; ++i)
    if (values[i].id < names.size()) result.emplace_back(names[values[i].id].name, values[i].value);
  return result;
}

}  // namespace uroce::emulator::port
