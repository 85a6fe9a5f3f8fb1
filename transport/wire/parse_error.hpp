// Why a byte string is not a well-formed frame. Every parser exit that is not `none` names one of these,
// together with the byte offset where the problem was found (Frame::error_offset).
#pragma once

#include <cstdint>
#include <string_view>

namespace uroce::wire {

enum class ParseError : uint8_t {
  none = 0,
  truncated_ethernet,        // shorter than the Ethernet header (or its VLAN tag)
  truncated_arp,
  unsupported_arp,           // ARP that is not IPv4 over Ethernet
  truncated_mac_control,     // a MAC Control frame shorter than its opcode's body (PAUSE 4, PFC 20 bytes)
  truncated_ipv4,            // shorter than the IPv4 header (IHL included)
  bad_ip_version,            // version nibble does not match the ethertype
  bad_ipv4_header_length,    // IHL < 5
  ip_length_mismatch,        // IP length field smaller than its headers, or larger than the bytes captured
  ipv4_fragment,             // MF set or fragment offset non-zero: RoCEv2 is never fragmented
  truncated_ipv6,
  truncated_udp,
  udp_length_mismatch,       // UDP length differs from what IP carries, or is below 8
  truncated_bth,             // UDP 4791 payload shorter than BTH + ICRC
  bad_tver,                  // BTH transport header version != 0
  unknown_opcode,            // not an RC/UC/UD opcode or the RoCEv2 CNP
  truncated_extension_headers,
  bad_pad_count,             // pad > payload, or non-zero on a FIRST/MIDDLE packet
  payload_not_aligned,       // payload + pad is not a multiple of 4
  unexpected_payload,        // bytes left over on an opcode that carries no payload
};

std::string_view to_string(ParseError e);     // a phrase: "truncated BTH", ...
std::string_view error_name(ParseError e);    // an identifier: "truncated_bth", ...

}  // namespace uroce::wire
