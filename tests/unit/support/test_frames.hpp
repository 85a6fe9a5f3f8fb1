// Ethernet frames built by hand for the unit tests: an 802.1Q tag or none, IPv4 or IPv6 (or another EtherType),
// then TCP, UDP or any other protocol, written byte by byte from the header layouts (IEEE 802.1Q; RFC 791, 8200,
// 793, 768). The tests of the flow matcher, the RSS hash and the checksum offload check the code's parsing
// against frames from here, so this header must share nothing with that code: it includes nothing of transport/
// but the MacAddress type, and reads nothing back out of the frames it writes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "transport/wire/address.hpp"

namespace uroce::test::frames {

using Bytes = std::vector<uint8_t>;
using Addr6 = std::array<uint8_t, 16>;

inline constexpr uint8_t tcp = 6, udp = 17, icmp = 1;

inline void put8(Bytes& b, uint8_t v) { b.push_back(v); }
inline void put16(Bytes& b, uint16_t v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}
inline void put32(Bytes& b, uint32_t v) {
  put16(b, uint16_t(v >> 16));
  put16(b, uint16_t(v));
}

// Set from a function: GCC 12 warns (wrongly) of a braced vector default member initializer being uninitialized.
inline Bytes default_payload() { return Bytes{0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03}; }

// What a test frame holds. ip_version 4 or 6 builds that IP header; anything else builds a frame of `ether_type`
// with the payload directly after the Ethernet header (no IP, TCP or UDP header). After an IP header, TCP and UDP
// get their header before the payload; any other protocol has the payload directly after the IP header.
// Nothing is computed but lengths: the checksum fields hold what is given (zero unless set), so that the tests
// of the checksum offload compute the expected sums themselves.
// Every member has an initializer (empty braces too), so that a designated initializer may name only some.
struct FrameParts {
  wire::MacAddress dst{{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}};
  wire::MacAddress src{{0x02, 0x66, 0x77, 0x88, 0x99, 0xaa}};
  std::optional<uint16_t> tci{};  // 802.1Q tag when set
  int ip_version = 4;
  uint16_t ether_type = 0x0806;  // when ip_version is neither 4 nor 6
  uint8_t protocol = udp;        // IPv4 protocol or IPv6 next header
  uint8_t version_override = 0;  // when nonzero, the version nibble written instead of 4 or 6
  // IPv4
  uint8_t ihl_override = 0;  // when nonzero, the IHL written instead of 5 + options / 4 (the total length is not)
  uint8_t tos = 0, ttl = 64;
  uint16_t identification = 0x1234;
  uint16_t flags_fragment = 0x4000;  // DF
  Bytes options{};                   // a multiple of four bytes
  uint32_t src4 = 0xc0a80a01, dst4 = 0xac100203;  // 192.168.10.1, 172.16.2.3
  uint16_t ip_checksum = 0;
  // IPv6
  uint8_t traffic_class = 0xa6;
  uint32_t flow_label = 0x9c3e1;
  uint8_t hop_limit = 57;
  Addr6 src6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  Addr6 dst6{0x20, 0x01, 0x0d, 0xb8, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd};
  // TCP or UDP (TCP: data offset 5, no options, PSH and ACK, urgent pointer 0)
  uint16_t sport = 0xc5a3, dport = 4791;
  uint32_t tcp_seq = 0x01020304, tcp_ack = 0x0a0b0c0d;
  uint16_t tcp_window = 0xffff;
  uint16_t l4_checksum = 0;
  Bytes payload = default_payload();
  size_t padding = 0;  // bytes of 0xa5 after the IP packet (Ethernet's minimum size, a trailer)
};

struct Built {
  Bytes bytes;
  size_t l3 = 0, l4 = 0, end = 0;  // the IP header, the TCP/UDP header (or payload), the end of the IP packet
  size_t l4_checksum_at = 0;       // 0 when no TCP or UDP header
};

inline Built build(const FrameParts& p) {
  const bool ip = p.ip_version == 4 || p.ip_version == 6;
  Built out;
  Bytes& b = out.bytes;
  b.insert(b.end(), p.dst.bytes.begin(), p.dst.bytes.end());
  b.insert(b.end(), p.src.bytes.begin(), p.src.bytes.end());
  if (p.tci) {
    put16(b, 0x8100);
    put16(b, *p.tci);
  }
  put16(b, p.ip_version == 4 ? 0x0800 : p.ip_version == 6 ? 0x86dd : p.ether_type);
  out.l3 = b.size();

  Bytes l4;
  size_t checksum_at = 0;
  if (ip && p.protocol == udp) {
    put16(l4, p.sport);
    put16(l4, p.dport);
    put16(l4, uint16_t(8 + p.payload.size()));
    checksum_at = l4.size();
    put16(l4, p.l4_checksum);
  } else if (ip && p.protocol == tcp) {
    put16(l4, p.sport);
    put16(l4, p.dport);
    put32(l4, p.tcp_seq);
    put32(l4, p.tcp_ack);
    put8(l4, 5 << 4);  // data offset
    put8(l4, 0x18);    // PSH, ACK
    put16(l4, p.tcp_window);
    checksum_at = l4.size();
    put16(l4, p.l4_checksum);
    put16(l4, 0);  // urgent pointer
  }
  l4.insert(l4.end(), p.payload.begin(), p.payload.end());

  if (p.ip_version == 4) {
    const uint8_t ihl = p.ihl_override ? p.ihl_override : uint8_t(5 + p.options.size() / 4);
    put8(b, uint8_t((p.version_override ? p.version_override : 4) << 4 | (ihl & 0x0f)));
    put8(b, p.tos);
    put16(b, uint16_t(20 + p.options.size() + l4.size()));
    put16(b, p.identification);
    put16(b, p.flags_fragment);
    put8(b, p.ttl);
    put8(b, p.protocol);
    put16(b, p.ip_checksum);
    put32(b, p.src4);
    put32(b, p.dst4);
    b.insert(b.end(), p.options.begin(), p.options.end());
  } else if (p.ip_version == 6) {
    put32(b, uint32_t(p.version_override ? p.version_override : 6) << 28 | uint32_t(p.traffic_class) << 20 |
                 (p.flow_label & 0xfffff));
    put16(b, uint16_t(l4.size()));
    put8(b, p.protocol);
    put8(b, p.hop_limit);
    b.insert(b.end(), p.src6.begin(), p.src6.end());
    b.insert(b.end(), p.dst6.begin(), p.dst6.end());
  }
  out.l4 = b.size();
  b.insert(b.end(), l4.begin(), l4.end());
  out.end = b.size();
  out.l4_checksum_at = checksum_at ? out.l4 + checksum_at : 0;
  b.insert(b.end(), p.padding, uint8_t(0xa5));
  return out;
}

}  // namespace uroce::test::frames
