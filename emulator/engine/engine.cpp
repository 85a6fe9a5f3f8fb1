#include "emulator/engine/engine.hpp"

#include <poll.h>
#include <sched.h>
#include <rte_mbuf.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <spdlog/spdlog.h>

#include "emulator/net/arp_frames.hpp"
#include "emulator/net/classify.hpp"
#include "emulator/net/multicast.hpp"
#include "emulator/net/nd_frames.hpp"
#include "emulator/port/mbuf_frame.hpp"
#include "emulator/protocol/queue_entries.hpp"
#include "emulator/protocol/verbs_json.hpp"
#include "transport/wire/build.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::emulator::engine {

namespace {

constexpr uint16_t burst_size = 32;
constexpr size_t max_rx_wait_fds = 4;

uint64_t realtime_now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

net::PortAddresses addresses_of(const port::DpdkPort& port, const EngineConfig& config) {
  net::PortAddresses a;
  a.mac = config.mac.value_or(port.mac());
  a.ips = config.addresses;
  a.vlan_tci = config.vlan;  // priority 0 for ARP, ND and membership reports: control traffic
  return a;
}

}  // namespace

Engine::Engine(port::DpdkPort& port, EngineConfig config)
    : port_(port),
      config_(std::move(config)),
      device_(*this, config_.limits),
      queues_(device_),
      addresses_(addresses_of(port, config_)),
      arp_(addresses_, net_counters_),
      arp_responder_(addresses_, arp_, net_counters_, &conflicts_),
      nd_(addresses_, net_counters_),
      nd_responder_(addresses_, nd_, net_counters_, &conflicts_),
      icmp_(addresses_.mac, net_counters_),
      igmp_(addresses_, net_counters_),
      mld_(addresses_, net_counters_),
      router_discovery_(addresses_, net_counters_, net::RouterDiscoveryConfig{.enabled = config_.router_discovery}),
      autoconf_(addresses_.mac, net_counters_, config_.router_discovery && config_.slaac),
      link_pause_(config_.link_bits_per_second),
      loss_rng_(config_.loss_seed),
      back_off_(config_.back_off) {
  device_.set_gids(config_.addresses);
  device_.set_congestion(config_.congestion);
  // The RoCE path MTU follows the IP MTU as Linux sizes a RoCE port's, whatever its addresses (an address
  // added or removed at run time leaves it as it is). An IP MTU below 352 bytes still gets 256, the least.
  const unsigned ip_mtu = config_.ip_mtu;
  const verbs::Mtu mtu = verbs::largest_roce_mtu(ip_mtu, verbs::Mtu::mtu_256);
  active_mtu_ = mtu;
  device_.set_active_mtu(mtu);
  device_.set_max_raw_frame(ip_mtu + wire::ethernet_header_size + wire::vlan_tag_size);
  if (!config_.capture_path.empty()) capture_ = std::make_unique<Capture>(config_.capture_path);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  status_ = protocol::SharedRegion::create("uroce-engine-status", sizeof(protocol::EngineStatus));
  auto* st = reinterpret_cast<protocol::EngineStatus*>(status_.data());
  st->magic = protocol::engine_status_magic;
  st->version = 1;
  st->daemon_pid = uint32_t(getpid());
  tx_.reserve(burst_size * 4);
  scratch_.resize(port_.max_frame());
}

Engine::~Engine() {
  for (rte_mbuf* m : tx_) rte_pktmbuf_free(m);
  for (rte_mbuf* m : local_) rte_pktmbuf_free(m);
  for (auto& [m, sender] : raw_local_) rte_pktmbuf_free(m);
  for (rte_mbuf* m : sniffed_) rte_pktmbuf_free(m);
  for (auto& held : held_) {
    for (rte_mbuf* m : held) rte_pktmbuf_free(m);
  }
  if (capture_) capture_->flush();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Engine::stop() {
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
}

void Engine::announce_shutdown() {
  auto* st = reinterpret_cast<protocol::EngineStatus*>(status_.data());
  std::atomic_ref<uint32_t>(st->shutting_down).store(1, std::memory_order_release);
}

void Engine::announce(const wire::IpAddress& ip, transport::Nanos now) {
  if (ip.is_v4()) {
    uint8_t frame[net::max_arp_frame_size];
    // An ARP probe (RFC 5227 §2.1.1): sender IP 0.0.0.0, so that no one learns from it.
    queue_copy({frame, net::write_arp_request(frame, addresses_.mac, 0, ip.v4(), addresses_.vlan_tci)});
    // The announcement: peers that knew another MAC for the address update their caches.
    queue_copy({frame, net::write_gratuitous_arp(frame, addresses_.mac, ip.v4(), addresses_.vlan_tci)});
    return;
  }
  // The same for IPv6: a probe, then an unsolicited advertisement to all-nodes (RFC 4861 §7.2.6).
  // Duplicate address detection's solicitation (RFC 4862 §5.4.2): from ::, to the address's
  // solicited-node group, without a source link-layer option. An owner answers to all-nodes.
  net::NdMessage dad;
  dad.type = net::icmpv6_neighbor_solicitation;
  dad.target = ip;
  dad.ip_dst = net::solicited_node_address(ip);
  uint8_t probe[net::max_nd_frame_size];
  queue_copy({probe, net::write_nd_frame(probe, net::multicast_mac(dad.ip_dst), addresses_.mac,
                                         addresses_.vlan_tci, dad)});
  net::NdMessage na;
  na.type = net::icmpv6_neighbor_advertisement;
  na.override_flag = true;
  na.target = ip;
  na.lladdr = addresses_.mac;
  na.ip_src = ip;
  na.ip_dst = net::all_nodes_address();
  uint8_t frame[net::max_nd_frame_size];
  const size_t size =
      net::write_nd_frame(frame, net::multicast_mac(na.ip_dst), addresses_.mac, addresses_.vlan_tci, na);
  queue_copy({frame, size});
  // Neighbour discovery's solicitations for it come to its solicited-node group: report it (MLD), so that
  // a switch snooping MLD forwards them to the port, as Linux reports the groups of its addresses.
  mld_.join(net::solicited_node_address(ip), now);
}

void Engine::set_addresses(std::vector<wire::IpAddress> gids, net::Routes routes, uint32_t generation) {
  const transport::Nanos now = clock_.now();
  std::vector<wire::IpAddress> ips;
  for (const wire::IpAddress& g : gids) {
    if (!g.is_zero()) ips.push_back(g);
  }
  const std::vector<wire::IpAddress> before = std::exchange(addresses_.ips, ips);
  config_.addresses = gids;
  config_.routes = std::move(routes);
  device_.set_gids(std::move(gids));
  const auto has = [](const std::vector<wire::IpAddress>& list, const wire::IpAddress& a) {
    return std::find(list.begin(), list.end(), a) != list.end();
  };
  // A removed IPv6 address's solicited-node group is left, unless an address still here shares it.
  for (const wire::IpAddress& gone : before) {
    if (gone.is_v4() || has(ips, gone)) continue;
    const wire::IpAddress group = net::solicited_node_address(gone);
    const bool shared = std::any_of(ips.begin(), ips.end(), [&](const wire::IpAddress& a) {
      return !a.is_v4() && net::solicited_node_address(a) == group;
    });
    if (!shared) mld_.leave(group, now);
  }
  for (const wire::IpAddress& ip : ips) {
    if (!has(before, ip)) announce(ip, now);
  }
  poll_due(mld_, mld_out_, now);
  flush_tx();
  auto* st = reinterpret_cast<protocol::EngineStatus*>(status_.data());
  std::atomic_ref<uint32_t>(st->gid_generation).store(generation, std::memory_order_release);
}

// The control thread's request, run between two turns of the loop: the Device is never touched by two
// threads. The caller blocks until it ran (or until the engine stopped, which runs what is left first).
void Engine::run_on_engine(const std::function<void(EngineContext&)>& fn) {
  Command c{&fn, false, nullptr};
  {
    std::lock_guard lock(commands_mutex_);
    if (finished_) throw std::runtime_error("the engine has stopped");
    commands_.push_back(&c);
    commands_pending_.fetch_add(1, std::memory_order_release);
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof one);
  std::unique_lock lock(commands_mutex_);
  commands_done_.wait(lock, [&] { return c.done; });
  lock.unlock();
  // A command that threw (std::bad_alloc, say) has not done its work: its caller must not go on as if it
  // had (a registration that failed so returned key 0 to the application).
  if (c.failure) std::rethrow_exception(c.failure);
}

bool Engine::commands_waiting() { return commands_pending_.load(std::memory_order_acquire) != 0; }

unsigned Engine::run_commands(transport::Nanos now) {
  if (!commands_waiting()) return 0;
  std::deque<Command*> batch;
  {
    std::lock_guard lock(commands_mutex_);
    batch.swap(commands_);
    commands_pending_.store(0, std::memory_order_release);
  }
  EngineContext context{device_, queues_, now};
  context.report_counters = [this](nlohmann::json& out) {
    out["engine"] = {{"loops", counters_.loops},           {"sleeps", counters_.sleeps},
                     {"slept_us", counters_.slept_ns / 1000},
                     {"naps", counters_.naps},             {"napped_us", counters_.napped_ns / 1000},
                     {"yields", counters_.yields},         {"slow_yields", counters_.slow_yields},
                     {"starving_receiver_yields", counters_.starving_receiver_yields},
                     {"tx_frames", counters_.tx_frames},   {"tx_no_mbuf", counters_.tx_no_mbuf},
                     {"tx_no_route", counters_.tx_no_route}, {"rx_injected_loss", counters_.rx_injected_loss}};
    nlohmann::json net;
    net::for_each_counter(net_counters_, [&](std::string_view name, uint64_t v) { net[std::string(name)] = v; });
    out["net"] = net;
    const port::PortStats ps = port_.stats();
    out["port"] = {{"name", port_.name()},        {"ipackets", ps.ipackets}, {"opackets", ps.opackets},
                   {"ibytes", ps.ibytes},         {"obytes", ps.obytes},     {"ierrors", ps.ierrors},
                   {"imissed", ps.imissed},       {"oerrors", ps.oerrors},   {"rx_nombuf", ps.rx_nombuf},
                   {"tx_dropped", ps.tx_dropped}};
  };
  context.neighbour_known = [this, now](const wire::IpAddress& ip) { return neighbour_known(ip, now); };
  context.has_route = [this, now](const wire::IpAddress& ip) { return next_hop(ip, now).has_value(); };
  context.on_link = [this, now](const wire::IpAddress& ip) { return next_hop(ip, now) == ip; };
  context.autoconf_addresses = [this, now] { return autoconf_.addresses(now); };
  context.set_addresses = [this](std::vector<wire::IpAddress> gids, net::Routes routes, uint32_t generation) {
    set_addresses(std::move(gids), std::move(routes), generation);
  };
  for (Command* c : batch) {
    try {
      (*c->fn)(context);
    } catch (const std::exception& e) {
      spdlog::error("engine command failed: {}", e.what());
      c->failure = std::current_exception();
    }
  }
  sync_multicast_groups(now);  // only commands attach, detach or destroy QPs
  {
    std::lock_guard lock(commands_mutex_);
    for (Command* c : batch) c->done = true;
  }
  commands_done_.notify_all();
  return unsigned(batch.size());
}

void Engine::run() {
  spdlog::info("engine running on port {} (MAC {}, {}, IP MTU {}, {} rx wake-up fds, clock: {})", port_.name(),
               wire::to_string(addresses_.mac), config_.vlan ? fmt::format("VLAN {}", *config_.vlan) : "untagged",
               config_.ip_mtu, port_.rx_wait_fds().size(), clock_.uses_tsc() ? "TSC" : "clock_gettime");
  // The idle back-off sleeps for tens of microseconds: without this, the kernel's default timer slack
  // (50 us) would stretch a 10-us sleep to 60.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  // Ask whether another station already uses our addresses, then announce ourselves. A station that does
  // answers the probe, and the responders note the conflict (address_conflicts.hpp: the log names it). We
  // do not wait for answers before using the addresses, as Linux's optimistic DAD does not (RFC 4429): a
  // NIC has no other address to fall back to, and a conflict needs its operator anyway.
  for (const wire::IpAddress& ip : addresses_.ips) announce(ip, clock_.now());
  poll_due(mld_, mld_out_, clock_.now());
  // Ask the link's routers to advertise themselves now rather than at their next periodic advertisement
  // (up to 10 minutes away, RFC 4861 §6.2.1).
  router_discovery_.start(clock_.now());
  flush_tx();
  while (!stop_.load(std::memory_order_acquire)) {
    const transport::Nanos now = clock_.now();
    BackOff::Step step;
    if (turn(now)) {
      step = back_off_.busy(now, receiver_starving_);
      if (receiver_starving_ && step.kind == BackOff::Kind::nap) ++counters_.starving_receiver_yields;
    } else {
      // Timers only matter once idle: finding the next one walks every QP.
      const transport::Nanos transport_deadline = device_.next_deadline();
      const transport::Nanos net_deadline =
          std::min({arp_.next_deadline(), nd_.next_deadline(), igmp_.next_deadline(), mld_.next_deadline(),
                    router_discovery_.next_deadline(), held_deadline()});
      step = back_off_.idle(now, std::min(transport_deadline, net_deadline), transport_deadline != transport::never);
    }
    if (step.kind != BackOff::Kind::poll) rest(step, now);
  }
  // Nobody waits forever on a stopped engine: what was queued runs, later requests are refused.
  {
    std::lock_guard lock(commands_mutex_);
    finished_ = true;
  }
  commands_pending_.store(1, std::memory_order_release);
  run_commands(clock_.now());
  if (capture_) capture_->flush();
}

bool Engine::turn(transport::Nanos now) {
  now_ = now;
  ++counters_.loops;
  unsigned work = run_commands(now);
  // Work requests first, then frames: a receive posted before its message was sent must be in the
  // transport when the message arrives, as a NIC reads posted WQEs when a packet comes in. The other order
  // lost the first UC/UD message after an idle sleep (no receive yet) and cost RC an RNR NAK.
  work += queues_.drain_work(now);
  work += receive_local(now);
  work += receive_burst(now);
  work += release_held(now);  // (after the frames: a pause they brought holds first)
  bool pending = device_.has_pending_work();
  device_.run(now);
  work += queues_.deliver_completions();
  poll_due(arp_, arp_out_, now);
  poll_due(nd_, nd_out_, now);
  poll_due(igmp_, igmp_out_, now);
  poll_due(mld_, mld_out_, now);
  poll_due(router_discovery_, router_discovery_out_, now);
  work += flush_tx();
  // Completion events last: writing a sleeping application's channel wakes it, and the scheduler may give
  // it this core at once; the frames of this turn (the ACK its peer waits for) are on the wire by then.
  queues_.deliver_events();
  // For the back-off, which then gives the core away (back_off.hpp).
  device_.take_low_receive_queues(low_receive_queues_);
  receiver_starving_ = !low_receive_queues_.empty();
  // Work the transport scheduled while it ran (a requester it could not finish in one go) is not idle.
  // Held frames are not: they wait for their pause to end, a deadline like a timer's (held_deadline), so
  // a paused port sleeps as an idle one does instead of spinning for the pause's length.
  pending = pending || device_.has_pending_work() || !local_.empty() || !raw_local_.empty() ||
            !sniffed_.empty();
  drop_log_.maybe_report(now, net_counters_, device_.counters());
  conflict_log_.maybe_report(now, conflicts_);
  return work != 0 || pending;
}

unsigned Engine::receive_burst(transport::Nanos now) {
  rte_mbuf* burst[burst_size];
  const uint16_t n = port_.rx_burst(burst, burst_size);
  if (n != 0) ++counters_.rx_bursts;
  for (uint16_t i = 0; i < n; ++i) {
    const std::span<const uint8_t> frame = port::frame_of(burst[i], scratch_);
    if (!frame.empty()) handle_frame(frame, now, false);
    rte_pktmbuf_free(burst[i]);
  }
  return n;
}

unsigned Engine::receive_local(transport::Nanos now) {
  unsigned raw = 0;
  if (!sniffed_.empty()) {
    sniffed_turn_.swap(sniffed_);
    for (rte_mbuf* m : sniffed_turn_) {
      device_.sniff_sent(port::frame_of(m, scratch_), now);
      rte_pktmbuf_free(m);
    }
    sniffed_turn_.clear();
  }
  if (!raw_local_.empty()) {
    raw_local_turn_.swap(raw_local_);
    for (auto& [m, sender] : raw_local_turn_) {
      handle_frame(port::frame_of(m, scratch_), now, true, sender);
      rte_pktmbuf_free(m);
    }
    raw = unsigned(raw_local_turn_.size());
    raw_local_turn_.clear();
  }
  if (local_.empty()) return raw;
  local_turn_.swap(local_);  // what these frames make the transport send goes to the next turn
  for (rte_mbuf* m : local_turn_) {
    handle_frame(port::frame_of(m, scratch_), now, true);
    rte_pktmbuf_free(m);
  }
  const unsigned n = unsigned(local_turn_.size());
  local_turn_.clear();
  return n + raw;
}

void Engine::handle_frame(std::span<const uint8_t> frame, transport::Nanos now, bool captured, uint32_t sender) {
  if (capture_ && config_.capture_received && !captured) capture_->write(frame, realtime_now());
  // Flow rules first, as a NIC's flow tables come before its stack: a rule may take ARP or RoCE too.
  if (device_.has_flows() && device_.steer(frame, now, sender)) return;
  const net::Classification c = net::classify(frame, addresses_);
  net::count(net_counters_, c);
  switch (c.kind) {
    case net::FrameClass::roce:
      if (config_.rx_loss > 0 && std::uniform_real_distribution<double>(0, 1)(loss_rng_) < config_.rx_loss) {
        ++counters_.rx_injected_loss;
        return;
      }
      device_.receive(frame, now);
      return;
    case net::FrameClass::arp: {
      uint8_t reply[net::max_arp_frame_size];
      const size_t size = arp_responder_.on_frame(c, now, reply, arp_out_);
      if (size != 0) queue_copy({reply, size});
      send_output(arp_out_);
      return;
    }
    case net::FrameClass::nd: {
      uint8_t reply[net::max_nd_frame_size];
      const size_t size = nd_responder_.on_frame(c, now, reply, nd_out_);
      if (size != 0) queue_copy({reply, size});
      send_output(nd_out_);
      return;
    }
    case net::FrameClass::igmp:
      igmp_.on_query(c.igmp, now);
      return;
    case net::FrameClass::mld:
      mld_.on_query(c.mld, now);
      return;
    case net::FrameClass::router_advertisement: {
      const auto before = router_discovery_.default_router(now);
      router_discovery_.on_advertisement(c.ra, now);
      for (const net::AdvertisedPrefix& p : c.ra.prefixes) autoconf_.on_prefix(p, now);
      if (const auto after = router_discovery_.default_router(now); after != before) {
        spdlog::info("IPv6 default router: {}", after ? wire::to_string(*after) : std::string("none"));
      }
      // The router's source link-layer option is its MAC (RFC 4861 §6.3.4): the first packet through it
      // need not wait for a solicitation.
      if (c.ra.router_mac && net::is_unicast_mac(*c.ra.router_mac)) {
        nd_.learn(c.ra.router, *c.ra.router_mac, now, nd_out_);
        send_output(nd_out_);
      }
      return;
    }
    case net::FrameClass::pause:
      // From now, not from the turn's start: a pause runs its quanta from when it arrives, and a turn can
      // be long when the engine shares its core.
      link_pause_.on_frame(c.mac_control, clock_.now(), net_counters_);
      return;
    case net::FrameClass::icmp_echo_request: {
      const size_t size = icmp_.on_frame(frame, c, scratch_);
      if (size != 0) queue_copy({scratch_.data(), size});
      return;
    }
    case net::FrameClass::drop:
      // What the port's stack has no use for goes to the default rules: ALL_DEFAULT is a NIC's promiscuous
      // mode (every such frame, another station's too), MC_DEFAULT its all-multicast mode.
      device_.steer_unclaimed(frame, now, sender);
      spdlog::trace("dropped a frame: {}", net::to_string(c.reason));
      return;
  }
}

bool Engine::neighbour_known(const wire::IpAddress& ip, transport::Nanos now) {
  if (ip.is_multicast()) return true;  // its MAC follows from the address
  if (addresses_.owns(ip)) return true;  // ours
  const auto hop = next_hop(ip, now);
  if (!hop) return false;  // no route: never known (the CM refuses such a destination before asking)
  return hop->is_v4() ? arp_.resolve(hop->v4(), now) : nd_.resolve(*hop, now);
}

std::optional<wire::IpAddress> Engine::next_hop(const wire::IpAddress& dst, transport::Nanos now) const {
  if (config_.routes.on_link(dst)) return dst;
  if (dst.is_v4()) return config_.routes.gateway(true);
  if (router_discovery_.on_link(dst, now)) return dst;
  if (const auto gateway = config_.routes.gateway(false)) return gateway;
  return router_discovery_.default_router(now);
}

void Engine::sync_multicast_groups(transport::Nanos now) {
  if (device_.multicast_generation() == multicast_generation_) return;
  multicast_generation_ = device_.multicast_generation();
  std::vector<wire::IpAddress> groups = device_.multicast_groups();
  const auto contains = [](const std::vector<wire::IpAddress>& v, const wire::IpAddress& g) {
    return std::find(v.begin(), v.end(), g) != v.end();
  };
  for (const wire::IpAddress& g : addresses_.groups) {
    if (contains(groups, g)) continue;
    if (g.is_v4()) {
      igmp_.leave(g.v4(), now);
    } else {
      mld_.leave(g, now);
    }
  }
  for (const wire::IpAddress& g : groups) {
    if (contains(addresses_.groups, g)) continue;
    if (g.is_v4()) {
      igmp_.join(g.v4(), now);
    } else {
      mld_.join(g, now);
    }
  }
  for (const wire::IpAddress& g : groups) spdlog::debug("multicast group {} has members", wire::to_string(g));
  addresses_.groups = std::move(groups);
  poll_due(igmp_, igmp_out_, now);  // a join's first report is due at once
  poll_due(mld_, mld_out_, now);
}

// What a network-layer protocol (ARP, ND, IGMP, MLD) handed back: its frames go out, its output is reused.
template <class Output>
void Engine::send_output(Output& out) {
  for (const auto& f : out.frames) queue_copy(f);
  out.clear();
}

template <class Protocol, class Output>
void Engine::poll_due(Protocol& protocol, Output& out, transport::Nanos now) {
  if (now < protocol.next_deadline()) return;
  protocol.poll(now, out);
  send_output(out);
}

void Engine::queue_copy(std::span<const uint8_t> frame) {
  rte_mbuf* m = port::copy_frame_into_mbuf(port_.mempool(), frame);
  if (m == nullptr) {
    ++counters_.tx_no_mbuf;
    return;
  }
  send_or_hold(m);
}

// The frame's priority (net::frame_priority: its PCP, or its DSCP >> 3 with --trust dscp) may be one the
// link partner paused; behind held frames of its priority it waits too, so that a priority's frames leave
// in order. RoCE frames and the port's own (ARP, ND, ICMP, IGMP, MLD) alike.
void Engine::send_or_hold(rte_mbuf* m) {
  const unsigned priority =
      net::frame_priority({rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m)}, config_.trust_dscp);
  if (!held_[priority].empty() || link_pause_.paused(priority, now_)) {
    hold(priority, m);
    return;
  }
  tx_.push_back(m);
  if (tx_.size() >= burst_size) flush_tx();
}

// The transport's packets become frames here, built straight into an mbuf: the destination MAC comes from
// the ARP cache (IPv4) or the neighbour cache (IPv6), our own for the loopback; a packet for a peer not yet
// resolved is built into a buffer the cache keeps until the reply comes. The source address is the GID the
// address vector names (its sgid index), which must be of the destination's family.
void Engine::transmit(const transport::OutPacket& p) {
  const verbs::AddressVector& av = *p.destination;
  transport::PortAddressing addressing;
  const size_t sgid = av.sgid_index;
  const bool v4 = av.dgid.is_v4();
  // (an entry emptied, or gone from the end of the table, since the QP was given it: uroce address del)
  if (sgid >= config_.addresses.size() || v4 != config_.addresses[sgid].is_v4() ||
      config_.addresses[sgid].is_zero()) {
    ++counters_.tx_no_route;
    return;
  }
  addressing.src_ip = config_.addresses[sgid];
  addressing.src_mac = addresses_.mac;
  addressing.ip_identification = ip_identification_++;
  addressing.vlan_id = config_.vlan;
  // Traffic between two QPs of this port (the loopback) needs no ARP or ND: the MAC is ours. A group's
  // MAC follows from its address (RFC 1112, RFC 2464).
  const bool multicast = av.dgid.is_multicast();
  const bool local = addresses_.owns(av.dgid);
  // Anyone else: the next hop's MAC, the destination's own on the link, the gateway's beyond it.
  std::optional<wire::MacAddress> mac;
  wire::IpAddress hop = av.dgid;
  if (multicast) {
    mac = net::multicast_mac_of(av.dgid);
  } else if (local) {
    mac = addresses_.mac;
  } else {
    const auto next = next_hop(av.dgid, now_);
    if (!next) {
      ++counters_.tx_no_route;
      return;
    }
    hop = *next;
    mac = v4 ? arp_.lookup(hop.v4(), now_) : nd_.lookup(hop, now_);
  }
  if (mac) addressing.dst_mac = *mac;
  const wire::FrameSpec spec = transport::frame_spec_for(p, addressing);
  const size_t size = wire::frame_size(spec);
  if (!mac) {
    std::vector<uint8_t> frame(size);
    wire::build_frame(spec, frame);
    if (v4) {
      arp_.park(hop.v4(), std::move(frame), now_);
    } else {
      nd_.park(hop, std::move(frame), now_);
    }
    return;
  }
  rte_mbuf* m = port_.alloc();
  if (m == nullptr || size > port_.max_frame()) {
    if (m != nullptr) rte_pktmbuf_free(m);
    ++counters_.tx_no_mbuf;
    return;
  }
  auto* data = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(size)));
  wire::build_frame(spec, {data, size});
  if (local) {
    if (capture_) capture_->write({data, size}, realtime_now());
    local_.push_back(m);
    return;
  }
  // Our own QPs in the group get the datagram too, as from any member (rxe: the IP layer loops multicast
  // back). A port whose wire loops back brings the frame itself back.
  if (multicast && !config_.wire_loops_back && device_.has_multicast_group(av.dgid)) {
    if (rte_mbuf* copy = port::copy_frame_into_mbuf(port_.mempool(), {data, size})) {
      local_.push_back(copy);
    } else {
      ++counters_.tx_no_mbuf;
    }
  }
  send_or_hold(m);  // (its PCP is the SL on a VLAN, its DSCP the traffic class's)
}

void Engine::transmit_frame(uint32_t sender, std::span<const uint8_t> frame) {
  const bool ours = frame.size() >= 6 && std::equal(frame.begin(), frame.begin() + 6, addresses_.mac.bytes.begin());
  const bool multicast = !frame.empty() && (frame[0] & 1) != 0;  // broadcast too
  if (ours || (multicast && !config_.wire_loops_back)) {
    rte_mbuf* copy = port::copy_frame_into_mbuf(port_.mempool(), frame);
    if (copy == nullptr) {
      ++counters_.tx_no_mbuf;
    } else {
      if (ours && capture_) capture_->write(frame, realtime_now());
      raw_local_.emplace_back(copy, sender);
    }
  }
  if (!ours) queue_copy(frame);
}

void Engine::hold(unsigned priority, rte_mbuf* m) {
  if (held_count_ >= max_held) {
    rte_pktmbuf_free(m);
    ++net_counters_.tx_held_dropped;  // as a full queue drops: RC's requester sends it again
    return;
  }
  held_[priority].push_back(m);
  ++held_count_;
  ++net_counters_.tx_frames_held;
}

transport::Nanos Engine::held_deadline() const {
  if (held_count_ == 0) return transport::never;
  transport::Nanos first = transport::never;
  for (unsigned priority = 0; priority < held_.size(); ++priority) {
    if (!held_[priority].empty()) first = std::min(first, link_pause_.until(priority));
  }
  return first;
}

unsigned Engine::release_held(transport::Nanos now) {
  if (held_count_ == 0) return 0;
  unsigned released = 0;
  for (unsigned priority = 0; priority < held_.size(); ++priority) {
    if (held_[priority].empty() || link_pause_.paused(priority, now)) continue;
    for (rte_mbuf* m : held_[priority]) {
      tx_.push_back(m);
      if (tx_.size() >= burst_size) flush_tx();
    }
    released += unsigned(held_[priority].size());
    held_count_ -= held_[priority].size();
    held_[priority].clear();
  }
  return released;
}

unsigned Engine::flush_tx() {
  if (tx_.empty()) return 0;
  if (capture_) {
    const uint64_t t = realtime_now();
    for (rte_mbuf* m : tx_) capture_->write(port::frame_of(m, scratch_), t);
  }
  // Sniffer rules get a copy of what the port sends, at the next turn: flush_tx also runs from inside the
  // transport (transmit()), which must not be entered again.
  if (device_.has_sniffers()) {
    for (rte_mbuf* m : tx_) {
      if (rte_mbuf* copy = port::copy_frame_into_mbuf(port_.mempool(), port::frame_of(m, scratch_))) {
        sniffed_.push_back(copy);
      }
    }
  }
  const unsigned n = unsigned(tx_.size());
  counters_.tx_frames += port_.send_or_drop(tx_.data(), uint16_t(n));
  tx_.clear();
  return n;
}

// The back-off (back_off.hpp) decides; a nap leaves clients believing the engine awake (they never ring
// for it), a sleep is announced first. The sleeping flag is set before the last look at the rings; a
// client posting at that moment either is seen here or sees the flag and writes the eventfd
// (Doorbell::ring).
void Engine::rest(const BackOff::Step& step, transport::Nanos now) {
  back_off_.rested();
  if (step.kind == BackOff::Kind::nap) {
    ++counters_.naps;
    if (step.yield) {
      const transport::Nanos before = clock_.now();
      sched_yield();
      const transport::Nanos after = clock_.now();
      ++counters_.yields;
      if (back_off_.yielded(before, after)) ++counters_.slow_yields;
      counters_.napped_ns += after - now;
      return;
    }
    wait_for_wake(step.timeout_ns);
    counters_.napped_ns += clock_.now() - now;
    return;
  }
  auto* st = reinterpret_cast<protocol::EngineStatus*>(status_.data());
  std::atomic_ref<uint32_t> sleeping(st->sleeping);
  sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!queues_.work_waiting() && !commands_waiting() && !stop_.load(std::memory_order_acquire)) {
    ++counters_.sleeps;
    wait_for_wake(step.timeout_ns);
    counters_.slept_ns += clock_.now() - now;
  }
  sleeping.store(0, std::memory_order_relaxed);
}

// Blocks until the wake eventfd is written (a client, a command, stop()), a frame arrives on a port that
// has an rx wake-up fd (af_packet), or the timeout passes; then empties the eventfd.
void Engine::wait_for_wake(uint64_t timeout_ns) {
  pollfd pfd[1 + max_rx_wait_fds];
  nfds_t nfds = 0;
  pfd[nfds++] = {wake_fd_, POLLIN, 0};
  for (int fd : port_.rx_wait_fds()) {
    if (nfds < std::size(pfd)) pfd[nfds++] = {fd, POLLIN, 0};
  }
  const timespec ts{time_t(timeout_ns / 1'000'000'000), long(timeout_ns % 1'000'000'000)};
  ppoll(pfd, nfds, &ts, nullptr);
  if (pfd[0].revents & POLLIN) {
    uint64_t drained = 0;
    [[maybe_unused]] ssize_t n = read(wake_fd_, &drained, sizeof drained);
  }
}

}  // namespace uroce::emulator::engine
