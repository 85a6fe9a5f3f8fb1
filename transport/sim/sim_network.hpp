// A deterministic network for testing transports: any number of nodes, per-direction links with seeded
// loss, duplication, reordering (jitter), delay, bandwidth, byte-limited queues and corruption, and a
// virtual clock that drives every node's engine. Everything that happens is a function of the seed, the
// profiles and what the endpoints do; nothing reads the real clock.
//
// Time advances only in step() (and the run_* loops built on it). One step moves the clock to the next
// event (the earliest frame arrival or endpoint deadline, or stays put while an endpoint has pending
// work) and settles that instant in rounds: deliver the frames due, then run() every endpoint that has
// pending work or whose deadline has come, in node order; repeat while anything happened. Frames sent
// with zero delay arrive in the next round of the same instant.
//
// An instant that does not settle within max_rounds_per_instant rounds (an endpoint that keeps
// has_pending_work() true or its deadline at or before now after run(), or a zero-delay ping-pong) is a
// bug in the endpoint, and since time cannot advance past it the network throws SimLivelock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "transport/packet_io.hpp"
#include "transport/sim/capture.hpp"
#include "transport/sim/endpoint.hpp"
#include "transport/sim/link.hpp"
#include "transport/sim/types.hpp"
#include "transport/wire/address.hpp"

namespace uroce::sim {

struct NodeConfig {
  // The node's GID table: AddressVector::sgid_index picks the source address of each packet, and the
  // network routes to a node by any of them. At least one; unique across the network.
  std::vector<wire::IpAddress> addresses;
  // The initializers keep GCC 12 quiet about designated initializers that leave these out.
  std::optional<wire::MacAddress> mac = std::nullopt;  // default 02:00:<node id + 1, 32 bits>
  std::string name = {};                                // for messages only
};

struct NetworkStats {
  LinkStats links;                        // summed over every link
  uint64_t transmitted = 0;               // PacketSink::transmit() calls
  uint64_t dropped_unknown_destination = 0;
  uint64_t dropped_invalid = 0;
  uint64_t steps = 0;
  uint64_t max_rounds_in_an_instant = 0;  // how close the run came to max_rounds_per_instant

  uint64_t frames_dropped() const {
    return links.frames_dropped() + dropped_unknown_destination + dropped_invalid;
  }
};

class SimLivelock : public std::runtime_error {
 public:
  SimLivelock(const std::string& what, Nanos at) : std::runtime_error(what), time(at) {}
  Nanos time;
};

class SimNetwork {
 public:
  explicit SimNetwork(uint64_t seed);
  ~SimNetwork();
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  // ---- Nodes
  // Throws std::invalid_argument on no address or an address another node already has.
  NodeId add_node(NodeConfig config);
  NodeId add_node(Endpoint& endpoint, const wire::IpAddress& address, std::string name = {});
  // Attaches (or replaces: a restarted peer) the engine of a node. Until then the node is a dead peer.
  // The endpoint must outlive the network or be replaced.
  void set_endpoint(NodeId node, Endpoint& endpoint);
  // Where the node's engine sends; stable for the network's lifetime, so a Device can be built on it
  // before it becomes the node's endpoint. Transmits are stamped with now().
  transport::PacketSink& sink(NodeId node);
  size_t node_count() const;
  const wire::MacAddress& mac(NodeId node) const;
  const std::vector<wire::IpAddress>& addresses(NodeId node) const;
  std::optional<NodeId> find_node(const wire::IpAddress& address) const;

  // ---- Impairments. Changes apply to frames transmitted afterwards, except blackholes, which also
  // drop what is in flight when it arrives (cutting a cable loses what is on it).
  void set_default_profile(const LinkProfile& profile);  // links without a profile of their own
  const LinkProfile& default_profile() const;
  void set_link_profile(NodeId from, NodeId to, const LinkProfile& profile);
  void set_path_profile(NodeId a, NodeId b, const LinkProfile& profile);  // both directions
  void clear_link_profile(NodeId from, NodeId to);                        // back to the default
  const LinkProfile& link_profile(NodeId from, NodeId to) const;          // the one in effect
  // A blackholed node is cut off: nothing reaches it or leaves it. Its endpoint keeps running.
  void set_node_blackholed(NodeId node, bool blackholed);
  bool node_blackholed(NodeId node) const;

  // ---- Virtual clock
  Nanos now() const { return now_; }
  // When step() would act: now() if an endpoint has pending work, else the earliest arrival or deadline
  // (a deadline already past counts as now()); never if nothing will ever happen.
  Nanos next_event_time() const;
  // Advances to the next event and settles that instant. False, and nothing done, if there is none.
  bool step();
  // Processes every event at or before t, then sets the clock to t (if it is not already later).
  void run_until(Nanos t);
  // Runs until the network is idle: nothing in flight, no pending work, every deadline never or beyond
  // `limit`; true then, with the clock at the last event. False if frames are still in flight past
  // `limit`, with the clock at `limit`.
  bool run_until_idle(Nanos limit);
  // Steps while keep_going() holds (checked before every step); true once it does not. False if `limit`
  // or permanent idleness comes first; the clock is then at `limit` unless limit is never.
  bool run_while(const std::function<bool()>& keep_going, Nanos limit);
  void set_max_rounds_per_instant(uint32_t rounds);  // default 100000

  // ---- Observation
  size_t frames_in_flight() const { return in_flight_.size(); }
  LinkStats link_stats(NodeId from, NodeId to) const;  // zero for a link never used
  NetworkStats stats() const;
  void set_capture(CaptureHook hook);  // one hook; an empty function removes it

 private:
  struct Node;
  class NodeSink;
  struct InFlight {
    Nanos arrival;
    uint64_t seq;  // transmission order breaks ties, so equal arrival times keep their order
    NodeId from;
    NodeId to;
    bool corrupted;
    std::vector<uint8_t> frame;
  };
  using LinkKey = std::pair<NodeId, NodeId>;
  struct IpLess {
    bool operator()(const wire::IpAddress& a, const wire::IpAddress& b) const { return a.bytes < b.bytes; }
  };

  void transmit(NodeId from, const transport::OutPacket& packet);
  void transmit_frame(NodeId from, std::span<const uint8_t> frame);  // a raw packet QP's
  // The link from `from` to `to` takes the frame (or drops, delays, duplicates, corrupts it).
  void offer(NodeId from, NodeId to, std::vector<uint8_t> frame);
  Link& link(NodeId from, NodeId to);
  bool path_down(NodeId from, NodeId to) const;
  void settle_instant();
  void deliver(InFlight& f);
  void capture(CapturePoint point, NodeId from, NodeId to, DropReason reason, bool corrupted,
               std::span<const uint8_t> frame);
  Node& node(NodeId id);
  const Node& node(NodeId id) const;

  uint64_t seed_;
  Nanos now_ = 0;
  uint64_t next_seq_ = 0;
  uint32_t max_rounds_ = 100000;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<wire::IpAddress, NodeId, IpLess> by_address_;
  LinkProfile default_profile_;
  std::map<LinkKey, LinkProfile> link_profiles_;
  std::map<LinkKey, Link> links_;
  std::vector<InFlight> in_flight_;  // a min-heap on (arrival, seq)
  NetworkStats stats_;               // all but `links`, which stats() sums on demand
  CaptureHook capture_;
};

}  // namespace uroce::sim
