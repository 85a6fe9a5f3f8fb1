// MLD on the wire (RFC 2710, MLDv1, host side): the Multicast Listener Queries routers send, parsed in both
// versions' formats (RFC 3810 §8.1 tells them apart by length), and the two messages an MLDv1 host sends,
// Multicast Listener Report and Done, built into a caller's buffer as the IGMP frames are (igmp_frames.hpp).
//
// MLD is IPv6's IGMP, and the NIC speaks it for the same reason: a switch snooping MLD forwards a group's
// traffic only to ports it has heard a report from. That covers both the groups the port's QPs join (RoCEv2
// UD multicast to ff0e::...) and the solicited-node groups of the port's own addresses, without which
// neighbour discovery's solicitations would never reach it (RFC 4861 §7.2.1 has a host join them).
//
// Why v1 only: RFC 3810 §8 keeps MLDv2 routers compatible with v1 hosts (a v1 report puts the group in
// v1 compatibility mode), and a v1 host answers v2 queries, whose first 24 bytes are a v1 query; the
// source filtering v2 adds is nothing RoCE multicast uses.
//
// What this file is to mld.hpp (the membership state and its timers), igmp_frames.hpp is to igmp.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/net/drop_reason.hpp"
#include "emulator/net/hop_by_hop.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::emulator::net {

inline constexpr uint8_t icmpv6_mld_query = 130;
inline constexpr uint8_t icmpv6_mld_v1_report = 131;
inline constexpr uint8_t icmpv6_mld_done = 132;
inline constexpr uint8_t icmpv6_mld_v2_report = 143;  // RFC 3810 §5.2: other hosts' reports, never ours
inline constexpr uint8_t mld_hop_limit = 1;            // RFC 2710 §3: MLD never leaves the link
inline constexpr size_t mld_v1_message_size = 24;      // type, code, checksum, max resp delay, reserved, group
inline constexpr size_t mld_v2_query_min_size = 28;    // + S/QRV, QQIC, number of sources
// The Hop-by-Hop Options header of what we send: next header, length 0, Router Alert (4 bytes), PadN (2).
inline constexpr size_t mld_hop_by_hop_size = hop_by_hop_min_size;

// Ethernet header (with the tag when there is one) + IPv6 + Hop-by-Hop with Router Alert + the MLDv1 message.
constexpr size_t mld_frame_size(bool vlan) {
  return wire::ethernet_header_size + (vlan ? wire::vlan_tag_size : 0) + wire::ipv6_header_size +
         mld_hop_by_hop_size + mld_v1_message_size;
}
inline constexpr size_t max_mld_frame_size = mld_frame_size(true);

// Any of the four MLD message types: what classify() sends to parse_mld_query.
bool is_mld_type(uint8_t icmpv6_type);

// A Multicast Listener Query, whatever its version: what a host needs to answer it.
struct MldQuery {
  wire::IpAddress group;   // all-zero (::) = a general query (every group), else a group-specific one
  Nanos max_response = 0;  // reports are due within this time (chosen at random in [0, max_response])
};

// Parses the ICMPv6 message [icmp, icmp + length) (what follows the Hop-by-Hop header) of an IPv6 packet
// from `src` to `dst` with `hop_limit`, whose Hop-by-Hop header did (`router_alert`) or did not carry the
// MLD Router Alert, as a Multicast Listener Query:
//   - at least 4 bytes (truncated_icmp), the ICMPv6 checksum over the pseudo-header (bad_icmp_checksum);
//   - type 130, else mld_not_a_query (other listeners' v1/v2 reports and dones: nothing for a host to do);
//   - at least 24 bytes (truncated_icmp);
//   - hop limit 1, a link-local source and the Router Alert (RFC 2710 §5, RFC 3810 §5.1.14 and §6.2), a
//     group that is :: or multicast; 24 bytes: v1 (max response delay in ms); 28 bytes or more: v2 (RFC 3810
//     §5.1.3's Maximum Response Code, exponential from 32768 on), whose source list must lie within the
//     message; any other length is no query (RFC 3810 §8.1): all bad_mld_message.
// A group-and-source-specific v2 query is answered as the group-specific query a v1 host sees in it, as
// igmp_frames.hpp does for IGMPv3. The code field is ignored, as RFC 2710 §3 says receivers do. Returns
// why the message is dropped, or nothing and fills `out`. Never reads outside the message.
std::optional<DropReason> parse_mld_query(const wire::IpAddress& src, const wire::IpAddress& dst, uint8_t hop_limit,
                                          bool router_alert, const uint8_t* icmp, size_t length, MldQuery& out);

// A v1 Multicast Listener Report for `group`, sent to the group; a Done for `group`, sent to all-routers
// (ff02::2). Both as RFC 2710 §3 requires: hop limit 1, a Hop-by-Hop header with the Router Alert option
// (value 0, MLD), the ICMPv6 checksum computed; from `src_ip` (the port's link-local address, or :: before it
// has one: see mld.hpp), to the destination's 33:33 MAC, from `our_mac`, with `vlan_tci` when set. Return the
// frame's size, or 0 if `out` is too small.
size_t write_mld_report(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src_ip,
                        const wire::IpAddress& group, std::optional<uint16_t> vlan_tci);
size_t write_mld_done(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src_ip,
                      const wire::IpAddress& group, std::optional<uint16_t> vlan_tci);

}  // namespace uroce::emulator::net
