// The port's IGMPv2 host side (RFC 2236): it tells the link's multicast routers and snooping switches which
// IPv4 groups it has members for, so that RoCE UD multicast to those groups reaches it (igmp_frames.hpp
// says why that matters).
//
// How the engine (one thread, burst loop) uses it:
//   - the set of IPv4 groups with at least one attached QP changes: join(group, now) / leave(group, now);
//   - a frame classified FrameClass::igmp (a Membership Query): on_query(frame.igmp, now);
//   - whenever now >= next_deadline(): poll(now, out), then transmit out.frames in order.
//
// What it does, RFC 2236 §3 with its timers (kept by MembershipTimers, which MldMembership shares):
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
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/igmp_frames.hpp"
#include "emulator/net/membership_timers.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// What poll() hands back. The engine keeps one and clear()s it, so the vector's storage is reused.
struct IgmpOutput {
  std::vector<std::vector<uint8_t>> frames;  // to transmit in this order: Leave Group messages, then reports
  void clear() { frames.clear(); }
};

class IgmpMembership {
 public:
  // Reads the port's MAC, VLAN tag and first IPv4 address once, as ArpCache does. The random delays are
  // seeded from the MAC (seed_from_mac).
  IgmpMembership(const PortAddresses& port, NetCounters& counters);
  IgmpMembership(const PortAddresses& port, NetCounters& counters, uint64_t seed);

  // Joining a group already joined, or leaving one not joined, does nothing.
  void join(uint32_t group, Nanos now);
  void leave(uint32_t group, Nanos now);
  void on_query(const IgmpQuery& query, Nanos now);

  // Appends the messages due at `now` to out.frames.
  void poll(Nanos now, IgmpOutput& out);
  // When poll() has something to do at the latest; `never` if nothing is pending (MembershipTimers).
  Nanos next_deadline() const { return timers_.next_deadline(); }

  bool is_member(uint32_t group) const { return timers_.is_member(wire::IpAddress::from_v4(group)); }
  size_t groups() const { return timers_.groups(); }

 private:
  MembershipSender sender_;
  std::optional<uint32_t> source_;
  NetCounters& counters_;
  MembershipTimers timers_;
  MembershipDue due_;  // poll()'s scratch, kept for its storage
};

}  // namespace uroce::emulator::net
