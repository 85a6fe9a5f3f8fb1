// The engine: one thread that is the NIC's data path, a run-to-completion loop in the style of DPDK's
// l2fwd. Each turn: commands from the control thread, a receive burst (classified: RoCE to the transport,
// ARP, neighbour discovery and ICMP answered, the rest counted and dropped), work requests posted by clients,
// the transport's requesters and timers, completions and events back to clients, ARP and ND retries, one
// transmit burst.
//
// When a turn finds nothing to do for a while the engine backs off (spin, nap, then sleep with a growing
// timeout bounded by the next timer: back_off.hpp), because on a small machine it shares the CPU with the
// applications it serves. Clients wake it through an eventfd only when it says it sleeps (docs/daemon.md).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "emulator/daemon/engine_access.hpp"
#include "emulator/engine/back_off.hpp"
#include "emulator/engine/capture.hpp"
#include "emulator/engine/conflict_log.hpp"
#include "emulator/engine/drop_log.hpp"
#include "emulator/engine/engine_clock.hpp"
#include "emulator/engine/queue_service.hpp"
#include "emulator/net/address_autoconf.hpp"
#include "emulator/net/address_conflicts.hpp"
#include "emulator/net/arp_cache.hpp"
#include "emulator/net/arp_responder.hpp"
#include "emulator/net/counters.hpp"
#include "emulator/net/icmp.hpp"
#include "emulator/net/igmp.hpp"
#include "emulator/net/link_pause.hpp"
#include "emulator/net/mld.hpp"
#include "emulator/net/nd_cache.hpp"
#include "emulator/net/nd_responder.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/router_discovery.hpp"
#include "emulator/net/routes.hpp"
#include "emulator/port/dpdk_port.hpp"
#include "emulator/protocol/shared_region.hpp"
#include "transport/device.hpp"
#include "transport/outgoing_frame.hpp"

struct rte_mbuf;

namespace uroce::emulator::engine {

struct EngineConfig {
  std::vector<wire::IpAddress> addresses;  // the port's IP addresses, GID table order
  net::Routes routes;                      // on-link subnets and gateways (everything on the link by default)
  bool router_discovery = true;            // IPv6 routers and on-link prefixes learned from advertisements
  bool slaac = true;                       // and addresses formed under their autonomous prefixes
  transport::CongestionConfig congestion;  // CNPs for CE-marked packets
  std::string capture_path;                // empty: no capture
  bool capture_received = true;            // false on the loopback, where what is received was just sent
  double rx_loss = 0;                      // fraction of received RoCE frames dropped on purpose (tests)
  uint64_t loss_seed = 1;
  BackOffConfig back_off;                  // spin, naps and sleeps when idle (back_off.hpp)
  std::optional<wire::MacAddress> mac;      // instead of the port's own (ring ports have none)
  // The port is the NIC's loopback: what goes on its wire comes back to it, multicast included, so the
  // engine does not deliver its own multicast to its QPs a second time.
  bool wire_loops_back = false;
  unsigned ip_mtu = 1500;                  // the port's IP MTU; the RoCE path MTU follows from it
  // The 802.1Q VLAN the port sits on: every frame it sends is tagged with it (RoCE frames with their
  // service level as priority), and only frames tagged with it are taken. 0: priority-tagged frames.
  std::optional<uint16_t> vlan;
  // What gives a RoCE frame's priority for the link partner's PFC: its 802.1p PCP (false: the SL on a VLAN,
  // 0 untagged, ConnectX's "trust pcp") or its DSCP (true: DSCP >> 3, ConnectX's "trust dscp" default map,
  // what routed lossless fabrics use, having no VLAN tag end to end).
  bool trust_dscp = false;
  // The link's speed: how long the link partner's pause quanta (512 bit times each) hold a priority.
  uint64_t link_bits_per_second = 100'000'000'000;
  transport::DeviceLimits limits;
};

// Counters of the engine itself (the transport, the queues and the network layer have their own).
struct EngineCounters {
  uint64_t loops = 0;
  uint64_t naps = 0;
  uint64_t napped_ns = 0;          // time spent in naps (awake for clients, see back_off.hpp)
  uint64_t yields = 0;             // naps that were sched_yield() calls
  uint64_t slow_yields = 0;        // yields that kept the engine away (BackOffConfig::slow_yield_ns)
  uint64_t starving_receiver_yields = 0;  // naps because a receive queue ran low (a timed nap with --nap sleep)
  uint64_t sleeps = 0;
  uint64_t slept_ns = 0;           // time spent asleep in the idle back-off
  uint64_t rx_bursts = 0;
  uint64_t tx_frames = 0;
  uint64_t tx_no_mbuf = 0;         // a frame could not be sent: the mbuf pool was empty
  // No source address of the destination's family (or its GID entry emptied), or off the link with no gateway.
  uint64_t tx_no_route = 0;
  uint64_t rx_injected_loss = 0;   // dropped by EngineConfig::rx_loss
};

class Engine final : public transport::PacketSink, public EngineAccess {
 public:
  Engine(port::DpdkPort& port, EngineConfig config);
  ~Engine() override;

  // The loop; returns after stop(). Call from the thread that is to be the engine.
  void run();
  void stop();

  void run_on_engine(const std::function<void(EngineContext&)>& fn) override;

  int wake_fd() const { return wake_fd_; }
  verbs::Mtu active_mtu() const { return active_mtu_; }
  int status_fd() const { return status_.fd(); }
  // Tells clients (through the status page) that the daemon is going away.
  void announce_shutdown();
  // The port's addresses changed while it runs (uroce address add or del; engine thread: through
  // EngineContext::set_addresses). `gids` is the new GID table, an empty entry being the zero address so
  // that the others keep their indexes; `routes` the subnets and gateways that go with it. An address that
  // is new is probed for and announced as at start; the status page's GID generation becomes `generation`.
  void set_addresses(std::vector<wire::IpAddress> gids, net::Routes routes, uint32_t generation);

  // The PacketSink the transport transmits through (engine thread only).
  void transmit(const transport::OutPacket& packet) override;
  // A raw packet QP's frame: to the wire, and back to the port's own flow rules where a NIC's switch would
  // loop it back (a frame to the port's MAC never leaves; a multicast one goes both ways).
  void transmit_frame(uint32_t sender, std::span<const uint8_t> frame) override;

 private:
  struct Command {
    const std::function<void(EngineContext&)>* fn;
    bool done = false;
    std::exception_ptr failure;  // what the command threw, rethrown to its caller
  };

  bool turn(transport::Nanos now);
  unsigned receive_burst(transport::Nanos now);
  unsigned receive_local(transport::Nanos now);
  // `sender`: the raw packet QP that sent a frame looping back (0: any other frame).
  void handle_frame(std::span<const uint8_t> frame, transport::Nanos now, bool captured, uint32_t sender = 0);
  unsigned run_commands(transport::Nanos now);
  void queue_copy(std::span<const uint8_t> frame);
  // Asks whether another station already uses `ip` and announces it as ours (ARP, or neighbour discovery
  // and the MLD report of its solicited-node group), as at start or when an address is added.
  void announce(const wire::IpAddress& ip, transport::Nanos now);
  unsigned flush_tx();
  // Frames of a priority the link partner paused (PFC, PAUSE) wait here, in order, and go once it is
  // released; frames of other priorities pass. At most max_held frames wait: the mbufs are the port's.
  void send_or_hold(rte_mbuf* m);
  void hold(unsigned priority, rte_mbuf* m);
  unsigned release_held(transport::Nanos now);
  // When the first held frame's pause ends (transport::never with none held): the idle back-off's deadline.
  transport::Nanos held_deadline() const;
  template <class Output>
  void send_output(Output& out);
  // Lets ARP, ND, IGMP or MLD do what is due by `now` (its poll()) and sends what it made.
  template <class Protocol, class Output>
  void poll_due(Protocol& protocol, Output& out, transport::Nanos now);
  // The port's multicast groups follow the QPs attached to them (Device::multicast_groups): the receive
  // filter (PortAddresses::groups) and IGMP (IPv4) or MLD (IPv6) membership, joined and left as groups
  // come and go.
  void sync_multicast_groups(transport::Nanos now);
  // EngineContext::neighbour_known: the ARP or ND cache, resolving on a miss.
  bool neighbour_known(const wire::IpAddress& ip, transport::Nanos now);
  // Where a frame for `dst` goes first: the configured routes, then what router discovery learned (a
  // configured subnet or gateway wins over an advertised one). Nothing: no route.
  std::optional<wire::IpAddress> next_hop(const wire::IpAddress& dst, transport::Nanos now) const;
  void rest(const BackOff::Step& step, transport::Nanos now);  // a nap or a sleep
  void wait_for_wake(uint64_t timeout_ns);
  bool commands_waiting();

  port::DpdkPort& port_;
  EngineConfig config_;
  transport::Device device_;
  QueueService queues_;
  net::PortAddresses addresses_;
  net::NetCounters net_counters_;
  net::AddressConflicts conflicts_;
  net::ArpCache arp_;
  net::ArpResponder arp_responder_;
  net::NdCache nd_;
  net::NdResponder nd_responder_;
  net::IcmpEchoResponder icmp_;
  net::IgmpMembership igmp_;
  net::MldMembership mld_;
  net::RouterDiscovery router_discovery_;
  net::AddressAutoconf autoconf_;
  net::ArpOutput arp_out_;
  net::NdOutput nd_out_;
  net::IgmpOutput igmp_out_;
  net::MldOutput mld_out_;
  net::RouterDiscoveryOutput router_discovery_out_;
  uint64_t multicast_generation_ = 0;  // Device::multicast_generation() when the groups were last synced
  std::unique_ptr<Capture> capture_;
  EngineCounters counters_;
  DropLog drop_log_;
  ConflictLog conflict_log_;
  uint16_t ip_identification_ = 0;
  verbs::Mtu active_mtu_ = verbs::Mtu::mtu_256;
  transport::Nanos now_ = 0;  // the current turn's time, for transmit()

  std::vector<rte_mbuf*> tx_;
  net::LinkPause link_pause_;
  std::array<std::deque<rte_mbuf*>, 8> held_;
  size_t held_count_ = 0;
  static constexpr size_t max_held = 512;  // an eighth of the port's 4095 mbufs: receiving never starves
  // Frames to one of our own addresses: delivered to ourselves at the next turn, never put on the wire,
  // as a NIC loops back traffic between two of its own QPs (and as rxe does).
  std::vector<rte_mbuf*> local_;
  std::vector<rte_mbuf*> local_turn_;
  // Raw packet QPs' frames looping back to the port's flow rules, with the QP that sent each (which does
  // not get its own frame back).
  std::vector<std::pair<rte_mbuf*, uint32_t>> raw_local_;
  std::vector<std::pair<rte_mbuf*, uint32_t>> raw_local_turn_;
  std::vector<rte_mbuf*> sniffed_;  // copies of sent frames for the sniffer rules (flush_tx)
  std::vector<rte_mbuf*> sniffed_turn_;
  std::vector<uint8_t> scratch_;
  std::vector<uint32_t> low_receive_queues_;  // Device::take_low_receive_queues' scratch
  bool receiver_starving_ = false;            // the last turn saw a receive queue run low (back_off.hpp)
  std::mt19937_64 loss_rng_;

  int wake_fd_ = -1;
  protocol::SharedRegion status_;
  std::atomic<bool> stop_{false};
  std::mutex commands_mutex_;
  std::condition_variable commands_done_;
  std::deque<Command*> commands_;
  std::atomic<uint32_t> commands_pending_{0};
  bool finished_ = false;  // run() returned: commands are refused (under commands_mutex_)
  EngineClock clock_;
  BackOff back_off_;
};

}  // namespace uroce::emulator::engine
