// The port's MLDv1 host side (RFC 2710): it tells the link's multicast routers and snooping switches which
// IPv6 groups it listens to, so that traffic to them reaches it (mld_frames.hpp says why that matters):
// the groups its QPs join and the solicited-node groups of its own addresses, which neighbour discovery needs.
//
// How the engine (one thread, burst loop) uses it, as it uses IgmpMembership:
//   - at start-up, join(solicited_node_address(a), now) for each of the port's IPv6 addresses a (nd_frames.hpp);
//   - the set of IPv6 groups with at least one attached QP changes: join(group, now) / leave(group, now);
//   - a frame classified FrameClass::mld (a Multicast Listener Query): on_query(frame.mld, now);
//   - whenever now >= next_deadline(): poll(now, out), then transmit out.frames in order.
//
// What it does, RFC 2710 §4 with its timers (MembershipTimers, shared with IgmpMembership, whose header
// says why each rule is so; MLDv1 is IGMPv2 translated to IPv6):
//   - join: an unsolicited Report at once, repeated once unsolicited_report_interval (1 s) later;
//   - a query: for each of our groups it covers, a Report at a random delay in [0, max_response]; a report
//     already due sooner keeps its time, a later one is brought forward;
//   - leave: a Done to all-routers (ff02::2) at once.
// Left out, as in igmp.hpp: report suppression (so we always count as the last reporter and always send the
// Done, which §4 allows). The all-nodes group ff02::1 is never reported, nor any group of scope 0 (reserved)
// or 1 (interface-local) (RFC 2710 §5); v4-mapped and non-multicast addresses are not IPv6 groups: joining
// any of these does nothing.
//
// Messages come from the port's link-local address (fe80::/10, the first in its address list), as RFC 2710
// §3 requires; a port without one sends from the unspecified address ::, which RFC 3590 §4 allows for a
// node that has no link-local address yet, so that snooping switches still learn its groups. Unlike IGMP on
// a port without IPv4, MLD therefore always sends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/membership_timers.hpp"
#include "emulator/net/mld_frames.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// What poll() hands back. The engine keeps one and clear()s it, so the vector's storage is reused.
struct MldOutput {
  std::vector<std::vector<uint8_t>> frames;  // to transmit in this order: Dones, then Reports
  void clear() { frames.clear(); }
};

class MldMembership {
 public:
  // Reads the port's MAC, VLAN tag and link-local address once, as IgmpMembership does. The random delays
  // are seeded from the MAC (seed_from_mac).
  MldMembership(const PortAddresses& port, NetCounters& counters);
  MldMembership(const PortAddresses& port, NetCounters& counters, uint64_t seed);

  // Joining a group already joined, or leaving one not joined, does nothing.
  void join(const wire::IpAddress& group, Nanos now);
  void leave(const wire::IpAddress& group, Nanos now);
  void on_query(const MldQuery& query, Nanos now);

  // Appends the messages due at `now` to out.frames.
  void poll(Nanos now, MldOutput& out);
  // When poll() has something to do at the latest; `never` if nothing is pending (MembershipTimers).
  Nanos next_deadline() const { return timers_.next_deadline(); }

  bool is_member(const wire::IpAddress& group) const { return timers_.is_member(group); }
  size_t groups() const { return timers_.groups(); }

 private:
  MembershipSender sender_;
  wire::IpAddress source_;  // link-local, or ::
  NetCounters& counters_;
  MembershipTimers timers_;
  MembershipDue due_;  // poll()'s scratch, kept for its storage
};

}  // namespace uroce::emulator::net
