#include "emulator/net/nd_frames.hpp"

#include <algorithm>
#include <cstring>

#include "emulator/net/ethernet_out.hpp"
#include "transport/wire/bytes.hpp"

namespace uroce::emulator::net {

namespace {

constexpr uint8_t na_flag_router = 0x80;
constexpr uint8_t na_flag_solicited = 0x40;
constexpr uint8_t na_flag_override = 0x20;

// RFC 1071's one's-complement sum, accumulated over pieces that each start on an even offset.
uint32_t add_words(uint32_t sum, const uint8_t* p, size_t n) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += uint32_t(p[i]) << 8 | p[i + 1];
  if (n & 1) sum += uint32_t(p[n - 1]) << 8;
  return sum;
}

uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

}  // namespace

bool is_unicast_mac(const wire::MacAddress& mac) { return (mac.bytes[0] & 1) == 0 && mac != wire::MacAddress{}; }

bool is_unspecified(const wire::IpAddress& a) { return a == wire::IpAddress{}; }

bool is_multicast(const wire::IpAddress& a) { return a.bytes[0] == 0xff; }

bool is_link_local(const wire::IpAddress& a) { return a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }

wire::IpAddress solicited_node_address(const wire::IpAddress& a) {
  wire::IpAddress g;
  g.bytes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, a.bytes[13], a.bytes[14], a.bytes[15]};
  return g;
}

wire::IpAddress all_nodes_address() {
  wire::IpAddress g;
  g.bytes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
  return g;
}

wire::MacAddress multicast_mac(const wire::IpAddress& group) {
  return {{0x33, 0x33, group.bytes[12], group.bytes[13], group.bytes[14], group.bytes[15]}};
}

wire::IpAddress link_local_from_mac(const wire::MacAddress& mac) {
  wire::IpAddress a;
  a.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, uint8_t(mac.bytes[0] ^ 0x02), mac.bytes[1], mac.bytes[2], 0xff, 0xfe,
             mac.bytes[3], mac.bytes[4], mac.bytes[5]};
  return a;
}

uint16_t icmpv6_checksum(const wire::IpAddress& src, const wire::IpAddress& dst, const uint8_t* message,
                         size_t length) {
  uint32_t sum = 0;
  sum = add_words(sum, src.bytes.data(), 16);
  sum = add_words(sum, dst.bytes.data(), 16);
  sum += uint32_t(length >> 16) + uint32_t(length & 0xffff);  // upper-layer packet length, 32 bits
  sum += ip_proto_icmpv6;                                      // three zero bytes, next header
  // Fold as we go: a jumbo message could otherwise overflow 32 bits.
  for (size_t done = 0; done < length; done += 0x8000) {
    const size_t n = std::min<size_t>(0x8000, length - done);
    sum = add_words(sum, message + done, n);
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return fold(sum);
}

std::optional<DropReason> parse_nd(const wire::IpAddress& src, const wire::IpAddress& dst, uint8_t hop_limit,
                                   const uint8_t* icmp, size_t length, NdMessage& out) {
  if (length < 4) return DropReason::truncated_icmp;
  const uint8_t type = icmp[0];
  if (type != icmpv6_neighbor_solicitation && type != icmpv6_neighbor_advertisement) {
    return DropReason::other_icmpv6_type;
  }
  // §7.1.1 / §7.1.2, in the order given there.
  if (hop_limit != nd_hop_limit) return DropReason::bad_nd_hop_limit;
  // No packet comes from a group, nor from an IPv4-mapped address (RFC 4291 §2.7, §2.5.5.2: never on the wire).
  if (is_multicast(src) || src.is_v4()) return DropReason::bad_nd_message;
  if (icmpv6_checksum(src, dst, icmp, length) != 0) return DropReason::bad_icmp_checksum;
  if (icmp[1] != 0) return DropReason::bad_nd_message;
  if (length < nd_message_min_size) return DropReason::truncated_icmp;
  NdMessage m;
  m.type = type;
  m.ip_src = src;
  m.ip_dst = dst;
  m.target = wire::IpAddress::from_v6_bytes(icmp + 8);
  if (is_multicast(m.target) || m.target.is_v4()) return DropReason::bad_nd_message;
  if (type == icmpv6_neighbor_advertisement) {
    m.router = icmp[4] & na_flag_router;
    m.solicited = icmp[4] & na_flag_solicited;
    m.override_flag = icmp[4] & na_flag_override;
    if (is_multicast(dst) && m.solicited) return DropReason::bad_nd_message;
  } else if (is_unspecified(src) && !(dst == solicited_node_address(m.target))) {
    return DropReason::bad_nd_message;
  }
  const uint8_t wanted = type == icmpv6_neighbor_solicitation ? nd_option_source_lladdr : nd_option_target_lladdr;
  for (size_t at = nd_message_min_size; at < length;) {
    if (length - at < 2) return DropReason::bad_nd_message;
    const size_t option_length = size_t(icmp[at + 1]) * 8;
    if (option_length == 0 || option_length > length - at) return DropReason::bad_nd_message;
    // A link-layer option for Ethernet is 8 bytes (RFC 2464 §6); a longer one carries no MAC we know how
    // to read and is skipped, as unknown options are (RFC 4861 §4.6).
    if (icmp[at] == wanted && option_length == nd_lladdr_option_size && !m.lladdr) {
      wire::MacAddress mac;
      std::memcpy(mac.bytes.data(), icmp + at + 2, 6);
      m.lladdr = mac;
    }
    at += option_length;
  }
  if (type == icmpv6_neighbor_solicitation && is_unspecified(src) && m.lladdr) return DropReason::bad_nd_message;
  out = m;
  return std::nullopt;
}

size_t write_nd_frame(std::span<uint8_t> out, const wire::MacAddress& eth_dst, const wire::MacAddress& eth_src,
                      std::optional<uint16_t> vlan_tci, const NdMessage& m) {
  const size_t icmp_length = nd_message_min_size + (m.lladdr ? nd_lladdr_option_size : 0);
  const size_t l3 = wire::ethernet_header_size + (vlan_tci ? wire::vlan_tag_size : 0);
  const size_t size = l3 + wire::ipv6_header_size + icmp_length;
  if (out.size() < size) return 0;
  write_ethernet_out(out.data(), eth_dst, eth_src, vlan_tci, wire::ethertype_ipv6);

  wire::Ipv6Header ip;
  ip.payload_length = uint16_t(icmp_length);
  ip.next_header = ip_proto_icmpv6;
  ip.hop_limit = nd_hop_limit;
  ip.src = m.ip_src;
  ip.dst = m.ip_dst;
  wire::write_ipv6(out.data() + l3, ip);

  uint8_t* icmp = out.data() + l3 + wire::ipv6_header_size;
  std::memset(icmp, 0, icmp_length);
  icmp[0] = m.type;
  if (m.type == icmpv6_neighbor_advertisement) {
    icmp[4] = uint8_t((m.router ? na_flag_router : 0) | (m.solicited ? na_flag_solicited : 0) |
                      (m.override_flag ? na_flag_override : 0));
  }
  std::memcpy(icmp + 8, m.target.bytes.data(), 16);
  if (m.lladdr) {
    icmp[24] = m.type == icmpv6_neighbor_solicitation ? nd_option_source_lladdr : nd_option_target_lladdr;
    icmp[25] = 1;
    std::memcpy(icmp + 26, m.lladdr->bytes.data(), 6);
  }
  wire::store_be16(icmp + 2, icmpv6_checksum(m.ip_src, m.ip_dst, icmp, icmp_length));
  return size;
}

size_t write_neighbor_solicitation(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src,
                                   const wire::IpAddress& target, std::optional<uint16_t> vlan_tci,
                                   std::optional<wire::MacAddress> unicast_mac) {
  NdMessage m;
  m.type = icmpv6_neighbor_solicitation;
  m.target = target;
  m.ip_src = src;
  m.ip_dst = unicast_mac ? target : solicited_node_address(target);
  // From :: an NS must carry no source link-layer option (§7.1.1); we never send from :: in practice.
  if (!is_unspecified(src)) m.lladdr = our_mac;
  return write_nd_frame(out, unicast_mac ? *unicast_mac : multicast_mac(m.ip_dst), our_mac, vlan_tci, m);
}

size_t write_neighbor_advertisement(std::span<uint8_t> out, const NdMessage& ns, const wire::MacAddress& ns_eth_src,
                                    const wire::MacAddress& our_mac, std::optional<uint16_t> vlan_tci) {
  NdMessage m;
  m.type = icmpv6_neighbor_advertisement;
  m.target = ns.target;
  m.ip_src = ns.target;
  m.override_flag = true;
  m.lladdr = our_mac;
  wire::MacAddress eth_dst;
  if (is_unspecified(ns.ip_src)) {
    m.ip_dst = all_nodes_address();
    m.solicited = false;
    eth_dst = multicast_mac(m.ip_dst);
  } else {
    m.ip_dst = ns.ip_src;
    m.solicited = true;
    eth_dst = ns.lladdr.value_or(ns_eth_src);
  }
  return write_nd_frame(out, eth_dst, our_mac, vlan_tci, m);
}

}  // namespace uroce::emulator::net
