// The port's IGMPv2 host side (RFC 2236): it tells the link's multicast routers and snooping switches which
// IPv4 groups it has members for, so that RoCE UD multicast to those groups reaches it (igmp_frames.hpp
// says why that matters).
//
// How the engine (one thread, burst loop) uses it:
//   - the set of IPv4 groups with at least one attached QP changes: join(group, now) / leave(group, now);
//   - a frame classified FrameClass::igmp (a Membership Query): on_query(frame.igmp, now);
//   - whenever now >= next_deadline(): poll(now, out), then transmit out.frames in order.
//
// What it does, RFC 2236 §3 with its timers:
//   - join: an unsolicited Membership Report at once (the first member on the link must not wait for the
//     next query, which may be 125 s away), repeated once unsolicited_report_interval later in case the
//     first was lost;
//   - a query: for each of our groups it covers (all of them for a general query, the one named otherwise),
//     a report at a random delay in [0, max_response], so that the members of a large group do not all
//     answer at once; a report already due sooner keeps its time, a later one is brought forward;
//   - leave: a Leave Group to all-routers at once, so that the router stops forwarding within its last
//     member query time instead of the group membership interval (260 s).
//
// Left out, on purpose: report suppression (hearing another member's report cancels ours; IGMPv3 dropped it
// too, and an extra report costs nothing), so we always count as the last reporter and always send the
// Leave, which §3 allows; and IGMPv1-router compatibility (v1 reports, no leaves after a v1 query), v1
// routers being long gone. All-hosts (224.0.0.1) is never reported (§6), and addresses outside 224.0.0.0/4
// are not groups: joining either does nothing.
//
// Messages come from the port's first IPv4 address; a port without one sends nothing (groups are still
// tracked, but no timer runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/igmp_frames.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// Between a join's report and its one repetition. RFC 2236 §8.10's default is 10 s, but an application
// that joins (mckey, rdma_join_multicast) starts sending or expecting traffic at once: a lost first report
// would leave it without the group's traffic for 10 s. RFC 3376 §8.11 lowered the same interval to 1 s for
// that reason, and RFC 2236 §8 makes its timers configurable.
inline constexpr Nanos unsolicited_report_interval = seconds(1);

// What poll() hands back. The engine keeps one and clear()s it, so the vector's storage is reused.
struct IgmpOutput {
  std::vector<std::vector<uint8_t>> frames;  // to transmit in this order: Leave Group messages, then reports
  void clear() { frames.clear(); }
};

class IgmpMembership {
 public:
  // Reads the port's MAC, VLAN tag and first IPv4 address once, as ArpCache does. The random delays are
  // seeded from the MAC, so that hosts of one link answer at different times but a run is repeatable.
  IgmpMembership(const PortAddresses& port, NetCounters& counters);
  IgmpMembership(const PortAddresses& port, NetCounters& counters, uint64_t seed);

  // Joining a group already joined, or leaving one not joined, does nothing.
  void join(uint32_t group, Nanos now);
  void leave(uint32_t group, Nanos now);
  void on_query(const IgmpQuery& query, Nanos now);

  // Appends the messages due at `now` to out.frames.
  void poll(Nanos now, IgmpOutput& out);
  // When poll() has something to do at the latest; `never` if nothing is pending. O(1): cached, lowered by
  // events, so it may come early (that poll finds nothing to do and settles it), never late.
  Nanos next_deadline() const { return next_deadline_; }

  bool is_member(uint32_t group) const;
  size_t groups() const { return groups_.size(); }

 private:
  struct Group {
    uint32_t address = 0;
    Nanos report_at = never;     // the next report, unsolicited or answering a query
    bool repeat_pending = false;  // the join's second unsolicited report is still to be scheduled
  };

  // write_igmp_report or write_igmp_leave.
  using Writer = size_t (*)(std::span<uint8_t>, const wire::MacAddress&, uint32_t, uint32_t, std::optional<uint16_t>);

  size_t index_of(uint32_t group) const;  // groups_.size() when not a member
  void report_no_later_than(Group& g, Nanos at);
  void send(Writer write, uint32_t group, uint64_t& counter, IgmpOutput& out);

  wire::MacAddress mac_;
  std::optional<uint16_t> vlan_tci_;
  std::optional<uint32_t> source_;
  NetCounters& counters_;
  std::vector<Group> groups_;    // a handful: linear scans
  std::vector<uint32_t> leaves_;  // Leave Group messages due at the next poll
  std::mt19937_64 rng_;
  Nanos next_deadline_ = never;
};

}  // namespace uroce::emulator::net
