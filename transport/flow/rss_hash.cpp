#include "transport/flow/rss_hash.hpp"

#include <array>
#include <cstddef>

#include "transport/wire/bytes.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::transport::flow {

namespace {

using Frame = std::span<const uint8_t>;
using wire::load_be16;

constexpr uint8_t ip_protocol_tcp = 6;
constexpr uint8_t ip_protocol_udp = 17;

// The longest input the fields can select: two IPv6 addresses and two ports.
constexpr size_t max_input_size = 16 + 16 + 2 + 2;

// The hash input, built field by field in the specification's order.
struct Input {
  std::array<uint8_t, max_input_size> bytes{};
  size_t size = 0;

  void append(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) bytes[size++] = p[i];
  }
  std::span<const uint8_t> view() const { return {bytes.data(), size}; }
};

// A key byte, with the key taken as padded with zeros: a key shorter than input + 4 bytes (which a caller
// should not pass, but may) then hashes as though it were longer, rather than reading past its end.
uint8_t key_byte(std::span<const uint8_t> key, size_t i) { return i < key.size() ? key[i] : 0; }

// Appends the ports of a TCP or UDP header at `l4` when the fields select them and the frame holds them.
void append_ports(Input& in, uint64_t fields, Frame f, uint8_t protocol, size_t l4) {
  uint64_t src_bit = 0, dst_bit = 0;
  if (protocol == ip_protocol_tcp) {
    src_bit = hash_src_port_tcp;
    dst_bit = hash_dst_port_tcp;
  } else if (protocol == ip_protocol_udp) {
    src_bit = hash_src_port_udp;
    dst_bit = hash_dst_port_udp;
  } else {
    return;
  }
  // TCP and UDP both start with the source port, then the destination port. A header cut short yields
  // neither: hashing one port of a truncated header would be a hash of neither kind.
  if (l4 > f.size() || f.size() - l4 < 4) return;
  if (fields & src_bit) in.append(f.data() + l4, 2);
  if (fields & dst_bit) in.append(f.data() + l4 + 2, 2);
}

// The fields `fields` selects, as far as `f` has them, in the specification's order. The parsing is the flow
// table matcher's (flow_rule.cpp), so that steering and hashing agree on what a frame is: an optional 802.1Q
// tag, IPv4 options skipped by the IHL, IPv6 extension headers not walked (the next header field is taken as
// the L4 protocol, so a frame with extension headers hashes over its addresses only).
Input select_fields(uint64_t fields, Frame f) {
  Input in;
  if (f.size() < wire::ethernet_header_size) return in;
  uint16_t ether_type = load_be16(f.data() + 12);
  size_t l3 = wire::ethernet_header_size;
  if (ether_type == wire::ethertype_vlan) {
    if (f.size() < l3 + wire::vlan_tag_size) return in;
    ether_type = load_be16(f.data() + 16);
    l3 += wire::vlan_tag_size;
  }
  const size_t rest = f.size() - l3;
  const uint8_t* ip = f.data() + l3;
  if (ether_type == wire::ethertype_ipv4) {
    if (rest < wire::ipv4_min_header_size || ip[0] >> 4 != 4) return in;
    const size_t length = size_t(ip[0] & 0x0f) * 4;
    if (length < wire::ipv4_min_header_size || length > rest) return in;
    if (fields & hash_src_ipv4) in.append(ip + 12, 4);
    if (fields & hash_dst_ipv4) in.append(ip + 16, 4);
    // A non-first fragment carries the middle of the L4 payload where the ports would be.
    if ((load_be16(ip + 6) & 0x1fff) == 0) append_ports(in, fields, f, ip[9], l3 + length);
  } else if (ether_type == wire::ethertype_ipv6) {
    if (rest < wire::ipv6_header_size || ip[0] >> 4 != 6) return in;
    if (fields & hash_src_ipv6) in.append(ip + 8, 16);
    if (fields & hash_dst_ipv6) in.append(ip + 24, 16);
    append_ports(in, fields, f, ip[6], l3 + wire::ipv6_header_size);
  }
  return in;
}

}  // namespace

uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input) {
  // `window` holds the 64 key bits that start at the current input byte's first bit, most significant
  // first. Input bit b (0 = most significant) of the byte selects key bits b..b+31, which are window bits
  // 63-b..32-b; after the byte the window moves on by 8 bits and takes in the next key byte. So the key is
  // read once, a byte at a time, instead of re-assembling a 32-bit window for every input bit.
  uint64_t window = 0;
  for (size_t i = 0; i < 8; ++i) window = window << 8 | key_byte(key, i);
  uint32_t result = 0;
  for (size_t j = 0; j < input.size(); ++j) {
    const uint8_t byte = input[j];
    for (unsigned b = 0; b < 8; ++b)
      if (byte & (0x80u >> b)) result ^= uint32_t(window >> (32 - b));
    window = window << 8 | key_byte(key, j + 8);
  }
  return result;
}

uint32_t rss_hash(std::span<const uint8_t> key, uint64_t fields, std::span<const uint8_t> frame) {
  return toeplitz_hash(key, select_fields(fields, frame).view());
}

}  // namespace uroce::transport::flow
