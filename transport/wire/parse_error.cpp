#include "transport/wire/parse_error.hpp"

namespace uroce::wire {

namespace {
struct Names {
  std::string_view id;
  std::string_view phrase;
};

Names names(ParseError e) {
  switch (e) {
    case ParseError::none: return {"none", "no error"};
    case ParseError::truncated_ethernet: return {"truncated_ethernet", "truncated Ethernet header"};
    case ParseError::truncated_arp: return {"truncated_arp", "truncated ARP packet"};
    case ParseError::unsupported_arp: return {"unsupported_arp", "ARP that is not IPv4 over Ethernet"};
    case ParseError::truncated_mac_control:
      return {"truncated_mac_control", "MAC Control frame shorter than its opcode's body"};
    case ParseError::truncated_ipv4: return {"truncated_ipv4", "truncated IPv4 header"};
    case ParseError::bad_ip_version: return {"bad_ip_version", "IP version does not match the ethertype"};
    case ParseError::bad_ipv4_header_length: return {"bad_ipv4_header_length", "IPv4 header length below 20"};
    case ParseError::ip_length_mismatch:
      return {"ip_length_mismatch", "IP length disagrees with its headers or the captured bytes"};
    case ParseError::ipv4_fragment: return {"ipv4_fragment", "fragmented IPv4 (RoCEv2 is never fragmented)"};
    case ParseError::truncated_ipv6: return {"truncated_ipv6", "truncated IPv6 header"};
    case ParseError::truncated_udp: return {"truncated_udp", "truncated UDP header"};
    case ParseError::udp_length_mismatch: return {"udp_length_mismatch", "UDP length disagrees with the IP length"};
    case ParseError::truncated_bth: return {"truncated_bth", "truncated BTH (or no room for the ICRC)"};
    case ParseError::bad_tver: return {"bad_tver", "BTH header version is not 0"};
    case ParseError::unknown_opcode: return {"unknown_opcode", "unknown BTH opcode"};
    case ParseError::truncated_extension_headers:
      return {"truncated_extension_headers", "truncated extension headers"};
    case ParseError::bad_pad_count: return {"bad_pad_count", "bad pad count"};
    case ParseError::payload_not_aligned: return {"payload_not_aligned", "payload plus pad is not a multiple of 4"};
    case ParseError::unexpected_payload: return {"unexpected_payload", "payload on an opcode that carries none"};
  }
  return {"unknown", "unknown error"};
}
}  // namespace

std::string_view to_string(ParseError e) { return names(e).phrase; }
std::string_view error_name(ParseError e) { return names(e).id; }

}  // namespace uroce::wire
