// Frames for the emulator/net tests, written byte by byte from the RFC layouts (RFC 826, 791, 768, 792,
// 8200, 4861, 1112, 2236, 3376, 2710, 3810, 2711) and never with the code under test, so that a test
// comparing the two is a real check.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/neighbour_table.hpp"
#include "emulator/net/time.hpp"
#include "emulator/net/port_addresses.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net::test {

using Bytes = std::vector<uint8_t>;
using wire::MacAddress;

inline const MacAddress our_mac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
inline const MacAddress peer_mac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};
inline const MacAddress other_mac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x99}};
inline constexpr uint32_t our_ip = 0x0a000001;   // 10.0.0.1
inline constexpr uint32_t our_ip2 = 0xc0a80101;  // 192.168.1.1
inline constexpr uint32_t peer_ip = 0x0a000002;  // 10.0.0.2
inline constexpr uint32_t other_ip = 0x0a000063; // 10.0.0.99
inline const uint8_t our_ip6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
inline const uint8_t peer_ip6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};

inline PortAddresses test_port(std::optional<uint16_t> vlan = std::nullopt) {
  PortAddresses p;
  p.mac = our_mac;
  p.ips = {wire::IpAddress::from_v4(our_ip), wire::IpAddress::from_v4(our_ip2),
           wire::IpAddress::from_v6_bytes(our_ip6)};
  p.vlan_tci = vlan;
  return p;
}

inline void put8(Bytes& b, unsigned v) { b.push_back(uint8_t(v)); }
inline void put16(Bytes& b, unsigned v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}
inline void put32(Bytes& b, uint32_t v) {
  put16(b, v >> 16);
  put16(b, v & 0xffff);
}
inline void put_mac(Bytes& b, const MacAddress& m) { b.insert(b.end(), m.bytes.begin(), m.bytes.end()); }
inline uint16_t get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline uint32_t get32(const uint8_t* p) { return uint32_t(get16(p)) << 16 | get16(p + 2); }
inline MacAddress get_mac(const uint8_t* p) {
  MacAddress m;
  for (int i = 0; i < 6; ++i) m.bytes[i] = p[i];
  return m;
}

// RFC 1071, the slow obvious way (16-bit words, end-around carry at every step).
inline uint16_t ref_checksum(const uint8_t* p, size_t n) {
  uint32_t sum = 0;
  for (size_t i = 0; i < n; i += 2) {
    sum += uint32_t(p[i]) << 8 | (i + 1 < n ? p[i + 1] : 0);
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return uint16_t(~sum);
}

inline Bytes eth(const MacAddress& dst, const MacAddress& src, uint16_t ethertype,
                 std::optional<uint16_t> vlan = std::nullopt) {
  Bytes b;
  put_mac(b, dst);
  put_mac(b, src);
  if (vlan) {
    put16(b, 0x8100);
    put16(b, *vlan);
  }
  put16(b, ethertype);
  return b;
}

// PFC (opcode 0x0101: class-enable vector, eight times) or PAUSE (0x0001: one time) to the MAC Control
// group; without the padding to 60 bytes a real one has, so that any shorter frame is a cut one.
inline Bytes pfc_frame(uint8_t enabled, const std::array<uint16_t, 8>& quanta, std::optional<uint16_t> vlan = {},
                       const MacAddress& dst = MacAddress{{0x01, 0x80, 0xc2, 0x00, 0x00, 0x01}}) {
  Bytes b = eth(dst, peer_mac, 0x8808, vlan);
  put16(b, 0x0101);
  put16(b, enabled);
  for (uint16_t q : quanta) put16(b, q);
  return b;
}
inline Bytes pause_frame(uint16_t quanta, uint16_t opcode = 0x0001) {
  Bytes b = eth(MacAddress{{0x01, 0x80, 0xc2, 0x00, 0x00, 0x01}}, peer_mac, 0x8808);
  put16(b, opcode);
  put16(b, quanta);
  return b;
}

struct Arp {
  uint16_t op = 1;
  MacAddress sender_mac = peer_mac;
  uint32_t sender_ip = peer_ip;
  MacAddress target_mac{};
  uint32_t target_ip = our_ip;
};

inline Bytes arp_frame(const Arp& a, const MacAddress& eth_dst = MacAddress::broadcast(),
                       std::optional<uint16_t> vlan = std::nullopt, const MacAddress& eth_src = peer_mac) {
  Bytes b = eth(eth_dst, eth_src, 0x0806, vlan);
  put16(b, 1);       // Ethernet
  put16(b, 0x0800);  // IPv4
  put8(b, 6);
  put8(b, 4);
  put16(b, a.op);
  put_mac(b, a.sender_mac);
  put32(b, a.sender_ip);
  put_mac(b, a.target_mac);
  put32(b, a.target_ip);
  return b;
}

struct Ipv4 {
  uint32_t src = peer_ip;
  uint32_t dst = our_ip;
  uint8_t protocol = 17;
  uint8_t tos = 0;
  uint16_t flags_fragment = 0x4000;  // DF
  uint16_t identification = 0x1234;
  Bytes options{};  // a multiple of 4
};

// Ethernet + IPv4 (checksum right) around `payload`.
inline Bytes ipv4_frame(const Ipv4& h, const Bytes& payload, const MacAddress& eth_dst = our_mac,
                        std::optional<uint16_t> vlan = std::nullopt) {
  Bytes b = eth(eth_dst, peer_mac, 0x0800, vlan);
  const size_t l3 = b.size();
  const size_t ihl = 20 + h.options.size();
  put8(b, 0x40 | unsigned(ihl / 4));
  put8(b, h.tos);
  put16(b, unsigned(ihl + payload.size()));
  put16(b, h.identification);
  put16(b, h.flags_fragment);
  put8(b, 64);
  put8(b, h.protocol);
  put16(b, 0);
  put32(b, h.src);
  put32(b, h.dst);
  b.insert(b.end(), h.options.begin(), h.options.end());
  const uint16_t sum = ref_checksum(&b[l3], ihl);
  b[l3 + 10] = uint8_t(sum >> 8);
  b[l3 + 11] = uint8_t(sum);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

inline Bytes ipv6_frame(const uint8_t* src, const uint8_t* dst, uint8_t next_header, const Bytes& payload,
                        std::optional<uint16_t> vlan = std::nullopt) {
  Bytes b = eth(our_mac, peer_mac, 0x86dd, vlan);
  put32(b, 0x60000000u);
  put16(b, unsigned(payload.size()));
  put8(b, next_header);
  put8(b, 64);
  b.insert(b.end(), src, src + 16);
  b.insert(b.end(), dst, dst + 16);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

inline Bytes udp(uint16_t dst_port, const Bytes& payload, uint16_t src_port = 0xc001) {
  Bytes b;
  put16(b, src_port);
  put16(b, dst_port);
  put16(b, unsigned(8 + payload.size()));
  put16(b, 0);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// Stands for what follows the UDP header of a RoCEv2 packet; the classifier does not look past UDP.
inline Bytes roce_body() {
  Bytes b(12 + 4, 0);
  b[0] = 0x04;  // RC SEND_ONLY
  return b;
}

inline Bytes roce_v4_frame(std::optional<uint16_t> vlan = std::nullopt) {
  return ipv4_frame({}, udp(4791, roce_body()), our_mac, vlan);
}
inline Bytes roce_v6_frame(std::optional<uint16_t> vlan = std::nullopt) {
  return ipv6_frame(peer_ip6, our_ip6, 17, udp(4791, roce_body()), vlan);
}

// An ICMP(v6) echo message with its checksum field zero.
inline Bytes echo_message(uint8_t type, uint16_t id, uint16_t seq, const Bytes& data) {
  Bytes b;
  put8(b, type);
  put8(b, 0);
  put16(b, 0);
  put16(b, id);
  put16(b, seq);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

inline void set_checksum(Bytes& icmp, uint16_t sum) {
  icmp[2] = uint8_t(sum >> 8);
  icmp[3] = uint8_t(sum);
}

inline Bytes icmp_echo(uint8_t type, uint16_t id, uint16_t seq, const Bytes& data) {
  Bytes b = echo_message(type, id, seq, data);
  set_checksum(b, ref_checksum(b.data(), b.size()));
  return b;
}

inline Bytes pattern(size_t n, unsigned seed = 1) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(i * 31 + seed * 17 + (i >> 8));
  return b;
}

inline Bytes echo_request_frame(size_t data_len = 56, std::optional<uint16_t> vlan = std::nullopt,
                                uint32_t dst = our_ip) {
  Ipv4 h;
  h.protocol = 1;
  h.dst = dst;
  return ipv4_frame(h, icmp_echo(8, 0x4242, 7, pattern(data_len)), our_mac, vlan);
}

// --- IPv6 neighbour discovery (RFC 4861 §4.3, §4.4, §4.6.1; the checksum over RFC 8200 §8.1's pseudo-header)

inline const uint8_t peer2_ip6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
inline const uint8_t unspecified_ip6[16] = {};
inline const uint8_t all_nodes_ip6[16] = {0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
// ff02::1:ffXX:XXXX of an address.
inline std::array<uint8_t, 16> solicited_ip6(const uint8_t* a) {
  return {0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, a[13], a[14], a[15]};
}
inline MacAddress mcast_mac(const uint8_t* group) {
  return MacAddress{{0x33, 0x33, group[12], group[13], group[14], group[15]}};
}

inline uint16_t ref_icmpv6_checksum(const uint8_t* src, const uint8_t* dst, const Bytes& icmp) {
  Bytes b(src, src + 16);
  b.insert(b.end(), dst, dst + 16);
  put32(b, uint32_t(icmp.size()));
  put32(b, 58);
  b.insert(b.end(), icmp.begin(), icmp.end());
  return ref_checksum(b.data(), b.size());
}

struct Nd {
  uint8_t type = 135;  // NS; 136 NA
  uint8_t code = 0;
  uint8_t flags = 0;   // NA: 0x80 R, 0x40 S, 0x20 O
  const uint8_t* target = our_ip6;
  Bytes options;       // as they go on the wire
  bool bad_checksum = false;
};

// An option: type, length in 8-byte units, the MAC.
inline Bytes lladdr_option(uint8_t type, const MacAddress& m) {
  Bytes b{type, 1};
  put_mac(b, m);
  return b;
}

// The ICMPv6 message, checksum right for (src, dst) unless bad_checksum.
inline Bytes nd_message(const Nd& n, const uint8_t* src, const uint8_t* dst) {
  Bytes b;
  put8(b, n.type);
  put8(b, n.code);
  put16(b, 0);
  put8(b, n.flags);
  put8(b, 0);
  put16(b, 0);
  b.insert(b.end(), n.target, n.target + 16);
  b.insert(b.end(), n.options.begin(), n.options.end());
  uint16_t sum = ref_icmpv6_checksum(src, dst, b);
  if (n.bad_checksum) sum ^= 0x0100;
  b[2] = uint8_t(sum >> 8);
  b[3] = uint8_t(sum);
  return b;
}

// An ICMPv6 echo request or reply (RFC 4443 §4), its checksum right for (src, dst).
inline Bytes icmpv6_echo(uint8_t type, uint16_t id, uint16_t seq, const Bytes& data, const uint8_t* src,
                         const uint8_t* dst) {
  Bytes b = echo_message(type, id, seq, data);
  set_checksum(b, ref_icmpv6_checksum(src, dst, b));
  return b;
}

// `ping -6` to `dst`: Ethernet + IPv6 (traffic class `tc`, flow label 0x12345) + an echo request.
inline Bytes echo6_request_frame(size_t data_len = 56, std::optional<uint16_t> vlan = std::nullopt,
                                 const uint8_t* dst = our_ip6, uint8_t tc = 0) {
  const Bytes icmp = icmpv6_echo(128, 0x6666, 3, pattern(data_len), peer_ip6, dst);
  Bytes b = ipv6_frame(peer_ip6, dst, 58, icmp, vlan);
  const size_t l3 = vlan ? 18 : 14;
  b[l3] = uint8_t(0x60 | tc >> 4);
  b[l3 + 1] = uint8_t((tc & 0x0f) << 4 | 0x01);
  b[l3 + 2] = 0x23;
  b[l3 + 3] = 0x45;
  return b;
}

// Ethernet + IPv6 (next header 58, the given hop limit) + an ICMPv6 message as it is.
inline Bytes icmpv6_frame(const Bytes& icmp, const uint8_t* src, const uint8_t* dst, const MacAddress& eth_dst,
                          uint8_t hop_limit = 255, const MacAddress& eth_src = peer_mac,
                          std::optional<uint16_t> vlan = std::nullopt) {
  Bytes b = eth(eth_dst, eth_src, 0x86dd, vlan);
  put32(b, 0x60000000u);
  put16(b, unsigned(icmp.size()));
  put8(b, 58);
  put8(b, hop_limit);
  b.insert(b.end(), src, src + 16);
  b.insert(b.end(), dst, dst + 16);
  b.insert(b.end(), icmp.begin(), icmp.end());
  return b;
}

// Ethernet + IPv6 (next header 58, the given hop limit) + the message.
inline Bytes nd_frame(const Nd& n, const uint8_t* src, const uint8_t* dst, const MacAddress& eth_dst,
                      uint8_t hop_limit = 255, const MacAddress& eth_src = peer_mac,
                      std::optional<uint16_t> vlan = std::nullopt) {
  return icmpv6_frame(nd_message(n, src, dst), src, dst, eth_dst, hop_limit, eth_src, vlan);
}

// A peer's NS for `target`, multicast to its solicited-node group, with a source link-layer option.
inline Bytes peer_ns(const uint8_t* target = our_ip6, const uint8_t* src = peer_ip6,
                     const MacAddress& lladdr = peer_mac) {
  Nd n;
  n.target = target;
  n.options = lladdr_option(1, lladdr);
  const auto group = solicited_ip6(target);
  return nd_frame(n, src, group.data(), mcast_mac(group.data()));
}

// A peer's solicited NA for its own address `target`, unicast to us.
inline Bytes peer_na(const uint8_t* target = peer_ip6, const MacAddress& lladdr = peer_mac, uint8_t flags = 0x60) {
  Nd n;
  n.type = 136;
  n.flags = flags;
  n.target = target;
  n.options = lladdr_option(2, lladdr);
  return nd_frame(n, target, our_ip6, our_mac);
}

// --- Multicast groups and IGMP (RFC 1112 §6.4, RFC 2236 §2, RFC 3376 §4.1)

inline constexpr uint32_t group_a = 0xe0010203;        // 224.1.2.3
inline constexpr uint32_t group_b = 0xef000005;        // 239.0.0.5
inline constexpr uint32_t group_a_alias = 0xef810203;  // 239.129.2.3: the same MAC as group_a
inline constexpr uint32_t all_hosts_ip = 0xe0000001;   // 224.0.0.1
inline constexpr uint32_t all_routers_ip = 0xe0000002; // 224.0.0.2
inline const uint8_t group6[16] = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34};  // ff0e::1234
inline const uint8_t group6_alias[16] = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0x12, 0x34};

inline MacAddress ipv4_group_mac(uint32_t g) {
  return MacAddress{{0x01, 0x00, 0x5e, uint8_t((g >> 16) & 0x7f), uint8_t(g >> 8), uint8_t(g)}};
}

// `p` moved onto the VLAN `frame` is tagged with (as it is for an untagged or priority-tagged frame): what
// a test of a tagged frame's handling classifies it with, since classify() takes a frame of VLAN v only on
// a port on VLAN v.
inline PortAddresses on_vlan_of(const Bytes& frame, PortAddresses p = test_port()) {
  if (frame.size() >= 16 && frame[12] == 0x81 && frame[13] == 0x00) {
    const uint16_t vid = uint16_t((frame[14] << 8 | frame[15]) & 0x0fff);
    if (vid != 0) p.vlan_tci = vid;
  }
  return p;
}

// test_port() with members for group_a and ff0e::1234.
inline PortAddresses joined_port(std::optional<uint16_t> vlan = std::nullopt) {
  PortAddresses p = test_port(vlan);
  p.groups = {wire::IpAddress::from_v4(group_a), wire::IpAddress::from_v6_bytes(group6)};
  return p;
}

// An IGMP message: type, max resp code, checksum (right unless bad_checksum), group, then `tail` (the rest
// of a v3 query: resv/S/QRV, QQIC, number of sources, the sources).
inline Bytes igmp_message(uint8_t type, uint8_t max_resp, uint32_t group, const Bytes& tail = {},
                          bool bad_checksum = false) {
  Bytes b;
  put8(b, type);
  put8(b, max_resp);
  put16(b, 0);
  put32(b, group);
  b.insert(b.end(), tail.begin(), tail.end());
  uint16_t sum = ref_checksum(b.data(), b.size());
  if (bad_checksum) sum ^= 0x0001;
  set_checksum(b, sum);
  return b;
}

// The fields of a v3 query after the group (RFC 3376 §4.1): QRV 2, QQIC 125, `sources` addresses, of which
// only `present` are actually there.
inline Bytes igmp_v3_tail(uint16_t sources, uint16_t present) {
  Bytes b{0x02, 125};
  put16(b, sources);
  for (uint16_t i = 0; i < present; ++i) put32(b, 0x0a000010u + i);
  return b;
}

// Ethernet + IPv4 (protocol 2, Router Alert, from the peer) + `message`, to `dst` at its multicast MAC.
inline Bytes igmp_frame(uint32_t dst, const Bytes& message, std::optional<uint16_t> vlan = std::nullopt) {
  Ipv4 h;
  h.dst = dst;
  h.protocol = 2;
  h.options = {0x94, 0x04, 0x00, 0x00};
  return ipv4_frame(h, message, ipv4_group_mac(dst), vlan);
}

// A router's general IGMPv2 query (max resp 10 s) to all-hosts.
inline Bytes general_query_frame() { return igmp_frame(all_hosts_ip, igmp_message(0x11, 100, 0)); }

// RoCE to an IPv4 group, at the group's MAC; to an IPv6 group at its 33:33 MAC.
inline Bytes roce_to_group_v4(uint32_t group) {
  return ipv4_frame({.dst = group}, udp(4791, roce_body()), ipv4_group_mac(group));
}
inline Bytes roce_to_group_v6(const uint8_t* group) {
  Bytes f = ipv6_frame(peer_ip6, group, 17, udp(4791, roce_body()));
  const MacAddress m = mcast_mac(group);
  std::copy(m.bytes.begin(), m.bytes.end(), f.begin());
  return f;
}

// --- MLD (RFC 2710 §3, RFC 3810 §5.1, RFC 2711's Router Alert in RFC 8200 §4.3's Hop-by-Hop header)

inline const uint8_t peer_link_local[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};  // fe80::2
inline const uint8_t our_link_local[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};   // fe80::1
inline const uint8_t all_routers_ip6[16] = {0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};     // ff02::2

// An MLD message: type, code 0, checksum (right for src -> dst unless bad_checksum), max response code,
// reserved, `group` (:: when null), then `tail` (the rest of a v2 query).
inline Bytes mld_message(uint8_t type, uint16_t max_resp, const uint8_t* group, const uint8_t* src,
                         const uint8_t* dst, const Bytes& tail = {}, bool bad_checksum = false) {
  Bytes b{type, 0, 0, 0, uint8_t(max_resp >> 8), uint8_t(max_resp), 0, 0};
  if (group != nullptr) b.insert(b.end(), group, group + 16);
  b.resize(24);  // a null group: ::
  b.insert(b.end(), tail.begin(), tail.end());
  set_checksum(b, uint16_t(ref_icmpv6_checksum(src, dst, b) ^ (bad_checksum ? 1 : 0)));
  return b;
}

// The fields of a v2 query after the group (RFC 3810 §5.1): S/QRV 2, QQIC 125, `sources` addresses, of
// which only `present` are there.
inline Bytes mld_v2_tail(uint16_t sources, uint16_t present) {
  Bytes b{0x02, 125};
  put16(b, sources);
  for (uint16_t i = 0; i < present; ++i) b.insert(b.end(), peer_ip6, peer_ip6 + 16);
  return b;
}

// A Hop-by-Hop Options header: next header, length 0, Router Alert (value 0, MLD), PadN of no data.
inline Bytes router_alert_hop_by_hop(uint8_t next_header = 58) { return {next_header, 0, 5, 2, 0, 0, 1, 0}; }

// Ethernet + IPv6 (next header 0, Hop-by-Hop `hop_by_hop`, then `message`) from `src` to `dst` at dst's 33:33
// MAC, with `hop_limit`.
inline Bytes mld_frame(const uint8_t* src, const uint8_t* dst, const Bytes& message, uint8_t hop_limit = 1,
                       const Bytes& hop_by_hop = router_alert_hop_by_hop(),
                       std::optional<uint16_t> vlan = std::nullopt) {
  Bytes payload = hop_by_hop;
  payload.insert(payload.end(), message.begin(), message.end());
  Bytes f = ipv6_frame(src, dst, 0, payload, vlan);
  const MacAddress m = mcast_mac(dst);
  std::copy(m.bytes.begin(), m.bytes.end(), f.begin());
  f[(vlan ? 18 : 14) + 7] = hop_limit;
  return f;
}

// A router's general MLDv1 query (max response 10 s) to all-nodes, from its link-local address.
inline Bytes mld_general_query_frame() {
  return mld_frame(peer_link_local, all_nodes_ip6, mld_message(130, 10000, nullptr, peer_link_local, all_nodes_ip6));
}

// The Ethernet header of a frame we sent, read back: its MACs, its tag if any, and where its L3 header starts.
struct SentEthernet {
  MacAddress eth_dst, eth_src;
  std::optional<uint16_t> vlan;
  size_t l3 = 14;
};

inline SentEthernet read_ethernet(const Bytes& f) {
  SentEthernet e;
  e.eth_dst = get_mac(f.data());
  e.eth_src = get_mac(f.data() + 6);
  if (get16(f.data() + 12) == 0x8100) {
    e.vlan = get16(f.data() + 14);
    e.l3 = 18;
  }
  return e;
}

// A multicast membership under test (IgmpMembership or MldMembership) with its port and counters, and what
// its poll() produced, each frame read back by `read_sent`.
template <class MembershipT, class Output, class Sent, Sent (*read_sent)(const Bytes&)>
struct MembershipFixture {
  PortAddresses port;
  NetCounters counters;
  MembershipT membership;
  Output out;

  MembershipFixture(PortAddresses p, uint64_t seed) : port(std::move(p)), membership(port, counters, seed) {}

  std::vector<Sent> poll(Nanos now) {
    out.clear();
    membership.poll(now, out);
    std::vector<Sent> sent;
    for (const auto& f : out.frames) sent.push_back(read_sent(f));
    return sent;
  }

  // Polls at every deadline up to `until`, returning when each frame left.
  std::vector<std::pair<Nanos, Sent>> run_until(Nanos until) {
    std::vector<std::pair<Nanos, Sent>> sent;
    while (membership.next_deadline() <= until) {
      const Nanos t = membership.next_deadline();
      for (const Sent& s : poll(t)) sent.emplace_back(t, s);
    }
    return sent;
  }
};

// A neighbour cache under test (ArpCache or NdCache) with its port, counters and what the last poll()
// produced.
template <class CacheT, class Output, class Config>
struct CacheFixture {
  PortAddresses port;
  NetCounters counters;
  CacheT cache;
  Output out;

  explicit CacheFixture(Config config = {}, PortAddresses p = test_port())
      : port(std::move(p)), cache(port, counters, config) {}

  // poll() at `now`, returning what it produced (out is cleared first).
  Output& poll(Nanos now) {
    out.clear();
    cache.poll(now, out);
    return out;
  }
};

// A frame the engine would park: destination MAC unknown (zeros), a recognisable body.
inline Bytes parkable_frame(uint8_t tag, size_t size = 64) {
  Bytes b = pattern(size, tag);
  std::fill(b.begin(), b.begin() + 6, 0);
  return b;
}

// What a parked frame counts against the cache's byte limits.
inline size_t held(const Bytes& frame) { return NeighbourTable<uint32_t>::held_bytes(frame); }

}  // namespace uroce::emulator::net::test
