#include "transport/sim/sim_network.hpp"

#include <algorithm>

#include "transport/outgoing_frame.hpp"
#include "transport/sim/ecn_marking.hpp"
#include "transport/wire/build.hpp"

namespace uroce::sim {

class SimNetwork::NodeSink final : public transport::PacketSink {
 public:
  NodeSink(SimNetwork& net, NodeId id) : net_(net), id_(id) {}
  void transmit(const transport::OutPacket& packet) override { net_.transmit(id_, packet); }
  void transmit_frame(uint32_t, std::span<const uint8_t> frame) override { net_.transmit_frame(id_, frame); }

 private:
  SimNetwork& net_;
  NodeId id_;
};

struct SimNetwork::Node {
  Node(SimNetwork& net, NodeId id, NodeConfig c, wire::MacAddress m)
      : config(std::move(c)), mac(m), sink(net, id) {}
  NodeConfig config;
  wire::MacAddress mac;
  Endpoint* endpoint = nullptr;
  bool blackholed = false;
  uint16_t ip_identification = 0;
  NodeSink sink;
};

namespace {

// Min-heap order for std::push_heap/pop_heap, which build max-heaps.
template <class T>
bool later(const T& a, const T& b) {
  return a.arrival != b.arrival ? a.arrival > b.arrival : a.seq > b.seq;
}

std::string node_label(NodeId id, const std::string& name) {
  return "node " + std::to_string(id) + (name.empty() ? "" : " (" + name + ")");
}

}  // namespace

SimNetwork::SimNetwork(uint64_t seed) : seed_(seed) {}
SimNetwork::~SimNetwork() = default;

// ---------------------------------------------------------------------------------------------------
// Nodes

NodeId SimNetwork::add_node(NodeConfig config) {
  if (config.addresses.empty()) throw std::invalid_argument("sim node without an address");
  const NodeId id = NodeId(nodes_.size());
  for (const wire::IpAddress& a : config.addresses) {
    if (by_address_.count(a)) throw std::invalid_argument("sim address used twice: " + wire::to_string(a));
  }
  for (const wire::IpAddress& a : config.addresses) by_address_.emplace(a, id);
  // Locally administered unicast, numbered like the nodes so captures are easy to read.
  const uint32_t n = id + 1;
  const wire::MacAddress mac = config.mac.value_or(
      wire::MacAddress{{0x02, 0x00, uint8_t(n >> 24), uint8_t(n >> 16), uint8_t(n >> 8), uint8_t(n)}});
  nodes_.push_back(std::make_unique<Node>(*this, id, std::move(config), mac));
  return id;
}

NodeId SimNetwork::add_node(Endpoint& endpoint, const wire::IpAddress& address, std::string name) {
  NodeConfig c;
  c.addresses = {address};
  c.name = std::move(name);
  const NodeId id = add_node(std::move(c));
  set_endpoint(id, endpoint);
  return id;
}

void SimNetwork::set_endpoint(NodeId id, Endpoint& endpoint) { node(id).endpoint = &endpoint; }
transport::PacketSink& SimNetwork::sink(NodeId id) { return node(id).sink; }
size_t SimNetwork::node_count() const { return nodes_.size(); }
const wire::MacAddress& SimNetwork::mac(NodeId id) const { return node(id).mac; }
const std::vector<wire::IpAddress>& SimNetwork::addresses(NodeId id) const { return node(id).config.addresses; }

std::optional<NodeId> SimNetwork::find_node(const wire::IpAddress& address) const {
  const auto it = by_address_.find(address);
  if (it == by_address_.end()) return std::nullopt;
  return it->second;
}

SimNetwork::Node& SimNetwork::node(NodeId id) {
  if (id >= nodes_.size()) throw std::out_of_range("no sim node " + std::to_string(id));
  return *nodes_[id];
}

const SimNetwork::Node& SimNetwork::node(NodeId id) const {
  if (id >= nodes_.size()) throw std::out_of_range("no sim node " + std::to_string(id));
  return *nodes_[id];
}

// ---------------------------------------------------------------------------------------------------
// Impairments

void SimNetwork::set_default_profile(const LinkProfile& profile) { default_profile_ = profile; }
const LinkProfile& SimNetwork::default_profile() const { return default_profile_; }

void SimNetwork::set_link_profile(NodeId from, NodeId to, const LinkProfile& profile) {
  node(from);  // validates both ids
  node(to);
  link_profiles_[{from, to}] = profile;
}

void SimNetwork::set_path_profile(NodeId a, NodeId b, const LinkProfile& profile) {
  set_link_profile(a, b, profile);
  set_link_profile(b, a, profile);
}

void SimNetwork::clear_link_profile(NodeId from, NodeId to) { link_profiles_.erase({from, to}); }

const LinkProfile& SimNetwork::link_profile(NodeId from, NodeId to) const {
  const auto it = link_profiles_.find({from, to});
  return it == link_profiles_.end() ? default_profile_ : it->second;
}

void SimNetwork::set_node_blackholed(NodeId id, bool blackholed) { node(id).blackholed = blackholed; }
bool SimNetwork::node_blackholed(NodeId id) const { return node(id).blackholed; }

bool SimNetwork::path_down(NodeId from, NodeId to) const {
  return link_profile(from, to).blackhole || node(from).blackholed || node(to).blackholed;
}

Link& SimNetwork::link(NodeId from, NodeId to) {
  // Seeded by the pair, not by creation order, so a link's randomness does not depend on which link
  // happened to carry traffic first.
  return links_.try_emplace({from, to}, derive_seed(seed_, from, to)).first->second;
}

// ---------------------------------------------------------------------------------------------------
// Frames

void SimNetwork::capture(CapturePoint point, NodeId from, NodeId to, DropReason reason, bool corrupted,
                         std::span<const uint8_t> frame) {
  if (!capture_) return;
  CaptureEvent e;
  e.point = point;
  e.time = now_;
  e.from = from;
  e.to = to;
  e.reason = reason;
  e.corrupted = corrupted;
  e.frame = frame;
  capture_(e);
}

void SimNetwork::transmit(NodeId from, const transport::OutPacket& packet) {
  ++stats_.transmitted;
  Node& src = node(from);
  if (!packet.destination || packet.destination->sgid_index >= src.config.addresses.size()) {
    ++stats_.dropped_invalid;
    capture(CapturePoint::dropped, from, no_node, DropReason::invalid_packet, false, {});
    return;
  }
  const std::optional<NodeId> dst = find_node(packet.destination->dgid);
  transport::PortAddressing port;
  port.src_ip = src.config.addresses[packet.destination->sgid_index];
  port.src_mac = src.mac;
  port.dst_mac = dst ? node(*dst).mac : wire::MacAddress{};
  port.ip_identification = src.ip_identification++;
  const wire::FrameSpec spec = transport::frame_spec_for(packet, port);
  std::vector<uint8_t> frame(wire::frame_size(spec));
  const wire::BuildResult built = wire::build_frame(spec, frame);
  if (!built.ok()) {
    ++stats_.dropped_invalid;
    capture(CapturePoint::dropped, from, dst.value_or(no_node), DropReason::invalid_packet, false, {});
    return;
  }
  frame.resize(built.size);
  const NodeId to = dst.value_or(no_node);
  capture(CapturePoint::transmitted, from, to, DropReason::none, false, frame);
  if (!dst) {
    ++stats_.dropped_unknown_destination;
    capture(CapturePoint::dropped, from, to, DropReason::unknown_destination, false, frame);
    return;
  }
  offer(from, to, std::move(frame));
}

// A raw packet QP's frame goes where its destination MAC says: the node with that MAC, or every other
// node for a multicast or broadcast one, as a switch floods it.
void SimNetwork::transmit_frame(NodeId from, std::span<const uint8_t> frame) {
  ++stats_.transmitted;
  const bool multicast = !frame.empty() && (frame[0] & 1) != 0;
  std::vector<NodeId> to;
  for (NodeId n = 0; n < nodes_.size(); ++n) {
    if (n == from) continue;
    if (multicast || (frame.size() >= 6 && std::equal(frame.begin(), frame.begin() + 6, nodes_[n]->mac.bytes.begin()))) {
      to.push_back(n);
    }
  }
  capture(CapturePoint::transmitted, from, to.size() == 1 ? to[0] : no_node, DropReason::none, false, frame);
  if (to.empty()) {
    ++stats_.dropped_unknown_destination;
    capture(CapturePoint::dropped, from, no_node, DropReason::unknown_destination, false, frame);
    return;
  }
  for (const NodeId n : to) offer(from, n, std::vector<uint8_t>(frame.begin(), frame.end()));
}

void SimNetwork::offer(NodeId from, NodeId to, std::vector<uint8_t> frame) {
  const LinkProfile& profile = link_profile(from, to);
  Link& l = link(from, to);
  const Link::Decision d = l.offer(frame.size(), now_, profile, path_down(from, to));
  // Before the copies are made: a switch marks the one frame it enqueues, and a duplicate is a copy of it.
  if (d.ecn_mark && mark_ce(frame)) ++l.stats().ecn_marked;
  if (d.drop != DropReason::none) {
    capture(CapturePoint::dropped, from, to, d.drop, false, frame);
    return;
  }
  for (unsigned i = 0; i < d.copies; ++i) {
    std::vector<uint8_t> bytes;
    if (i + 1 < d.copies) {
      bytes = frame;
    } else {
      bytes = std::move(frame);
    }
    const bool corrupted = d.copy[i].corrupt && flip_bit(bytes, profile.corrupt_scope, d.copy[i].corrupt_draw);
    in_flight_.push_back(InFlight{d.copy[i].arrival, next_seq_++, from, to, corrupted, std::move(bytes)});
    std::push_heap(in_flight_.begin(), in_flight_.end(), later<InFlight>);
  }
}

void SimNetwork::deliver(InFlight& f) {
  Link& l = link(f.from, f.to);
  Endpoint* ep = node(f.to).endpoint;
  if (path_down(f.from, f.to) || !ep) {
    ++l.stats().dropped_blackhole;
    capture(CapturePoint::dropped, f.from, f.to, DropReason::blackhole, f.corrupted, f.frame);
    return;
  }
  ++l.stats().frames_delivered;
  l.stats().bytes_delivered += f.frame.size();
  if (f.corrupted) ++l.stats().corrupted;
  capture(CapturePoint::delivered, f.from, f.to, DropReason::none, f.corrupted, f.frame);
  ep->receive(f.frame, now_);
}

// ---------------------------------------------------------------------------------------------------
// Clock

Nanos SimNetwork::next_event_time() const {
  Nanos t = in_flight_.empty() ? never : in_flight_.front().arrival;
  for (const auto& n : nodes_) {
    if (!n->endpoint) continue;
    if (n->endpoint->has_pending_work()) return now_;
    t = std::min(t, std::max(n->endpoint->next_deadline(), now_));
  }
  return t;
}

void SimNetwork::set_max_rounds_per_instant(uint32_t rounds) { max_rounds_ = std::max<uint32_t>(rounds, 1); }

void SimNetwork::settle_instant() {
  const auto due = [this](const Endpoint* ep) {
    return ep && (ep->has_pending_work() || ep->next_deadline() <= now_);
  };
  const auto frames_due = [this] { return !in_flight_.empty() && in_flight_.front().arrival <= now_; };
  const auto busy = [&] {
    if (frames_due()) return true;
    return std::any_of(nodes_.begin(), nodes_.end(), [&](const auto& n) { return due(n->endpoint); });
  };

  uint32_t rounds = 0;
  for (; busy(); ++rounds) {
    if (rounds == max_rounds_) {
      stats_.max_rounds_in_an_instant = std::max<uint64_t>(stats_.max_rounds_in_an_instant, rounds);
      std::string who;
      for (NodeId i = 0; i < nodes_.size(); ++i) {
        if (due(nodes_[i]->endpoint)) who += " " + node_label(i, nodes_[i]->config.name) + ";";
      }
      if (frames_due()) who += " frames still arriving;";
      throw SimLivelock("sim: t=" + std::to_string(now_) + " ns did not settle in " + std::to_string(rounds) +
                            " rounds:" + who,
                        now_);
    }
    // Frames sent during this round (zero delay) wait for the next one, so a zero-delay ping-pong counts
    // rounds instead of spinning inside one.
    const uint64_t sent_before = next_seq_;
    while (frames_due() && in_flight_.front().seq < sent_before) {
      std::pop_heap(in_flight_.begin(), in_flight_.end(), later<InFlight>);
      InFlight f = std::move(in_flight_.back());
      in_flight_.pop_back();
      deliver(f);
    }
    // By index: an endpoint may add nodes while it runs.
    for (NodeId i = 0; i < nodes_.size(); ++i) {
      Endpoint* ep = nodes_[i]->endpoint;
      if (due(ep)) ep->run(now_);
    }
  }
  stats_.max_rounds_in_an_instant = std::max<uint64_t>(stats_.max_rounds_in_an_instant, rounds);
}

bool SimNetwork::step() {
  const Nanos t = next_event_time();
  if (t == never) return false;
  now_ = std::max(now_, t);
  ++stats_.steps;
  settle_instant();
  return true;
}

void SimNetwork::run_until(Nanos t) {
  while (next_event_time() <= t && step()) {
  }
  if (t != never) now_ = std::max(now_, t);
}

bool SimNetwork::run_until_idle(Nanos limit) {
  for (;;) {
    const Nanos t = next_event_time();
    if (t == never) return true;
    if (t > limit) {
      // Only deadlines remain beyond the limit (pending work would make t == now_ <= limit unless the
      // clock is already past it).
      const bool pending = std::any_of(nodes_.begin(), nodes_.end(), [](const auto& n) {
        return n->endpoint && n->endpoint->has_pending_work();
      });
      if (in_flight_.empty() && !pending) return true;
      if (limit != never) now_ = std::max(now_, limit);
      return false;
    }
    step();
  }
}

bool SimNetwork::run_while(const std::function<bool()>& keep_going, Nanos limit) {
  while (keep_going()) {
    const Nanos t = next_event_time();
    if (t == never || t > limit) {
      if (limit != never) now_ = std::max(now_, limit);
      return false;
    }
    step();
  }
  return true;
}

// ---------------------------------------------------------------------------------------------------
// Observation

LinkStats SimNetwork::link_stats(NodeId from, NodeId to) const {
  const auto it = links_.find({from, to});
  return it == links_.end() ? LinkStats{} : it->second.stats();
}

NetworkStats SimNetwork::stats() const {
  NetworkStats s = stats_;
  for (const auto& [key, l] : links_) s.links += l.stats();
  return s;
}

void SimNetwork::set_capture(CaptureHook hook) { capture_ = std::move(hook); }

}  // namespace uroce::sim
