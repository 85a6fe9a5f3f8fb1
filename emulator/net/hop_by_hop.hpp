// The one IPv6 extension header the NIC reads: Hop-by-Hop Options (RFC 8200 §4.3), because MLD messages
// carry their Router Alert option in it (RFC 2710 §3, RFC 2711) and a host must check that option before it
// acts on a query (RFC 3810 §6.2). RoCEv2 and neighbour discovery use no extension header, so classify.cpp
// looks into one only for MLD; every other packet with extension headers stays dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "emulator/net/drop_reason.hpp"

namespace uroce::emulator::net {

inline constexpr uint8_t ipv6_next_header_hop_by_hop = 0;
inline constexpr size_t hop_by_hop_min_size = 8;  // next header, length, 6 bytes of options
inline constexpr uint8_t ipv6_option_pad1 = 0;
inline constexpr uint8_t ipv6_option_padn = 1;
inline constexpr uint8_t ipv6_option_router_alert = 5;  // RFC 2711: 2 bytes of value
inline constexpr uint16_t router_alert_mld = 0;         // RFC 2711's value for "the datagram contains MLD"

struct HopByHop {
  uint8_t next_header = 0;
  size_t length = 0;               // of the whole header, in bytes: where the next header starts
  bool mld_router_alert = false;   // a Router Alert option with value 0 (MLD) is present
};

// Parses the Hop-by-Hop Options header at [p, p + avail) (avail: what is left of the IPv6 payload). Returns
// bad_hop_by_hop when the header is longer than what is left, an option runs past the header's end, or an
// option's type tells a node that does not know it to discard the packet (RFC 8200 §4.2: its two high bits
// are not 00). Otherwise fills `out`. Never reads outside [p, p + avail).
std::optional<DropReason> parse_hop_by_hop(const uint8_t* p, size_t avail, HopByHop& out);

}  // namespace uroce::emulator::net
