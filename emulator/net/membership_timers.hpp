// The report timers of a multicast host, the same for IGMPv2 (RFC 2236 §3, igmp.hpp) and MLDv1 (RFC 2710
// §4, mld.hpp): MLDv1 is IGMPv2 translated to IPv6, state machine and all. This class keeps the groups and
// decides when each message is due; the two memberships decide which addresses count as groups, and build
// and count the frames.
//
// The rules (igmp.hpp says why each is so):
//   - join: a report at once, repeated once unsolicited_report_interval later;
//   - a query: for each group it covers (all for a general query, else the one named), a report at a random
//     delay in [0, max_response]; a report already due sooner keeps its time, a later one is brought forward;
//   - leave: the group is forgotten with any report still due, and a leave message (IGMP Leave Group, MLD
//     Done) is due at once.
//
// Groups are held as wire::IpAddress, IPv4 ones v4-mapped, so one class serves both families. MembershipSender
// below is the other shared part: the port's identity every message carries, and building a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// Between a join's report and its one repetition. RFC 2236 §8.10's default is 10 s (RFC 2710 §7.10's too),
// but an application that joins (mckey, rdma_join_multicast) starts sending or expecting traffic at once: a
// lost first report would leave it without the group's traffic for 10 s. RFC 3376 §8.11 and RFC 3810 §9.11
// lowered the same interval to 1 s for that reason, and both older RFCs make their timers configurable.
inline constexpr Nanos unsolicited_report_interval = seconds(1);

// A seed for the random delays from the port's MAC: hosts of one link answer at different times, but a
// run is repeatable.
uint64_t seed_from_mac(const wire::MacAddress& mac);

// What poll() found due, in the order to send it: leave messages first (a group left and joined again
// within one burst ends as a member), then reports.
struct MembershipDue {
  std::vector<wire::IpAddress> leaves;
  std::vector<wire::IpAddress> reports;
  void clear() {
    leaves.clear();
    reports.clear();
  }
};

class MembershipTimers {
 public:
  // `sends`: false for a port that cannot send these messages (IGMP without an IPv4 address): groups are
  // still tracked, but nothing is ever due.
  MembershipTimers(bool sends, uint64_t seed) : sends_(sends), rng_(seed) {}

  // Joining a group already joined, or leaving one not joined, does nothing. The caller has checked that
  // `group` is one its protocol reports.
  void join(const wire::IpAddress& group, Nanos now);
  void leave(const wire::IpAddress& group, Nanos now);
  // `group`: nullopt for a general query.
  void on_query(const std::optional<wire::IpAddress>& group, Nanos max_response, Nanos now);

  // Fills `due` (cleared first) with what is due at `now`.
  void poll(Nanos now, MembershipDue& due);
  // When poll() has something to do at the latest; `never` if nothing is pending. O(1): cached, lowered by
  // events, so it may come early (that poll finds nothing to do and settles it), never late.
  Nanos next_deadline() const { return next_deadline_; }

  bool is_member(const wire::IpAddress& group) const { return index_of(group) != groups_.size(); }
  size_t groups() const { return groups_.size(); }

 private:
  struct Group {
    wire::IpAddress address;
    Nanos report_at = never;      // the next report, unsolicited or answering a query
    bool repeat_pending = false;  // the join's second unsolicited report is still to be scheduled
  };

  size_t index_of(const wire::IpAddress& group) const;  // groups_.size() when not a member
  void report_no_later_than(Group& g, Nanos at);

  bool sends_;
  std::vector<Group> groups_;            // a handful: linear scans
  std::vector<wire::IpAddress> leaves_;  // leave messages due at the next poll
  std::mt19937_64 rng_;
  Nanos next_deadline_ = never;
};

// The port's MAC and VLAN tag, read once, as every IGMP and MLD message we send carries them.
struct MembershipSender {
  explicit MembershipSender(const PortAddresses& port) : mac(port.mac), vlan_tci(port.vlan_tci) {}

  // Builds the message `write` (write_igmp_report, write_mld_done, ...) makes about `group` from `source`,
  // in at most `max_size` bytes, appends it to `frames` and counts it in `counter`.
  template <class Write, class Address>
  void send(Write write, size_t max_size, const Address& source, const Address& group, uint64_t& counter,
            std::vector<std::vector<uint8_t>>& frames) const {
    std::vector<uint8_t> frame(max_size);
    frame.resize(write(std::span<uint8_t>(frame), mac, source, group, vlan_tci));
    ++counter;
    frames.push_back(std::move(frame));
  }

  wire::MacAddress mac;
  std::optional<uint16_t> vlan_tci;
};

}  // namespace uroce::emulator::net
