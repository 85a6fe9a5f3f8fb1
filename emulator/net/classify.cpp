#include "emulator/net/classify.hpp"

#include <cstring>

#include "emulator/net/hop_by_hop.hpp"
#include "emulator/net/multicast.hpp"
#include "transport/wire/bytes.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::emulator::net {

namespace {

constexpr uint8_t icmp_type_echo_request = 8;
constexpr uint8_t icmpv6_type_echo_request = 128;
constexpr unsigned icmp_header_size = 8;

Classification& drop(Classification& c, DropReason r) {
  c.kind = FrameClass::drop;
  c.reason = r;
  return c;
}

Classification& accept(Classification& c, FrameClass k) {
  c.kind = k;
  return c;
}

// [l4, end) is the UDP datagram, already known to be addressed to us.
Classification& classify_udp(Classification& c, const uint8_t* b, size_t l4, size_t end) {
  c.l4_offset = uint32_t(l4);
  if (end - l4 < wire::udp_header_size) return drop(c, DropReason::truncated_udp);
  // Equality, as wire::parse_frame demands: a datagram shorter than its IP packet would leave bytes that
  // belong to neither, and the ICRC would not cover what the sender meant.
  if (wire::load_be16(b + l4 + 4) != end - l4) return drop(c, DropReason::udp_length_mismatch);
  if (wire::load_be16(b + l4 + 2) != wire::roce_v2_udp_port) return drop(c, DropReason::other_udp_port);
  return accept(c, FrameClass::roce);
}

// [l4, end) is the ICMPv4 message, already known to be addressed to us.
Classification& classify_icmp(Classification& c, const uint8_t* b, size_t l4, size_t end) {
  c.l4_offset = uint32_t(l4);
  if (end - l4 < icmp_header_size) return drop(c, DropReason::truncated_icmp);
  if (b[l4] != icmp_type_echo_request || b[l4 + 1] != 0) return drop(c, DropReason::other_icmp_type);
  // Checked here rather than when replying: the reply's checksum is recomputed, so a damaged request
  // would otherwise be answered with a valid-looking copy of the damage.
  if (wire::internet_checksum(b + l4, end - l4) != 0) return drop(c, DropReason::bad_icmp_checksum);
  return accept(c, FrameClass::icmp_echo_request);
}

// [l4, end) is an IGMP message to all-hosts or one of our groups.
Classification& classify_igmp(Classification& c, const uint8_t* b, size_t l4, size_t end) {
  c.l4_offset = uint32_t(l4);
  if (const auto reason = parse_igmp_query(b + l4, end - l4, c.igmp)) return drop(c, *reason);
  return accept(c, FrameClass::igmp);
}

Classification& classify_ipv4(Classification& c, std::span<const uint8_t> f, size_t l3,
                              const PortAddresses& port) {
  const uint8_t* b = f.data();
  const size_t avail = f.size() - l3;
  c.ip_version = wire::IpVersion::v4;
  if (avail < wire::ipv4_min_header_size) return drop(c, DropReason::truncated_ip);
  const uint8_t* p = b + l3;
  if (p[0] >> 4 != 4) return drop(c, DropReason::bad_ip_version);
  const size_t header_length = size_t(p[0] & 0x0f) * 4;
  if (header_length < wire::ipv4_min_header_size) return drop(c, DropReason::bad_ip_header_length);
  if (avail < header_length) return drop(c, DropReason::truncated_ip);
  const size_t total_length = wire::load_be16(p + 2);
  if (total_length < header_length || total_length > avail) return drop(c, DropReason::ip_length_mismatch);
  if (wire::internet_checksum(p, header_length) != 0) return drop(c, DropReason::bad_ip_checksum);
  c.l3_end = uint32_t(l3 + total_length);

  const uint32_t dst = wire::load_be32(p + 16);
  const uint8_t protocol = p[9];
  const bool unicast = port.owns_v4(dst);
  if (protocol == ip_proto_igmp) {
    // Queries come to all-hosts (general) or to the group they ask about; reports of our groups' other
    // members come to the group too, and are dropped once parsed.
    if (dst != igmp_all_hosts && !port.has_group(wire::IpAddress::from_v4(dst))) {
      return drop(c, unicast ? DropReason::other_ip_protocol : DropReason::not_for_our_ip);
    }
  } else if (!unicast && !(protocol == wire::ip_proto_udp && port.has_group(wire::IpAddress::from_v4(dst)))) {
    // Of group traffic, only RoCE to a group we have members for is ours: a ping of a group would have
    // every member answer, and nothing needs the NIC in that chorus.
    return drop(c, DropReason::not_for_our_ip);
  }
  if (protocol != wire::ip_proto_udp && protocol != wire::ip_proto_icmp && protocol != ip_proto_igmp) {
    return drop(c, DropReason::other_ip_protocol);
  }
  const uint16_t fragment = wire::load_be16(p + 6);
  if ((fragment & 0x3fff) != 0) return drop(c, DropReason::ipv4_fragment);  // MF or an offset
  const size_t l4 = l3 + header_length;
  if (protocol == wire::ip_proto_udp) return classify_udp(c, b, l4, c.l3_end);
  if (protocol == ip_proto_igmp) return classify_igmp(c, b, l4, c.l3_end);
  return classify_icmp(c, b, l4, c.l3_end);
}

// The IPv6 groups neighbour discovery listens to: all-nodes (ff02::1) and the solicited-node group of each
// of our addresses.
bool is_nd_group(const uint8_t* a, const PortAddresses& port) {
  static const uint8_t all_nodes[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};
  if (std::memcmp(a, all_nodes, 16) == 0) return true;
  static const uint8_t solicited_prefix[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff};
  if (std::memcmp(a, solicited_prefix, 13) != 0) return false;
  for (const wire::IpAddress& ours : port.ips) {
    if (!ours.is_v4() && std::memcmp(ours.bytes.data() + 13, a + 13, 3) == 0) return true;
  }
  return false;
}

// Multicast MACs of those groups (33:33 + the group's last four bytes).
bool is_nd_multicast_mac(const wire::MacAddress& m, const PortAddresses& port) {
  if (m.bytes[0] != 0x33 || m.bytes[1] != 0x33) return false;
  if (m.bytes[2] == 0 && m.bytes[3] == 0 && m.bytes[4] == 0 && m.bytes[5] == 1) return true;  // all-nodes
  if (m.bytes[2] != 0xff) return false;
  for (const wire::IpAddress& ours : port.ips) {
    if (!ours.is_v4() && std::memcmp(ours.bytes.data() + 13, m.bytes.data() + 3, 3) == 0) return true;
  }
  return false;
}

// The only multicast frames taken: those neighbour discovery needs, the MACs of the groups the port has
// members for, and IPv4 all-hosts (IGMP's general queries) while it has an IPv4 group.
bool is_our_multicast_mac(const wire::MacAddress& m, const PortAddresses& port) {
  if ((m.bytes[0] & 1) == 0) return false;  // the I/G bit: any multicast MAC has it
  if (is_nd_multicast_mac(m, port)) return true;
  for (const wire::IpAddress& g : port.groups) {
    if (multicast_mac_of(g) == m) return true;
  }
  return m == ipv4_multicast_mac(igmp_all_hosts) && port.has_ipv4_group();
}

// An ICMPv6 echo request (RFC 4443 §4.1) in the IPv6 packet `ip`. Answered only when sent to one of our
// addresses: a ping of all-nodes (ff02::1) would have every host answer, and nothing needs the NIC in that
// chorus. The checksum covers the pseudo-header, so a request damaged anywhere is dropped, not echoed.
Classification& classify_icmpv6_echo(Classification& c, const uint8_t* ip, const uint8_t* icmp, size_t length,
                                     bool unicast) {
  if (!unicast) return drop(c, DropReason::not_for_our_ip);
  if (icmp[1] != 0) return drop(c, DropReason::other_icmpv6_type);
  if (icmpv6_checksum(wire::IpAddress::from_v6_bytes(ip + 8), wire::IpAddress::from_v6_bytes(ip + 24), icmp,
                      length) != 0) {
    return drop(c, DropReason::bad_icmp_checksum);
  }
  return accept(c, FrameClass::icmp_echo_request);
}

// An IPv6 packet whose first extension header is Hop-by-Hop. The only such packet that is ours is an MLD
// message (RFC 2710 §3 puts its Router Alert there) to a group we listen to (`listened_group`): all-nodes,
// one of our solicited-node groups or one of the port's groups. Anything else behind the header stays dropped,
// as every packet with an extension header was before MLD.
Classification& classify_hop_by_hop(Classification& c, const uint8_t* b, size_t l3, size_t payload_length,
                                    bool listened_group) {
  // To our unicast address: no MLD query comes that way.
  if (!listened_group) return drop(c, DropReason::other_ip_protocol);
  const uint8_t* ip = b + l3;
  const size_t hop_by_hop = l3 + wire::ipv6_header_size;
  HopByHop h;
  if (const auto reason = parse_hop_by_hop(b + hop_by_hop, payload_length, h)) return drop(c, *reason);
  const size_t l4 = hop_by_hop + h.length;
  const size_t length = payload_length - h.length;
  if (h.next_header != ip_proto_icmpv6 || length == 0 || !is_mld_type(b[l4])) {
    return drop(c, DropReason::other_ip_protocol);
  }
  c.l4_offset = uint32_t(l4);
  const auto reason = parse_mld_query(wire::IpAddress::from_v6_bytes(ip + 8), wire::IpAddress::from_v6_bytes(ip + 24),
                                      ip[7], h.mld_router_alert, b + l4, length, c.mld);
  if (reason) return drop(c, *reason);
  return accept(c, FrameClass::mld);
}

Classification& classify_ipv6(Classification& c, std::span<const uint8_t> f, size_t l3,
                              const PortAddresses& port) {
  const uint8_t* b = f.data();
  const size_t avail = f.size() - l3;
  c.ip_version = wire::IpVersion::v6;
  if (avail < wire::ipv6_header_size) return drop(c, DropReason::truncated_ip);
  const uint8_t* p = b + l3;
  if (p[0] >> 4 != 6) return drop(c, DropReason::bad_ip_version);
  const size_t payload_length = wire::load_be16(p + 4);
  if (payload_length > avail - wire::ipv6_header_size) return drop(c, DropReason::ip_length_mismatch);
  c.l3_end = uint32_t(l3 + wire::ipv6_header_size + payload_length);
  const bool unicast = port.owns_v6(p + 24);
  const bool nd_group = !unicast && is_nd_group(p + 24, port);
  const bool joined_group = !unicast && port.has_group(wire::IpAddress::from_v6_bytes(p + 24));
  if (!unicast && !nd_group && !joined_group) return drop(c, DropReason::not_for_our_ip);
  // RoCEv2 never uses IPv6 extension headers, nor does neighbour discovery as we send and answer it; MLD
  // always does (Hop-by-Hop, for its Router Alert).
  if (p[6] == ipv6_next_header_hop_by_hop) {
    return classify_hop_by_hop(c, b, l3, payload_length, nd_group || joined_group);
  }
  const size_t l4 = l3 + wire::ipv6_header_size;
  if (p[6] == ip_proto_icmpv6) {
    if (!unicast && !nd_group) return drop(c, DropReason::not_for_our_ip);  // no ND or ping to an app group
    c.l4_offset = uint32_t(l4);
    if (payload_length >= icmp_header_size && b[l4] == icmpv6_type_echo_request) {
      return classify_icmpv6_echo(c, p, b + l4, payload_length, unicast);
    }
    if (payload_length >= 1 && is_router_discovery_type(b[l4])) {
      const auto reason = parse_router_advertisement(wire::IpAddress::from_v6_bytes(p + 8),
                                                     wire::IpAddress::from_v6_bytes(p + 24), p[7], b + l4,
                                                     payload_length, c.ra);
      if (reason) return drop(c, *reason);
      return accept(c, FrameClass::router_advertisement);
    }
    const auto reason = parse_nd(wire::IpAddress::from_v6_bytes(p + 8), wire::IpAddress::from_v6_bytes(p + 24),
                                 p[7], b + l4, payload_length, c.nd);
    if (reason) return drop(c, *reason);
    return accept(c, FrameClass::nd);
  }
  if (p[6] != wire::ip_proto_udp) return drop(c, DropReason::other_ip_protocol);
  if (!unicast && !joined_group) return drop(c, DropReason::not_for_our_ip);  // ND's groups carry no RoCE
  return classify_udp(c, b, l4, c.l3_end);
}

Classification& classify_arp(Classification& c, std::span<const uint8_t> f, size_t l3) {
  if (f.size() - l3 < wire::arp_ipv4_size) return drop(c, DropReason::truncated_arp);
  if (!wire::read_arp(f.data() + l3, c.arp)) return drop(c, DropReason::unsupported_arp);
  c.l3_end = uint32_t(l3 + wire::arp_ipv4_size);
  return accept(c, FrameClass::arp);
}

Classification& classify_mac_control(Classification& c, std::span<const uint8_t> f, size_t l3) {
  if (!wire::read_mac_control(f.data() + l3, f.size() - l3, c.mac_control)) {
    return drop(c, DropReason::truncated_mac_control);
  }
  if (!c.mac_control.is_pause() && !c.mac_control.is_pfc()) return drop(c, DropReason::other_mac_control);
  return accept(c, FrameClass::pause);
}

}  // namespace

Classification classify(std::span<const uint8_t> f, const PortAddresses& port) {
  Classification c;
  const uint8_t* b = f.data();
  if (f.size() < wire::ethernet_header_size) return drop(c, DropReason::truncated_ethernet);
  wire::EthernetHeader& e = c.eth;
  std::memcpy(e.dst.bytes.data(), b, 6);
  std::memcpy(e.src.bytes.data(), b + 6, 6);
  e.ethertype = wire::load_be16(b + 12);
  size_t l3 = wire::ethernet_header_size;
  if (e.ethertype == wire::ethertype_vlan) {
    if (f.size() < wire::ethernet_header_size + wire::vlan_tag_size) {
      e.ethertype = 0;
      return drop(c, DropReason::truncated_ethernet);
    }
    e.has_vlan = true;
    e.vlan_tci = wire::load_be16(b + 14);
    e.ethertype = wire::load_be16(b + 16);
    l3 += wire::vlan_tag_size;
  }
  c.l3_offset = uint32_t(l3);
  // Link-level flow control first: its group address is nobody's, and it is untagged (the MAC Control
  // sublayer lies below VLANs), so it belongs to the port whatever VLAN the port is on.
  if (e.dst == wire::mac_control_group && e.ethertype == wire::ethertype_mac_control && !e.has_vlan) {
    return classify_mac_control(c, f, l3);
  }

  // The MAC check comes first: on a promiscuous port (af_packet on a bridge) most frames are other
  // stations' traffic, and this rejects them after one compare. Broadcast passes for ARP requests; a
  // broadcast IP packet is then judged by its destination address, as Linux does. Multicast passes only
  // for the groups neighbour discovery needs (all-nodes, our solicited-node groups), the port's own groups
  // and, with an IPv4 group, all-hosts; since several groups share a MAC, the IP destination decides again.
  if (e.dst != port.mac && e.dst != wire::MacAddress::broadcast() && !is_our_multicast_mac(e.dst, port)) {
    return drop(c, DropReason::not_for_our_mac);
  }
  // A port on VLAN v takes the frames tagged v; a port on none, or on 0 (priority tags only), takes
  // untagged and priority-tagged (VID 0) frames: as Linux, where a VLAN device gets its VLAN's frames and
  // the parent device the rest, VID 0 counting as untagged.
  const uint16_t vid = e.has_vlan ? e.vlan_id() : 0;
  if (vid != (port.vlan_tci ? *port.vlan_tci & 0x0fff : 0)) return drop(c, DropReason::other_vlan);
  switch (e.ethertype) {
    case wire::ethertype_arp: return classify_arp(c, f, l3);
    case wire::ethertype_ipv4: return classify_ipv4(c, f, l3, port);
    case wire::ethertype_ipv6: return classify_ipv6(c, f, l3, port);
    // A second tag (QinQ) included: a host's port is no provider bridge, and a service tag (802.1ad) on a
    // frame to it means a switch port that should have removed it.
    default: return drop(c, DropReason::unsupported_ethertype);
  }
}

void count(NetCounters& counters, const Classification& c) {
  switch (c.kind) {
    case FrameClass::roce: ++counters.rx_roce; break;
    case FrameClass::arp: ++counters.rx_arp; break;
    case FrameClass::icmp_echo_request: ++counters.rx_icmp_echo_requests; break;
    case FrameClass::nd: ++counters.rx_nd; break;
    case FrameClass::igmp: ++counters.rx_igmp; break;
    case FrameClass::mld: ++counters.rx_mld; break;
    case FrameClass::router_advertisement: ++counters.rx_router_advertisements; break;
    case FrameClass::pause: ++counters.rx_pause; break;
    case FrameClass::drop: ++counters.dropped(c.reason); break;
  }
}

}  // namespace uroce::emulator::net
