// One Ethernet port through DPDK: any device from devargs, or a ring-backed port made in-process.
#pragma once

#include "transport/wire/address.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

namespace uroce::emulator::port {

struct PortError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PortOptions {
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  // Every mbuf holds `max_frame` bytes in one segment (no scatter: the engine parses frames in place).
  // At ~9.5 KB per mbuf, 4095 mbufs are ~39 MB of EAL memory per port: enough for both descriptor
  // rings plus the engine's bursts in flight. (2^n - 1 is the mempool's best size.)
  uint32_t mbufs = 4095;
  uint32_t max_frame = 9216;  // a jumbo frame (9000 MTU + headers) with room to spare
  bool promiscuous = false;
  // Receive every multicast frame: IPv6 neighbour discovery arrives on solicited-node groups (33:33:ff:..),
  // which a NIC's MAC filter drops otherwise. A port that cannot (ring ports) runs without it.
  bool all_multicast = true;
  std::optional<uint16_t> mtu;  // set at start-up (for af_packet and tap: their kernel interface's MTU)
};

struct LinkStatus {
  bool up = false;
  uint32_t speed_mbps = 0;  // 0 when unknown
  bool full_duplex = false;
};

struct PortStats {
  uint64_t ipackets = 0, opackets = 0, ibytes = 0, obytes = 0;
  uint64_t ierrors = 0, imissed = 0, oerrors = 0, rx_nombuf = 0;
  uint64_t tx_dropped = 0;  // frames send_or_drop gave up on (ours, not the driver's)
};

// Configured with one rx and one tx queue and started; stopped, closed and detached when destroyed.
// Not thread-safe: the engine thread alone uses a port (DPDK queues are single-threaded too).
//
// Driver notes (DPDK 22.11, measured by tests/emulator/port):
// - af_packet: ring slots are sized for max_frame (devargs.hpp); the MTU is the kernel interface's.
// - memif: a receiver hands its buffers to the sender inside rx_burst, so a peer can send only after
//   this port has polled once (the engine polls all the time). A peer that goes away is noticed on EAL's
//   interrupt thread, which unmaps the shared memory with no synchronisation with a burst running on
//   the engine thread: a burst caught in that window crashed inside the PMD (SIGSEGV). memif bursts are
//   therefore guarded against munmap (unmap_guard.hpp). The driver has no MTU setting (ENOTSUP) and
//   enforces none, so set_mtu keeps the MTU as the port's own; open() sizes its buffers (bsize) for a
//   whole frame, since chains of buffers sent from its server end arrive corrupted.
// - tap: like af_packet, the MTU is the kernel interface's (kernel_interface.hpp).
class DpdkPort {
 public:
  // Probes the device (rte_dev_probe; a PCI device must also be in EalOptions::pci_devices) and starts
  // it. For af_packet, frame size settings for max_frame are added (see with_frame_size_settings).
  static std::unique_ptr<DpdkPort> open(const std::string& devargs, const PortOptions& options = {});
  // The internal loopback: one ring is the port's rx and its tx, so every frame sent is received by the
  // same port, as with a NIC's own loopback. `name` must be unique among ports.
  static std::unique_ptr<DpdkPort> loopback(const std::string& name, const PortOptions& options = {});
  // Two ports joined back to back by a pair of rings (a cable): what one sends, the other receives.
  // They share one mbuf pool, so mbufs in flight stay valid whichever port goes first.
  static std::pair<std::unique_ptr<DpdkPort>, std::unique_ptr<DpdkPort>> cable(
      const std::string& name_a, const std::string& name_b, const PortOptions& options = {});

  ~DpdkPort();
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  // Up to n received frames into out; the caller owns (and frees or forwards) them.
  uint16_t rx_burst(rte_mbuf** out, uint16_t n);
  // Queues up to n frames; those not taken (pkts[result..n)) still belong to the caller.
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n);
  // tx_burst, retried a few times while the driver makes progress, then the rest are freed and counted
  // in stats().tx_dropped: what a NIC does when its queue stays full. Returns the number sent.
  uint16_t send_or_drop(rte_mbuf** pkts, uint16_t n);
  rte_mbuf* alloc();  // nullptr when the pool is empty
  rte_mempool* mempool() const { return pool_.get(); }

  const std::string& name() const { return name_; }
  uint16_t port_id() const { return port_id_; }
  wire::MacAddress mac() const;
  // The MTU: DPDK's, or for af_packet and tap its kernel interface's (see kernel_interface.hpp).
  uint16_t mtu() const;
  // Throws PortError with the driver's reason, or if a frame of that MTU (+ Ethernet header and a VLAN
  // tag) would not fit into one mbuf.
  void set_mtu(uint16_t mtu);
  // The kernel interface behind an af_packet or tap port (its iface= devargs), empty for other ports.
  const std::string& kernel_interface() const { return kernel_interface_; }
  uint32_t max_frame() const { return max_frame_; }
  // File descriptors that poll(2) readable (POLLIN) when a frame is waiting to be received, for ports
  // whose driver offers no rx interrupt but has one underneath: af_packet's sockets (their rx ring).
  // Empty for other ports. The driver owns them; use them only to wait, never to read.
  const std::vector<int>& rx_wait_fds() const { return rx_wait_fds_; }
  // The driver's link status; for af_packet and tap ports, up only if the kernel interface has a carrier.
  LinkStatus link() const;
  PortStats stats() const;
  void reset_stats();
  std::optional<uint64_t> xstat(const std::string& name) const;
  std::vector<std::pair<std::string, uint64_t>> xstats() const;

 private:
  DpdkPort(std::string name, uint16_t port_id, std::shared_ptr<rte_mempool> pool,
           std::vector<std::shared_ptr<rte_ring>> rings, uint32_t max_frame);
  void start(const PortOptions& options);

  std::string name_;
  uint16_t port_id_;
  std::shared_ptr<rte_mempool> pool_;
  std::vector<std::shared_ptr<rte_ring>> rings_;  // destroyed before pool_: their mbufs go back to it
  uint32_t max_frame_;
  std::string kernel_interface_;
  std::vector<int> rx_wait_fds_;
  uint64_t tx_dropped_ = 0;
  // A memif port, whose driver (DPDK 22.11) races with itself: its bursts must not overlap a munmap
  // (unmap_guard.hpp), and it is stopped and closed on EAL's interrupt thread, where its control channel
  // is handled (interrupt_thread.hpp).
  bool memif_ = false;
  std::optional<uint16_t> software_mtu_;  // a memif port's MTU, which its driver cannot hold
};

}  // namespace uroce::emulator::port
