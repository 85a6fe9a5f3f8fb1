// IGMP on the wire (RFC 2236, IGMPv2, host side): the Membership Queries routers send, parsed in all three
// versions' formats (RFC 3376 §7.1 tells them apart by length), and the two messages an IGMPv2 host sends,
// Membership Report and Leave Group, built into a caller's buffer as the ARP frames are (arp_frames.hpp).
//
// Why the NIC speaks IGMP at all: a switch with IGMP snooping (most managed switches, Linux bridges with
// multicast_snooping on) forwards a group's traffic only to ports it has heard a report from, so RoCE UD
// multicast to a group we joined would never reach the port without our reports.
//
// What this file is to igmp.hpp (the membership state and its timers), nd_frames.hpp is to nd_cache.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/net/drop_reason.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::emulator::net {

inline constexpr uint8_t ip_proto_igmp = 2;
inline constexpr uint32_t igmp_all_hosts = 0xe0000001;    // 224.0.0.1: general queries are sent here
inline constexpr uint32_t igmp_all_routers = 0xe0000002;  // 224.0.0.2: leaves are sent here
inline constexpr uint8_t igmp_membership_query = 0x11;
inline constexpr uint8_t igmp_v2_membership_report = 0x16;
inline constexpr uint8_t igmp_leave_group = 0x17;
inline constexpr size_t igmp_v2_message_size = 8;       // type, max resp time, checksum, group
inline constexpr size_t igmp_v3_query_min_size = 12;    // + resv/S/QRV, QQIC, number of sources
// The IPv4 header of what we send: 20 bytes + the 4-byte Router Alert option (RFC 2113).
inline constexpr size_t igmp_ip_header_size = wire::ipv4_min_header_size + 4;

// Ethernet header (with the tag when there is one) + IPv4 with Router Alert + the 8-byte IGMPv2 message.
constexpr size_t igmp_frame_size(bool vlan) {
  return wire::ethernet_header_size + (vlan ? wire::vlan_tag_size : 0) + igmp_ip_header_size +
         igmp_v2_message_size;
}
inline constexpr size_t max_igmp_frame_size = igmp_frame_size(true);

// A Membership Query, whatever its version: what a host needs to answer it.
struct IgmpQuery {
  uint32_t group = 0;      // host order; 0 = a general query (every group), else a group-specific one
  Nanos max_response = 0;  // reports are due within this time (chosen at random in [0, max_response])
};

// Parses the IGMP message [igmp, igmp + length) (the whole IPv4 payload) as a Membership Query:
//   - at least 8 bytes (truncated_igmp), the Internet checksum over the whole message (bad_igmp_checksum);
//   - type 0x11, else igmp_not_a_query (reports and leaves of other members: nothing for a host to do);
//   - 8 bytes: v1 (max resp 0, taken as RFC 2236 §4's 10 s) or v2 (max resp in tenths of a second);
//     12 bytes or more: v3 (RFC 3376 §4.1.1's max resp code, exponential from 128 on), whose source list
//     must lie within the message; any other length is no query at all (RFC 3376 §7.1): bad_igmp_message.
// A group-and-source-specific v3 query is answered as the group-specific query an IGMPv2 host sees in it:
// the v3 format keeps v2's fields first (RFC 3376 §4.1), and the sources only narrow what an IGMPv3 host
// reports, which a v2 host's reports never name. Returns why the message is dropped, or nothing and
// fills `out`. Never reads outside the message.
std::optional<DropReason> parse_igmp_query(const uint8_t* igmp, size_t length, IgmpQuery& out);

// A v2 Membership Report for `group`, sent to the group, from `src_ip`; a Leave Group for `group`, sent to
// all-routers. Both as RFC 2236 §2 requires: IPv4 TTL 1 with the Router Alert option, IP and IGMP checksums
// computed; to the destination's multicast MAC, from `our_mac`, with `vlan_tci` when set. Return the frame's
// size, or 0 if `out` is too small.
size_t write_igmp_report(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t src_ip, uint32_t group,
                         std::optional<uint16_t> vlan_tci);
size_t write_igmp_leave(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t src_ip, uint32_t group,
                        std::optional<uint16_t> vlan_tci);

}  // namespace uroce::emulator::net
