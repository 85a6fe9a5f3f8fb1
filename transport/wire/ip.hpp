// IPv4, IPv6 and UDP: the layers a RoCEv2 packet rides on.
#pragma once

#include <cstddef>
#include <cstdint>

#include "transport/wire/address.hpp"

namespace uroce::wire {

inline constexpr uint8_t ip_proto_icmp = 1;
inline constexpr uint8_t ip_proto_udp = 17;
inline constexpr uint16_t roce_v2_udp_port = 4791;

inline constexpr unsigned ipv4_min_header_size = 20;
inline constexpr unsigned ipv6_header_size = 40;
inline constexpr unsigned udp_header_size = 8;

// ECN codepoints (low two bits of the IPv4 TOS / IPv6 traffic class).
enum class Ecn : uint8_t { not_ect = 0, ect1 = 1, ect0 = 2, ce = 3 };

struct Ipv4Header {
  uint8_t header_length = ipv4_min_header_size;  // bytes, IHL * 4
  uint8_t tos = 0;                               // DSCP << 2 | ECN
  uint16_t total_length = 0;
  uint16_t identification = 0;
  bool dont_fragment = true;   // RoCEv2 senders set DF
  bool more_fragments = false;
  uint16_t fragment_offset = 0;  // in 8-byte units
  uint8_t ttl = 64;
  uint8_t protocol = ip_proto_udp;
  uint16_t checksum = 0;
  bool checksum_ok = true;  // set by the parser
  uint32_t src = 0;         // host order
  uint32_t dst = 0;

  Ecn ecn() const { return Ecn(tos & 3); }
  uint8_t dscp() const { return tos >> 2; }
};

struct Ipv6Header {
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;  // 20 bits
  uint16_t payload_length = 0;
  uint8_t next_header = ip_proto_udp;
  uint8_t hop_limit = 64;
  IpAddress src;
  IpAddress dst;

  Ecn ecn() const { return Ecn(traffic_class & 3); }
};

struct UdpHeader {
  uint16_t src_port = 0;
  uint16_t dst_port = roce_v2_udp_port;
  uint16_t length = 0;
  uint16_t checksum = 0;  // RoCEv2 transmits 0
};

// Internet checksum (RFC 1071) of `len` bytes.
uint16_t internet_checksum(const uint8_t* p, size_t len);

// Writers; each writes the header as given (lengths and checksum included) and returns its size.
// write_ipv4 computes the header checksum itself (options are not supported when building).
unsigned write_ipv4(uint8_t* out, const Ipv4Header& h);
unsigned write_ipv6(uint8_t* out, const Ipv6Header& h);
unsigned write_udp(uint8_t* out, const UdpHeader& h);

// Linux's choice of RoCEv2 UDP source port from a 20-bit flow label (see docs and rdma_get_udp_sport):
// stable per flow and always in 0xC000-0xFFFF.
uint16_t udp_source_port_from_flow_label(uint32_t flow_label);
// The flow label Linux computes from the two QP numbers when the application gave none.
uint32_t flow_label_from_qpns(uint32_t local_qpn, uint32_t remote_qpn);

}  // namespace uroce::wire
