// Why a received frame was not for the NIC. Each reason is a counter that `uroce stats` prints by name, so
// an operator can tell "someone else's traffic" from "a peer sending broken frames".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::emulator::net {

enum class DropReason : uint8_t {
  // Well-formed, but not ours to handle.
  not_for_our_mac,        // not our MAC, broadcast or the MAC of one of our groups: others' traffic
  other_vlan,             // tagged with a VLAN the port is not on (or untagged while the port is on one)
  not_for_our_ip,         // IP packet to none of the port's addresses, or to a group it takes no such packet for
  unsupported_ethertype,  // not IPv4, IPv6 or ARP (after at most one 802.1Q tag)
  unsupported_arp,        // ARP that is not IPv4 over Ethernet
  other_ip_protocol,      // IP but neither UDP nor ICMP nor IGMP (TCP, IPv6 extension headers other than MLD's ...)
  other_udp_port,         // UDP to a port other than 4791
  other_icmp_type,        // ICMPv4 that is not an echo request
  ipv4_fragment,          // nothing the NIC answers is ever fragmented, and it reassembles nothing
  other_icmpv6_type,      // ICMPv6 that is not an echo request, Neighbor Solicitation or Advertisement
  igmp_not_a_query,       // IGMP other than a Membership Query: other members' reports and leaves
  mld_not_a_query,        // MLD other than a Multicast Listener Query: other listeners' v1/v2 reports and dones
  other_mac_control,      // a MAC Control frame to 01:80:c2:00:00:01 that is neither PAUSE nor PFC (EPON's ...)
  // Malformed: the frame contradicts itself (is_malformed()).
  truncated_ethernet,
  truncated_arp,
  truncated_ip,
  bad_ip_version,         // version nibble does not match the ethertype
  bad_ip_header_length,   // IHL below 5
  ip_length_mismatch,     // IP length smaller than its header or larger than the bytes received
  bad_ip_checksum,
  truncated_udp,
  udp_length_mismatch,    // UDP length differs from what the IP packet carries
  truncated_icmp,
  bad_icmp_checksum,      // ICMPv4, or ICMPv6 over its pseudo-header
  bad_nd_hop_limit,       // NS/NA not sent with hop limit 255 (RFC 4861 §7.1): possibly from off-link
  bad_nd_message,         // NS/NA failing another RFC 4861 §7.1 check (code, target, options, flags)
  truncated_igmp,         // IGMP shorter than its 8-byte header
  bad_igmp_checksum,
  bad_igmp_message,       // a query of a length no IGMP version has (RFC 3376 §7.1), or sources past its end
  bad_hop_by_hop,         // IPv6 Hop-by-Hop header past the packet's end, an option past the header's end, or
                          // an option RFC 8200 §4.2 has a node that does not know it discard the packet for
  bad_mld_message,        // an MLD query failing RFC 2710 §5 / RFC 3810 §5.1, §6.2: hop limit not 1, source not
                          // link-local, no Router Alert, a unicast group, a length no MLD version has, sources
                          // past its end
  bad_router_advertisement,  // an RA failing RFC 4861 §6.1.2: hop limit not 255, source not link-local, code,
                             // length, an option of zero length or past the message's end
  truncated_mac_control,  // a PAUSE or PFC frame shorter than its body
};

inline constexpr size_t drop_reason_count = size_t(DropReason::truncated_mac_control) + 1;

// The counter name: "not_for_our_mac", ...
std::string_view to_string(DropReason r);
bool is_malformed(DropReason r);

}  // namespace uroce::emulator::net
