// IPv6 neighbour discovery (RFC 4861) on the wire: the Neighbor Solicitation and Neighbor Advertisement
// messages with their source/target link-layer address options, the ICMPv6 checksum over the IPv6
// pseudo-header (RFC 8200 §8.1), the validity checks of RFC 4861 §7.1.1 and §7.1.2, and the frames the NIC
// sends, built into a caller's buffer as the ARP frames are (arp_frames.hpp).
//
// This is IPv6's ARP: what arp_frames.hpp is to arp_cache.hpp and arp_responder.hpp, this file is to
// nd_cache.hpp and nd_responder.hpp. Router discovery is router_discovery_frames.hpp's; redirects and DAD of our own
// addresses are not done.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "emulator/net/drop_reason.hpp"
#include "transport/wire/address.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::emulator::net {

inline constexpr uint8_t ip_proto_icmpv6 = 58;
inline constexpr uint8_t icmpv6_neighbor_solicitation = 135;
inline constexpr uint8_t icmpv6_neighbor_advertisement = 136;
inline constexpr uint8_t nd_option_source_lladdr = 1;
inline constexpr uint8_t nd_option_target_lladdr = 2;
inline constexpr uint8_t nd_hop_limit = 255;  // RFC 4861: sent with 255, anything else is off-link: dropped
inline constexpr size_t nd_message_min_size = 24;  // type, code, checksum, flags/reserved, target
inline constexpr size_t nd_lladdr_option_size = 8;  // type, length (1 = 8 bytes), the 6-byte MAC

// Ethernet header (with the tag when there is one) + IPv6 header + the NS or NA with one link-layer option.
constexpr size_t nd_frame_size(bool vlan) {
  return wire::ethernet_header_size + (vlan ? wire::vlan_tag_size : 0) + wire::ipv6_header_size +
         nd_message_min_size + nd_lladdr_option_size;
}
inline constexpr size_t max_nd_frame_size = nd_frame_size(true);

// One NS or NA, with what the IPv6 header around it said.
struct NdMessage {
  uint8_t type = icmpv6_neighbor_solicitation;
  bool router = false;     // NA flags (RFC 4861 §4.4)
  bool solicited = false;
  bool override_flag = false;
  wire::IpAddress target;
  // The source link-layer address option of an NS, the target link-layer address option of an NA.
  std::optional<wire::MacAddress> lladdr;
  wire::IpAddress ip_src;
  wire::IpAddress ip_dst;

  bool is_solicitation() const { return type == icmpv6_neighbor_solicitation; }
};

// Address helpers. Addresses are the 16 bytes of wire::IpAddress (never v4-mapped here).
bool is_unspecified(const wire::IpAddress& a);                               // ::
bool is_multicast(const wire::IpAddress& a);                                 // ff00::/8
bool is_link_local(const wire::IpAddress& a);                                // fe80::/10
wire::IpAddress solicited_node_address(const wire::IpAddress& a);            // ff02::1:ffXX:XXXX
wire::IpAddress all_nodes_address();                                         // ff02::1
wire::MacAddress multicast_mac(const wire::IpAddress& group);
// Neither zero nor a group address: a link-layer address worth learning (others are bogus).
bool is_unicast_mac(const wire::MacAddress& mac);                // 33:33 + the last 4 bytes
// The link-local address of an interface with this MAC: fe80::/64 + modified EUI-64 (RFC 4291 App. A).
wire::IpAddress link_local_from_mac(const wire::MacAddress& mac);

// The ICMPv6 checksum of `message` (its checksum field included as it is) between `src` and `dst`: 0 for
// a message whose checksum is right; for one with a zeroed field, the value to store there.
uint16_t icmpv6_checksum(const wire::IpAddress& src, const wire::IpAddress& dst, const uint8_t* message,
                         size_t length);

// Parses and validates the ICMPv6 message [icmp, icmp + length) that an IPv6 packet from `src` to `dst`
// with `hop_limit` carried, as RFC 4861 §7.1.1 (NS) / §7.1.2 (NA) say: hop limit 255, checksum, code 0,
// length, target not multicast, every option of nonzero length and within the message, an NS from :: only
// to a solicited-node address and without a source link-layer option, an NA to a multicast address not
// Solicited; and (RFC 4291) no multicast or IPv4-mapped source, no IPv4-mapped target. Other types:
// DropReason::other_icmpv6_type. Returns the reason a message is invalid, or nothing and fills `out`.
// Never reads outside the message.
std::optional<DropReason> parse_nd(const wire::IpAddress& src, const wire::IpAddress& dst, uint8_t hop_limit,
                                   const uint8_t* icmp, size_t length, NdMessage& out);

// Writes an Ethernet frame carrying `m` (from m.ip_src to m.ip_dst, hop limit 255, checksum computed, the
// link-layer option when m.lladdr is set, as a source option in an NS and a target option in an NA).
// Returns its size, or 0 if `out` is too small.
size_t write_nd_frame(std::span<uint8_t> out, const wire::MacAddress& eth_dst, const wire::MacAddress& eth_src,
                      std::optional<uint16_t> vlan_tci, const NdMessage& m);

// "Who has `target`? Tell `src` at `our_mac`": to the target's solicited-node group (resolution), or
// unicast to `unicast_mac` and `target` itself (re-checking a known entry, RFC 4861 §7.3.3's probe).
size_t write_neighbor_solicitation(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src,
                                   const wire::IpAddress& target, std::optional<uint16_t> vlan_tci,
                                   std::optional<wire::MacAddress> unicast_mac = std::nullopt);

// The answer to `ns` (one of our addresses is its target), from the Ethernet frame of `ns_eth_src`:
// Solicited and Override set, our MAC as the target link-layer option, to the solicitation's source (its
// link-layer option's MAC, or the frame's source MAC without one); to all-nodes, not Solicited, when the
// source is :: (RFC 4861 §7.2.4, a duplicate address detection probe).
size_t write_neighbor_advertisement(std::span<uint8_t> out, const NdMessage& ns, const wire::MacAddress& ns_eth_src,
                                    const wire::MacAddress& our_mac, std::optional<uint16_t> vlan_tci);

}  // namespace uroce::emulator::net
