#include "transport/flow/flow_rule.hpp"

#include <cstddef>
#include <optional>

#include "transport/wire/bytes.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::transport::flow {

namespace {

using Frame = std::span<const uint8_t>;
using wire::load_be16;
using wire::load_be32;

// The Ethernet header as a flow table sees it: the type after an optional 802.1Q tag, and where L3 starts.
struct Ethernet {
  bool tagged = false;
  uint16_t tci = 0;
  uint16_t ether_type = 0;
  size_t l3 = 0;  // offset of the first byte after the header (and tag)
};

// The TCP or UDP header's place: what the IP header says it is, and where it starts.
struct Transport {
  uint8_t protocol = 0;
  size_t offset = 0;
};

template <typename T>
bool masked_equal(T field, T value, T mask) {
  return (field & mask) == (value & mask);
}

template <size_t N>
bool masked_equal(const uint8_t* field, const std::array<uint8_t, N>& value, const std::array<uint8_t, N>& mask) {
  for (size_t i = 0; i < N; ++i)
    if ((field[i] & mask[i]) != (value[i] & mask[i])) return false;
  return true;
}

// Nothing matches a frame without a whole Ethernet header: every spec (and a rule without specs) needs one.
std::optional<Ethernet> parse_ethernet(Frame f) {
  if (f.size() < wire::ethernet_header_size) return std::nullopt;
  Ethernet e;
  e.ether_type = load_be16(f.data() + 12);
  e.l3 = wire::ethernet_header_size;
  if (e.ether_type == wire::ethertype_vlan) {
    if (f.size() < wire::ethernet_header_size + wire::vlan_tag_size) return std::nullopt;
    e.tagged = true;
    e.tci = load_be16(f.data() + 14);
    e.ether_type = load_be16(f.data() + 16);
    e.l3 += wire::vlan_tag_size;
  }
  return e;
}

// The IPv4 header's length in bytes (IHL * 4) when the frame carries a whole, plausible one; 0 otherwise.
// Only the header itself must be there: the flow table looks at fields, not at the total length.
size_t ipv4_header_length(Frame f, const Ethernet& e) {
  if (e.ether_type != wire::ethertype_ipv4 || f.size() - e.l3 < wire::ipv4_min_header_size) return 0;
  const uint8_t* ip = f.data() + e.l3;
  const size_t length = size_t(ip[0] & 0x0f) * 4;
  if (ip[0] >> 4 != 4 || length < wire::ipv4_min_header_size || length > f.size() - e.l3) return 0;
  return length;
}

bool has_ipv6_header(Frame f, const Ethernet& e) {
  return e.ether_type == wire::ethertype_ipv6 && f.size() - e.l3 >= wire::ipv6_header_size &&
         f[e.l3] >> 4 == 6;
}

// Where the L4 header starts, for an IPv4 or IPv6 frame. IPv4 options are skipped by the IHL; IPv6
// extension headers are not walked (as mlx5 matches the next header field itself). A non-first IPv4
// fragment carries no L4 header, only the middle of one's payload: nothing there to match ports against.
std::optional<Transport> locate_transport(Frame f, const Ethernet& e) {
  if (const size_t length = ipv4_header_length(f, e)) {
    const uint8_t* ip = f.data() + e.l3;
    if ((load_be16(ip + 6) & 0x1fff) != 0) return std::nullopt;
    return Transport{ip[9], e.l3 + length};
  }
  if (has_ipv6_header(f, e)) return Transport{f[e.l3 + 6], e.l3 + wire::ipv6_header_size};
  return std::nullopt;
}

bool matches_eth(const EthSpec& s, Frame f, const Ethernet& e) {
  // A masked TCI asks for a tag: an untagged frame has no TCI to compare, not a TCI of 0.
  if (s.vlan_tag_mask != 0 && !e.tagged) return false;
  return masked_equal(f.data(), s.dst.bytes, s.dst_mask.bytes) &&
         masked_equal(f.data() + 6, s.src.bytes, s.src_mask.bytes) &&
         masked_equal(e.ether_type, s.ether_type, s.ether_type_mask) &&
         masked_equal(e.tci, s.vlan_tag, s.vlan_tag_mask);
}

bool matches_ipv4(const Ipv4Spec& s, Frame f, const Ethernet& e) {
  if (ipv4_header_length(f, e) == 0) return false;
  const uint8_t* ip = f.data() + e.l3;
  const uint8_t flags = uint8_t(ip[6] >> 5);  // the top three bits of the flags / fragment offset field
  return masked_equal(load_be32(ip + 12), s.src, s.src_mask) && masked_equal(load_be32(ip + 16), s.dst, s.dst_mask) &&
         masked_equal(ip[9], s.proto, s.proto_mask) && masked_equal(ip[1], s.tos, s.tos_mask) &&
         masked_equal(ip[8], s.ttl, s.ttl_mask) && masked_equal(flags, s.flags, s.flags_mask);
}

bool matches_ipv6(const Ipv6Spec& s, Frame f, const Ethernet& e) {
  if (!has_ipv6_header(f, e)) return false;
  const uint8_t* ip = f.data() + e.l3;
  const uint32_t first = load_be32(ip);  // version (4) | traffic class (8) | flow label (20)
  return masked_equal(ip + 8, s.src, s.src_mask) && masked_equal(ip + 24, s.dst, s.dst_mask) &&
         masked_equal(first & 0xfffffu, s.flow_label, s.flow_label_mask) &&
         masked_equal(ip[6], s.next_hdr, s.next_hdr_mask) &&
         masked_equal(uint8_t(first >> 20), s.traffic_class, s.traffic_class_mask) &&
         masked_equal(ip[7], s.hop_limit, s.hop_limit_mask);
}

bool matches_l4(const L4Spec& s, Frame f, const Ethernet& e) {
  // The protocol is implied, not masked: a UDP spec with every port masked out still matches UDP only.
  const std::optional<Transport> t = locate_transport(f, e);
  if (!t || t->protocol != s.protocol || f.size() - t->offset < 4) return false;
  const uint8_t* l4 = f.data() + t->offset;  // TCP and UDP both start with the source and destination ports
  return masked_equal(load_be16(l4), s.src_port, s.src_port_mask) &&
         masked_equal(load_be16(l4 + 2), s.dst_port, s.dst_port_mask);
}

}  // namespace

bool matches(const Spec& spec, std::span<const uint8_t> frame) {
  const std::optional<Ethernet> e = parse_ethernet(frame);
  if (!e) return false;
  switch (spec.kind) {
    case Spec::Kind::eth: return matches_eth(spec.eth, frame, *e);
    case Spec::Kind::ipv4: return matches_ipv4(spec.ipv4, frame, *e);
    case Spec::Kind::ipv6: return matches_ipv6(spec.ipv6, frame, *e);
    case Spec::Kind::l4: return matches_l4(spec.l4, frame, *e);
  }
  return false;  // a kind no spec has: match nothing rather than everything
}

bool matches(const FlowRule& rule, std::span<const uint8_t> frame) {
  // The rule's type is not looked at: all_default, mc_default and sniffer rules are chosen by the flow table
  // by what they are, and carry no specs; for a normal rule the specs decide, all of them.
  if (!parse_ethernet(frame)) return false;
  for (const Spec& spec : rule.specs)
    if (!matches(spec, frame)) return false;
  return true;
}

}  // namespace uroce::transport::flow
