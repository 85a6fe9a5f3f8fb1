// classify(): every class and every drop reason from hand-built frames, then totality: every truncation of
// valid frames and random or mutated bytes, each held in a buffer of exactly its size so AddressSanitizer
// sees any read past the end, and cross-checked with the wire parser.
#include <catch2/catch.hpp>

#include <random>

#include "emulator/net/classify.hpp"
#include "net_test_support.hpp"
#include "transport/wire/frame.hpp"

using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;
namespace wire = uroce::wire;

namespace {

const PortAddresses port = test_port();
const PortAddresses joined = joined_port();  // with members for group_a and ff0e::1234

Classification classify_bytes(const Bytes& b, const PortAddresses& p = port) {
  return classify(std::span<const uint8_t>(b), p);
}

DropReason reason_of(const Bytes& b, const PortAddresses& p = port) {
  const Classification c = classify_bytes(b, p);
  REQUIRE(c.kind == FrameClass::drop);
  return c.reason;
}

void refresh_ipv4_checksum(Bytes& f, size_t l3 = 14) {
  f[l3 + 10] = f[l3 + 11] = 0;
  const size_t ihl = size_t(f[l3] & 0x0f) * 4;
  const uint16_t sum = ref_checksum(&f[l3], std::min(ihl, f.size() - l3));
  f[l3 + 10] = uint8_t(sum >> 8);
  f[l3 + 11] = uint8_t(sum);
}

std::vector<std::pair<const char*, Bytes>> valid_frames() {
  return {
      {"RoCEv2 IPv4", roce_v4_frame()},
      {"RoCEv2 IPv4 VLAN", roce_v4_frame(0x2005)},
      {"RoCEv2 IPv6", roce_v6_frame()},
      {"RoCEv2 IPv6 VLAN", roce_v6_frame(0x0fff)},
      {"ARP request", arp_frame({})},
      {"ARP reply VLAN", arp_frame({.op = 2, .target_mac = our_mac}, our_mac, 7)},
      {"ICMP echo", echo_request_frame(56)},
      {"ICMP echo odd VLAN", echo_request_frame(33, 100)},
      {"UDP 53", ipv4_frame({}, udp(53, pattern(20)))},
      {"TCP", ipv4_frame({.protocol = 6}, pattern(40))},
      {"RoCEv2 to an IPv4 group", roce_to_group_v4(group_a)},
      {"RoCEv2 to an IPv6 group", roce_to_group_v6(group6)},
      {"IGMPv2 general query", general_query_frame()},
      {"IGMPv3 group query", igmp_frame(group_a, igmp_message(0x11, 20, group_a, igmp_v3_tail(1, 1)))},
      {"IGMP report", igmp_frame(group_a, igmp_message(0x16, 0, group_a))},
      {"MLDv1 general query", mld_general_query_frame()},
      {"MLDv2 group query", mld_frame(peer_link_local, group6,
                                      mld_message(130, 1000, group6, peer_link_local, group6, mld_v2_tail(1, 1)))},
      {"MLD report", mld_frame(peer_link_local, group6, mld_message(131, 0, group6, peer_link_local, group6))},
      {"PFC", pfc_frame(0x18, {0, 0, 0, 0xffff, 7, 0, 0, 0})},
      {"PAUSE", pause_frame(100)},
  };
}

}  // namespace

TEST_CASE("a port owns its addresses of either family, and a v4-mapped IPv6 address only as IPv4",
          "[classify][addresses]") {
  CHECK(port.owns(wire::IpAddress::from_v4(our_ip)));
  CHECK(port.owns(wire::IpAddress::from_v4(our_ip2)));
  CHECK(port.owns(wire::IpAddress::from_v6_bytes(our_ip6)));
  CHECK_FALSE(port.owns(wire::IpAddress::from_v4(peer_ip)));
  CHECK_FALSE(port.owns(wire::IpAddress::from_v6_bytes(peer_ip6)));
  // ::ffff:10.0.0.1 is how IpAddress holds 10.0.0.1: the same address, so owned, and agreeing with owns_v4.
  uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  CHECK(port.owns(wire::IpAddress::from_v6_bytes(mapped)) == port.owns_v4(our_ip));
  CHECK_FALSE(port.owns_v6(mapped));
}

TEST_CASE("RoCEv2 frames to our addresses are for the transport, with their offsets", "[classify]") {
  SECTION("IPv4, untagged") {
    const Bytes f = roce_v4_frame();
    const Classification c = classify_bytes(f);
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.ip_version == wire::IpVersion::v4);
    CHECK_FALSE(c.eth.has_vlan);
    CHECK(c.eth.src == peer_mac);
    CHECK(c.eth.dst == our_mac);
    CHECK(c.l3_offset == 14);
    CHECK(c.l4_offset == 34);
    CHECK(c.l3_end == f.size());
  }
  SECTION("IPv4 with a VLAN tag") {
    const Classification c = classify_bytes(roce_v4_frame(0x6123), test_port(0x123));
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.eth.has_vlan);
    CHECK(c.eth.vlan_tci == 0x6123);
    CHECK(c.eth.ethertype == 0x0800);
    CHECK(c.l3_offset == 18);
    CHECK(c.l4_offset == 38);
  }
  SECTION("IPv6, tagged and not") {
    Classification c = classify_bytes(roce_v6_frame());
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.ip_version == wire::IpVersion::v6);
    CHECK(c.l4_offset == 54);
    c = classify_bytes(roce_v6_frame(5), test_port(5));
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.l4_offset == 58);
  }
  SECTION("to our second IPv4 address") {
    CHECK(classify_bytes(ipv4_frame({.dst = our_ip2}, udp(4791, roce_body()))).kind == FrameClass::roce);
  }
  SECTION("Ethernet padding and an FCS after the IP packet are not part of it") {
    Bytes f = roce_v4_frame();
    const size_t ip_end = f.size();
    f.resize(f.size() + 10, 0xee);
    const Classification c = classify_bytes(f);
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.l3_end == ip_end);
  }
  SECTION("IPv4 options are skipped") {
    Ipv4 h;
    h.options = {0x01, 0x01, 0x01, 0x00};  // NOP NOP NOP EOL
    const Classification c = classify_bytes(ipv4_frame(h, udp(4791, roce_body())));
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.l4_offset == 38);
  }
}

TEST_CASE("ARP is for the responder when broadcast or sent to our MAC", "[classify]") {
  Classification c = classify_bytes(arp_frame({}));
  REQUIRE(c.kind == FrameClass::arp);
  CHECK(c.arp.operation == 1);
  CHECK(c.arp.sender_mac == peer_mac);
  CHECK(c.arp.sender_ip == peer_ip);
  CHECK(c.arp.target_ip == our_ip);
  CHECK(c.l3_end == 14 + 28);

  c = classify_bytes(arp_frame({.op = 2, .target_mac = our_mac}, our_mac, 9), test_port(9));
  REQUIRE(c.kind == FrameClass::arp);
  CHECK(c.arp.operation == 2);
  CHECK(c.eth.vlan_id() == 9);

  // ARP for another address is still ARP: the responder may learn from it (RFC 826 merge).
  CHECK(classify_bytes(arp_frame({.target_ip = other_ip})).kind == FrameClass::arp);
  // Padded to the 60-byte minimum, as on a real wire.
  Bytes padded = arp_frame({});
  padded.resize(60, 0);
  CHECK(classify_bytes(padded).kind == FrameClass::arp);

  CHECK(reason_of(arp_frame({}, other_mac)) == DropReason::not_for_our_mac);
  Bytes not_ipv4 = arp_frame({});
  not_ipv4[15] = 6;  // htype IEEE 802
  CHECK(reason_of(not_ipv4) == DropReason::unsupported_arp);
  Bytes short_arp = arp_frame({});
  short_arp.pop_back();
  CHECK(reason_of(short_arp) == DropReason::truncated_arp);
}

TEST_CASE("ICMP echo requests to our addresses are answered; other ICMP is not", "[classify]") {
  Classification c = classify_bytes(echo_request_frame(56));
  CHECK(c.kind == FrameClass::icmp_echo_request);
  CHECK(c.l4_offset == 34);
  CHECK(c.l3_end == 14 + 20 + 8 + 56);
  CHECK(classify_bytes(echo_request_frame(0)).kind == FrameClass::icmp_echo_request);
  CHECK(classify_bytes(echo_request_frame(57, 3, our_ip2), test_port(3)).kind == FrameClass::icmp_echo_request);

  CHECK(reason_of(echo_request_frame(56, std::nullopt, other_ip)) == DropReason::not_for_our_ip);
  CHECK(reason_of(ipv4_frame({.protocol = 1}, icmp_echo(0, 1, 1, pattern(8)))) == DropReason::other_icmp_type);
  Bytes code1 = ipv4_frame({.protocol = 1}, icmp_echo(8, 1, 1, pattern(8)));
  code1[35] = 1;
  CHECK(reason_of(code1) == DropReason::other_icmp_type);
  Bytes damaged = echo_request_frame(56);
  damaged.back() ^= 0x01;
  CHECK(reason_of(damaged) == DropReason::bad_icmp_checksum);
  CHECK(reason_of(ipv4_frame({.protocol = 1}, Bytes{8, 0, 0, 0})) == DropReason::truncated_icmp);
}

TEST_CASE("frames for someone else are dropped with the reason why", "[classify]") {
  CHECK(reason_of(ipv4_frame({}, udp(4791, roce_body()), other_mac)) == DropReason::not_for_our_mac);
  const MacAddress multicast{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}};
  CHECK(reason_of(ipv4_frame({}, udp(4791, roce_body()), multicast)) == DropReason::not_for_our_mac);
  CHECK(reason_of(ipv4_frame({.dst = other_ip}, udp(4791, roce_body()))) == DropReason::not_for_our_ip);
  // A broadcast frame carrying an IP packet is judged by its IP destination.
  CHECK(reason_of(ipv4_frame({.dst = 0xffffffff}, udp(67, pattern(8)), MacAddress::broadcast())) ==
        DropReason::not_for_our_ip);
  CHECK(reason_of(ipv6_frame(our_ip6, peer_ip6, 17, udp(4791, roce_body()))) == DropReason::not_for_our_ip);
  // Our IPv4 address written as v4-mapped IPv6 is not an IPv6 address of ours.
  uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  CHECK(reason_of(ipv6_frame(peer_ip6, mapped, 17, udp(4791, roce_body()))) == DropReason::not_for_our_ip);

  CHECK(reason_of(ipv4_frame({.protocol = 6}, pattern(20))) == DropReason::other_ip_protocol);
  // ICMPv6 other than neighbour discovery (test_nd_frames.cpp has the rest).
  CHECK(reason_of(ipv6_frame(peer_ip6, our_ip6, 58, pattern(24))) == DropReason::other_icmpv6_type);
  CHECK(reason_of(ipv6_frame(peer_ip6, our_ip6, 0, pattern(24))) == DropReason::other_ip_protocol);   // hop-by-hop
  CHECK(reason_of(ipv4_frame({}, udp(4790, roce_body()))) == DropReason::other_udp_port);
  CHECK(reason_of(ipv4_frame({.flags_fragment = 0x2000}, udp(4791, roce_body()))) == DropReason::ipv4_fragment);
  CHECK(reason_of(ipv4_frame({.flags_fragment = 0x0010}, udp(4791, roce_body()))) == DropReason::ipv4_fragment);
  CHECK(reason_of(ipv4_frame({.protocol = 1, .flags_fragment = 0x2000}, icmp_echo(8, 1, 1, {}))) ==
        DropReason::ipv4_fragment);

  CHECK(reason_of(eth(our_mac, peer_mac, 0x88cc) ) == DropReason::unsupported_ethertype);  // LLDP
  Bytes qinq = eth(our_mac, peer_mac, 0x8100, 10);
  put16(qinq, 20);
  put16(qinq, 0x0800);
  CHECK(reason_of(qinq, test_port(10)) == DropReason::unsupported_ethertype);
}

TEST_CASE("PFC and PAUSE frames are the port's, on any VLAN; other MAC Control frames are not", "[classify]") {
  const Classification pfc = classify_bytes(pfc_frame(0x08, {0, 0, 0, 0xffff, 0, 0, 0, 0}));
  REQUIRE(pfc.kind == FrameClass::pause);
  CHECK(pfc.mac_control.is_pfc());
  CHECK(pfc.mac_control.enabled == 0x08);
  CHECK(pfc.mac_control.quanta[3] == 0xffff);
  CHECK(classify_bytes(pfc_frame(0x08, {}), test_port(0x0064)).kind == FrameClass::pause);  // the port on VLAN 100
  const Classification pause = classify_bytes(pause_frame(0x2000));
  REQUIRE(pause.kind == FrameClass::pause);
  CHECK(pause.mac_control.pause_quanta == 0x2000);
  CHECK(reason_of(pause_frame(0x2000, 0x0002)) == DropReason::other_mac_control);  // EPON's GATE
  Bytes cut = pfc_frame(0x08, {});
  cut.resize(14 + 19);
  CHECK(reason_of(cut) == DropReason::truncated_mac_control);
  CHECK(is_malformed(DropReason::truncated_mac_control));
  // Tagged, it is no MAC Control frame (that sublayer lies below VLANs); to another address, nobody's.
  CHECK(reason_of(pfc_frame(0x08, {}, 0x0000)) != DropReason::truncated_mac_control);
  CHECK(classify_bytes(pfc_frame(0x08, {}, 0x0000)).kind == FrameClass::drop);
  CHECK(reason_of(pfc_frame(0x08, {}, std::nullopt, other_mac)) == DropReason::not_for_our_mac);
}

TEST_CASE("a port takes the frames of its VLAN only", "[classify]") {
  const auto kind_on = [](const Bytes& f, const PortAddresses& p) { return classify_bytes(f, p).kind; };
  SECTION("on none: untagged and priority-tagged (VID 0) frames, as Linux's parent device") {
    CHECK(kind_on(roce_v4_frame(), port) == FrameClass::roce);
    CHECK(kind_on(roce_v4_frame(0xa000), port) == FrameClass::roce);  // priority 5, VID 0
    CHECK(kind_on(arp_frame({}, MacAddress::broadcast(), 0x6000), port) == FrameClass::arp);
    CHECK(reason_of(roce_v4_frame(0x0064)) == DropReason::other_vlan);
    CHECK(reason_of(roce_v6_frame(0x2fff)) == DropReason::other_vlan);
    CHECK(reason_of(arp_frame({}, MacAddress::broadcast(), 0x0001)) == DropReason::other_vlan);
  }
  SECTION("on VLAN 100: frames tagged 100, whatever their priority") {
    const PortAddresses on_100 = test_port(0x0064);
    CHECK(kind_on(roce_v4_frame(0x0064), on_100) == FrameClass::roce);
    CHECK(kind_on(roce_v4_frame(0xe064), on_100) == FrameClass::roce);  // priority 7
    CHECK(kind_on(roce_v6_frame(0x3064), on_100) == FrameClass::roce);  // priority 1, DEI set
    CHECK(kind_on(arp_frame({}, MacAddress::broadcast(), 0x0064), on_100) == FrameClass::arp);
    CHECK(kind_on(echo_request_frame(8, 0x0064), on_100) == FrameClass::icmp_echo_request);
    CHECK(reason_of(roce_v4_frame(), on_100) == DropReason::other_vlan);
    CHECK(reason_of(roce_v4_frame(0xa000), on_100) == DropReason::other_vlan);
    CHECK(reason_of(roce_v4_frame(0x0065), on_100) == DropReason::other_vlan);
    CHECK(reason_of(arp_frame({}, MacAddress::broadcast()), on_100) == DropReason::other_vlan);
    // Others' traffic stays others' traffic, whatever its VLAN.
    CHECK(reason_of(ipv4_frame({}, udp(4791, roce_body()), other_mac, 0x0064), on_100) == DropReason::not_for_our_mac);
    CHECK(reason_of(ipv4_frame({}, udp(4791, roce_body()), other_mac, 0x0065), on_100) == DropReason::not_for_our_mac);
  }
  SECTION("on VLAN 0 (priority tags): as on none") {
    const PortAddresses on_0 = test_port(0x0000);
    CHECK(kind_on(roce_v4_frame(), on_0) == FrameClass::roce);
    CHECK(kind_on(roce_v4_frame(0x6000), on_0) == FrameClass::roce);
    CHECK(reason_of(roce_v4_frame(0x0003), on_0) == DropReason::other_vlan);
  }
  SECTION("the drop is counted by name") {
    NetCounters counters;
    count(counters, classify_bytes(roce_v4_frame(0x0064)));
    CHECK(counters.dropped(DropReason::other_vlan) == 1);
    CHECK(to_string(DropReason::other_vlan) == "other_vlan");
    CHECK_FALSE(is_malformed(DropReason::other_vlan));
  }
}

TEST_CASE("malformed IP and UDP headers are named precisely", "[classify]") {
  Bytes f = roce_v4_frame();
  SECTION("version nibble") {
    f[14] = 0x65;
    refresh_ipv4_checksum(f);
    CHECK(reason_of(f) == DropReason::bad_ip_version);
    Bytes v6 = roce_v6_frame();
    v6[14] = 0x40;
    CHECK(reason_of(v6) == DropReason::bad_ip_version);
  }
  SECTION("IHL below 5") {
    f[14] = 0x44;
    CHECK(reason_of(f) == DropReason::bad_ip_header_length);
  }
  SECTION("IHL beyond the frame") {
    f.resize(14 + 24);
    f[14] = 0x4f;  // 60-byte header
    CHECK(reason_of(f) == DropReason::truncated_ip);
  }
  SECTION("total length beyond the frame, or inside the header") {
    f[17] += 1;
    refresh_ipv4_checksum(f);
    CHECK(reason_of(f) == DropReason::ip_length_mismatch);
    f[16] = 0;
    f[17] = 19;
    refresh_ipv4_checksum(f);
    CHECK(reason_of(f) == DropReason::ip_length_mismatch);
    Bytes v6 = roce_v6_frame();
    v6[19] += 1;  // payload length
    CHECK(reason_of(v6) == DropReason::ip_length_mismatch);
  }
  SECTION("header checksum") {
    f[24] ^= 0x80;
    CHECK(reason_of(f) == DropReason::bad_ip_checksum);
  }
  SECTION("UDP shorter than its header inside the IP packet") {
    Bytes g = ipv4_frame({}, Bytes{0x12, 0xb7, 0x12, 0xb7});
    CHECK(reason_of(g) == DropReason::truncated_udp);
  }
  SECTION("UDP length disagreeing with IP") {
    f[34 + 5] -= 4;
    CHECK(reason_of(f) == DropReason::udp_length_mismatch);
    Bytes v6 = roce_v6_frame();
    v6[54 + 5] += 1;
    CHECK(reason_of(v6) == DropReason::udp_length_mismatch);
  }
  SECTION("short Ethernet") {
    CHECK(reason_of(Bytes(13, 0)) == DropReason::truncated_ethernet);
    CHECK(reason_of(Bytes{}) == DropReason::truncated_ethernet);
    Bytes tag_cut = eth(our_mac, peer_mac, 0x8100);
    CHECK(reason_of(tag_cut) == DropReason::truncated_ethernet);
    put16(tag_cut, 1);
    CHECK(reason_of(tag_cut) == DropReason::truncated_ethernet);
  }
}

TEST_CASE("every truncation of a valid frame is malformed, never misread", "[classify][total]") {
  const bool with_groups = GENERATE(false, true);
  const PortAddresses& p = with_groups ? joined : port;
  INFO("port with groups: " << with_groups);
  for (const auto& [name, full] : valid_frames()) {
    INFO(name);
    const Classification whole = classify_bytes(full, p);
    for (size_t n = 0; n < full.size(); ++n) {
      INFO("length " << n);
      const Bytes cut(full.begin(), full.begin() + std::ptrdiff_t(n));  // exactly n bytes: ASan sees overreads
      const Classification c = classify_bytes(cut, p);
      if (whole.dropped() && !is_malformed(whole.reason)) {
        // A frame dropped for what it is may also be dropped as malformed once cut short, never accepted.
        CHECK(c.kind == FrameClass::drop);
        CHECK((c.reason == whole.reason || is_malformed(c.reason)));
      } else {
        REQUIRE(c.kind == FrameClass::drop);
        CHECK(is_malformed(c.reason));
      }
    }
  }
}

TEST_CASE("random and mutated bytes: classify is total and agrees with the wire parser", "[classify][total]") {
  const bool with_groups = GENERATE(false, true);
  const PortAddresses& p = with_groups ? joined : port;
  INFO("port with groups: " << with_groups);
  std::mt19937 rng(20240607);
  std::vector<Bytes> seeds;
  for (const auto& [name, f] : valid_frames()) seeds.push_back(f);
  size_t accepted = 0;
  for (int i = 0; i < 30000; ++i) {
    Bytes b;
    if (i % 3 == 0) {
      b.resize(rng() % 128);
      for (auto& x : b) x = uint8_t(rng());
      if (b.size() >= 6 && rng() % 2) std::copy(our_mac.bytes.begin(), our_mac.bytes.end(), b.begin());
    } else {
      b = seeds[rng() % seeds.size()];
      const int flips = 1 + int(rng() % 3);
      for (int k = 0; k < flips; ++k) b[rng() % b.size()] = uint8_t(rng());
      if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
      if (i % 5 == 0 && b.size() > 24 && b[12] == 0x08 && b[13] == 0x00) refresh_ipv4_checksum(b);
    }
    const Classification c = classify_bytes(b, p);
    wire::Frame parsed;
    wire::parse_frame(b, parsed);
    if (c.kind == FrameClass::roce) {
      ++accepted;
      // Everything the classifier vouched for, the parser decoded the same way.
      REQUIRE(parsed.kind == wire::FrameKind::roce);
      REQUIRE(parsed.has(wire::layer_udp));
      REQUIRE(parsed.l4_offset == c.l4_offset);
      REQUIRE(parsed.end_offset == c.l3_end);
    } else if (c.kind == FrameClass::arp) {
      ++accepted;
      REQUIRE(parsed.kind == wire::FrameKind::arp);
      REQUIRE(parsed.ok());
      REQUIRE(parsed.arp.sender_ip == c.arp.sender_ip);
      REQUIRE(parsed.arp.target_mac == c.arp.target_mac);
    } else if (c.kind == FrameClass::icmp_echo_request) {
      ++accepted;
      REQUIRE(parsed.kind == wire::FrameKind::other_ip);
      REQUIRE(parsed.ipv4.protocol == 1);
      REQUIRE(ref_checksum(b.data() + c.l4_offset, c.l3_end - c.l4_offset) == 0);
    } else if (c.kind == FrameClass::igmp) {
      ++accepted;
      REQUIRE(parsed.kind == wire::FrameKind::other_ip);
      REQUIRE(parsed.ipv4.protocol == 2);
      REQUIRE(c.l3_end - c.l4_offset >= 8);
      REQUIRE(b[c.l4_offset] == 0x11);
      REQUIRE(ref_checksum(b.data() + c.l4_offset, c.l3_end - c.l4_offset) == 0);
    } else if (c.kind == FrameClass::mld) {
      ++accepted;
      REQUIRE(parsed.kind == wire::FrameKind::other_ip);
      REQUIRE(parsed.ipv6.next_header == 0);
      REQUIRE(parsed.ipv6.hop_limit == 1);
      REQUIRE(c.l3_end - c.l4_offset >= 24);
      REQUIRE(b[c.l4_offset] == 130);
      const Bytes message(b.begin() + c.l4_offset, b.begin() + c.l3_end);
      REQUIRE(ref_icmpv6_checksum(parsed.ipv6.src.bytes.data(), parsed.ipv6.dst.bytes.data(), message) == 0);
    } else if (c.kind == FrameClass::pause) {
      ++accepted;
      REQUIRE(parsed.kind == wire::FrameKind::mac_control);
      REQUIRE(parsed.ok());
      REQUIRE(parsed.mac_control.opcode == c.mac_control.opcode);
      REQUIRE(parsed.mac_control.quanta == c.mac_control.quanta);
    } else if (c.reason == DropReason::truncated_ethernet) {
      REQUIRE(parsed.error == wire::ParseError::truncated_ethernet);
    }
  }
  CHECK(accepted > 1000);  // the mutations keep enough frames valid to exercise the accepting paths
}

TEST_CASE("count() adds each classified frame to one counter", "[classify][counters]") {
  NetCounters counters;
  count(counters, classify_bytes(roce_v4_frame()));
  count(counters, classify_bytes(roce_v6_frame()));
  count(counters, classify_bytes(arp_frame({})));
  count(counters, classify_bytes(echo_request_frame()));
  count(counters, classify_bytes(ipv4_frame({}, udp(4791, roce_body()), other_mac)));
  count(counters, classify_bytes(Bytes(3, 0)));
  count(counters, classify_bytes(general_query_frame(), joined));
  count(counters, classify_bytes(mld_general_query_frame()));
  CHECK(counters.rx_igmp == 1);
  CHECK(counters.rx_mld == 1);
  CHECK(counters.rx_roce == 2);
  CHECK(counters.rx_arp == 1);
  CHECK(counters.rx_icmp_echo_requests == 1);
  CHECK(counters.dropped(DropReason::not_for_our_mac) == 1);
  CHECK(counters.dropped(DropReason::truncated_ethernet) == 1);
  CHECK(counters.dropped_total() == 2);
}

TEST_CASE("RoCE to a group the port has members for is for the transport; to other groups it is dropped",
          "[classify][multicast]") {
  SECTION("IPv4 group, at its MAC or at ours") {
    const Classification c = classify_bytes(roce_to_group_v4(group_a), joined);
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.ip_version == wire::IpVersion::v4);
    CHECK(c.l4_offset == 34);
    CHECK(classify_bytes(ipv4_frame({.dst = group_a}, udp(4791, roce_body())), joined).kind == FrameClass::roce);
  }
  SECTION("IPv6 group, tagged and not") {
    CHECK(classify_bytes(roce_to_group_v6(group6), joined).kind == FrameClass::roce);
    Bytes tagged = ipv6_frame(peer_ip6, group6, 17, udp(4791, roce_body()), 0x0005);
    const MacAddress m = mcast_mac(group6);
    std::copy(m.bytes.begin(), m.bytes.end(), tagged.begin());
    const Classification c = classify_bytes(tagged, joined_port(5));
    CHECK(c.kind == FrameClass::roce);
    CHECK(c.l4_offset == 58);
  }
  SECTION("groups we have no member for") {
    // A group whose MAC we do not take.
    CHECK(reason_of(roce_to_group_v4(group_b), joined) == DropReason::not_for_our_mac);
    // Sharing a joined group's MAC (RFC 1112 keeps 23 bits): the IP address decides.
    CHECK(reason_of(roce_to_group_v4(group_a_alias), joined) == DropReason::not_for_our_ip);
    Bytes alias6 = roce_to_group_v6(group6_alias);
    CHECK(reason_of(alias6, joined) == DropReason::not_for_our_ip);
    // Without any group, as before multicast: RoCE to a group is not ours.
    CHECK(reason_of(roce_to_group_v4(group_a)) == DropReason::not_for_our_mac);
    CHECK(reason_of(ipv4_frame({.dst = group_a}, udp(4791, roce_body()))) == DropReason::not_for_our_ip);
    CHECK(reason_of(roce_to_group_v6(group6)) == DropReason::not_for_our_mac);
    CHECK(reason_of(ipv6_frame(peer_ip6, group6, 17, udp(4791, roce_body()))) == DropReason::not_for_our_ip);
  }
  SECTION("only RoCE: other traffic to a joined group is not the NIC's") {
    CHECK(reason_of(ipv4_frame({.dst = group_a}, udp(4790, roce_body()), ipv4_group_mac(group_a)), joined) ==
          DropReason::other_udp_port);
    CHECK(reason_of(ipv4_frame({.dst = group_a, .protocol = 1}, icmp_echo(8, 1, 1, pattern(8)),
                               ipv4_group_mac(group_a)),
                    joined) == DropReason::not_for_our_ip);
    CHECK(reason_of(ipv4_frame({.dst = group_a, .protocol = 6}, pattern(20), ipv4_group_mac(group_a)), joined) ==
          DropReason::not_for_our_ip);
    const Bytes ping6 = ipv6_frame(peer_ip6, group6, 58, icmpv6_echo(128, 1, 1, pattern(8), peer_ip6, group6));
    CHECK(reason_of(ping6, joined) == DropReason::not_for_our_ip);
    CHECK(reason_of(ipv4_frame({.dst = all_hosts_ip}, udp(4791, roce_body()), ipv4_group_mac(all_hosts_ip)),
                    joined) == DropReason::not_for_our_ip);
  }
}

TEST_CASE("the MAC filter takes our groups' MACs, and all-hosts while the port has an IPv4 group",
          "[classify][multicast]") {
  const Bytes to_all_hosts = general_query_frame();
  CHECK(classify_bytes(to_all_hosts, joined).kind == FrameClass::igmp);
  CHECK(reason_of(to_all_hosts) == DropReason::not_for_our_mac);
  PortAddresses v6_groups_only = test_port();
  v6_groups_only.groups = {wire::IpAddress::from_v6_bytes(group6)};
  CHECK(reason_of(to_all_hosts, v6_groups_only) == DropReason::not_for_our_mac);
  CHECK(classify_bytes(roce_to_group_v6(group6), v6_groups_only).kind == FrameClass::roce);
  // Neighbour discovery's groups still pass with groups of our own.
  CHECK(classify_bytes(peer_ns(), joined).kind == FrameClass::nd);
}

TEST_CASE("IGMP queries to all-hosts or our groups are for the membership; other IGMP is dropped",
          "[classify][igmp]") {
  SECTION("a general query") {
    const Classification c = classify_bytes(general_query_frame(), joined);
    REQUIRE(c.kind == FrameClass::igmp);
    CHECK(c.igmp.group == 0);
    CHECK(c.igmp.max_response == seconds(10));
    CHECK(c.l4_offset == 14 + 24);
    CHECK(c.l3_end == 14 + 24 + 8);
  }
  SECTION("a group-specific v3 query to the group, tagged") {
    const Classification c =
        classify_bytes(igmp_frame(group_a, igmp_message(0x11, 30, group_a, igmp_v3_tail(0, 0)), 0x0042),
                       joined_port(0x42));
    REQUIRE(c.kind == FrameClass::igmp);
    CHECK(c.igmp.group == group_a);
    CHECK(c.igmp.max_response == seconds(3));
    CHECK(c.eth.vlan_id() == 0x42);
  }
  SECTION("without the Router Alert option, as some queriers send it") {
    Ipv4 h{.dst = all_hosts_ip, .protocol = 2};
    CHECK(classify_bytes(ipv4_frame(h, igmp_message(0x11, 100, 0), ipv4_group_mac(all_hosts_ip)), joined).kind ==
          FrameClass::igmp);
  }
  SECTION("other members' reports, a leave, broken messages") {
    CHECK(reason_of(igmp_frame(group_a, igmp_message(0x16, 0, group_a)), joined) == DropReason::igmp_not_a_query);
    CHECK(reason_of(igmp_frame(group_a, igmp_message(0x11, 100, group_a, {}, true)), joined) ==
          DropReason::bad_igmp_checksum);
    CHECK(reason_of(igmp_frame(all_hosts_ip, Bytes{0x11, 100, 0xee, 0xff}), joined) == DropReason::truncated_igmp);
    CHECK(reason_of(igmp_frame(all_hosts_ip, igmp_message(0x11, 100, 0, Bytes{0, 0})), joined) ==
          DropReason::bad_igmp_message);
    Ipv4 fragment{.dst = all_hosts_ip, .protocol = 2, .flags_fragment = 0x2000};
    CHECK(reason_of(ipv4_frame(fragment, igmp_message(0x11, 100, 0), ipv4_group_mac(all_hosts_ip)), joined) ==
          DropReason::ipv4_fragment);
  }
  SECTION("IGMP not to all-hosts or a group of ours") {
    // A query for a group we are not in, at a MAC we take (broadcast): the IP address decides.
    Ipv4 h{.dst = group_b, .protocol = 2};
    CHECK(reason_of(ipv4_frame(h, igmp_message(0x11, 10, group_b), MacAddress::broadcast()), joined) ==
          DropReason::not_for_our_ip);
    // Leaves go to all-routers, whose MAC we do not take.
    CHECK(reason_of(igmp_frame(all_routers_ip, igmp_message(0x17, 0, group_a)), joined) ==
          DropReason::not_for_our_mac);
    // IGMP to our unicast address: no query comes that way.
    CHECK(reason_of(ipv4_frame({.protocol = 2}, igmp_message(0x11, 100, 0)), joined) ==
          DropReason::other_ip_protocol);
  }
}

TEST_CASE("MLD queries to all-nodes, our groups or our solicited-node groups are for the membership",
          "[classify][mld]") {
  SECTION("a general v1 query to all-nodes, with or without groups of our own") {
    for (const PortAddresses* p : {&port, &joined}) {
      const Classification c = classify_bytes(mld_general_query_frame(), *p);
      REQUIRE(c.kind == FrameClass::mld);
      CHECK(c.mld.group == wire::IpAddress{});
      CHECK(c.mld.max_response == seconds(10));
      CHECK(c.ip_version == wire::IpVersion::v6);
      CHECK(c.l4_offset == 14 + 40 + 8);
      CHECK(c.l3_end == 14 + 40 + 8 + 24);
    }
  }
  SECTION("a group-specific v2 query to one of our groups, tagged") {
    const Bytes f = mld_frame(peer_link_local, group6,
                              mld_message(130, 3000, group6, peer_link_local, group6, mld_v2_tail(0, 0)), 1,
                              router_alert_hop_by_hop(), 0x0042);
    const Classification c = classify_bytes(f, joined_port(0x42));
    REQUIRE(c.kind == FrameClass::mld);
    CHECK(c.mld.group == wire::IpAddress::from_v6_bytes(group6));
    CHECK(c.mld.max_response == seconds(3));
    CHECK(c.eth.vlan_id() == 0x42);
    CHECK(c.l4_offset == 18 + 40 + 8);
    // Not one of our groups: its MAC is not taken.
    CHECK(reason_of(f) == DropReason::not_for_our_mac);
  }
  SECTION("a query for the solicited-node group of one of our addresses") {
    const auto solicited = solicited_ip6(our_ip6);
    const Classification c = classify_bytes(
        mld_frame(peer_link_local, solicited.data(),
                  mld_message(130, 1000, solicited.data(), peer_link_local, solicited.data())));
    REQUIRE(c.kind == FrameClass::mld);
    CHECK(c.mld.group == wire::IpAddress::from_v6_bytes(solicited.data()));
  }
  SECTION("a longer Hop-by-Hop header, its options padded with Pad1 and an unknown skippable option") {
    const Bytes hbh{58, 1, 0, 0, 5, 2, 0, 0, 0x1e, 2, 0xab, 0xcd, 1, 2, 0, 0};
    const Classification c = classify_bytes(
        mld_frame(peer_link_local, all_nodes_ip6, mld_message(130, 1000, nullptr, peer_link_local, all_nodes_ip6),
                  1, hbh));
    REQUIRE(c.kind == FrameClass::mld);
    CHECK(c.l4_offset == 14 + 40 + 16);
  }
}

TEST_CASE("other MLD, broken MLD and anything else behind a Hop-by-Hop header are dropped", "[classify][mld]") {
  const Bytes query = mld_message(130, 1000, nullptr, peer_link_local, all_nodes_ip6);
  SECTION("other listeners' reports and dones") {
    CHECK(reason_of(mld_frame(peer_link_local, group6, mld_message(131, 0, group6, peer_link_local, group6)),
                    joined) == DropReason::mld_not_a_query);
    // A v1 report for a host sharing our solicited-node group, and one from a host without an address yet.
    const auto solicited = solicited_ip6(our_ip6);
    CHECK(reason_of(mld_frame(unspecified_ip6, solicited.data(),
                              mld_message(131, 0, solicited.data(), unspecified_ip6, solicited.data()))) ==
          DropReason::mld_not_a_query);
    // Dones go to all-routers and v2 reports to ff02::16, whose MACs we do not take.
    CHECK(reason_of(mld_frame(peer_link_local, all_routers_ip6,
                              mld_message(132, 0, group6, peer_link_local, all_routers_ip6)),
                    joined) == DropReason::not_for_our_mac);
  }
  SECTION("queries failing RFC 3810 §6.2, or their checksum") {
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, query, 255)) == DropReason::bad_mld_message);
    CHECK(reason_of(mld_frame(peer_ip6, all_nodes_ip6, mld_message(130, 1000, nullptr, peer_ip6, all_nodes_ip6))) ==
          DropReason::bad_mld_message);
    const Bytes no_router_alert{58, 0, 1, 4, 0, 0, 0, 0};  // PadN only
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, query, 1, no_router_alert)) ==
          DropReason::bad_mld_message);
    const Bytes other_router_alert{58, 0, 5, 2, 0, 1, 1, 0};  // value 1: RSVP, not MLD
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, query, 1, other_router_alert)) ==
          DropReason::bad_mld_message);
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6,
                              mld_message(130, 1000, nullptr, peer_link_local, all_nodes_ip6, {}, true))) ==
          DropReason::bad_icmp_checksum);
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, Bytes{130, 0})) == DropReason::truncated_icmp);
  }
  SECTION("a malformed Hop-by-Hop header") {
    // Longer (16 bytes) than the packet's 8-byte payload.
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, {}, 1, Bytes{58, 1, 5, 2, 0, 0, 1, 0})) ==
          DropReason::bad_hop_by_hop);
    // Shorter than 8 bytes.
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, {}, 1, Bytes{58, 0, 1, 0})) ==
          DropReason::bad_hop_by_hop);
    // An option running past the header's end.
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, query, 1, Bytes{58, 0, 5, 2, 0, 0, 1, 1})) ==
          DropReason::bad_hop_by_hop);
    // A Router Alert of the wrong length (RFC 2711: 2 bytes).
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, query, 1, Bytes{58, 0, 5, 4, 0, 0, 0, 0})) ==
          DropReason::bad_hop_by_hop);
    // An unknown option whose type says to discard the packet (high bits 01).
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, query, 1, Bytes{58, 0, 0x5e, 0, 5, 2, 0, 0})) ==
          DropReason::bad_hop_by_hop);
  }
  SECTION("anything but MLD behind a Hop-by-Hop header, as before MLD") {
    CHECK(reason_of(mld_frame(peer_link_local, group6, udp(4791, roce_body()), 1, router_alert_hop_by_hop(17)),
                    joined) == DropReason::other_ip_protocol);
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6,
                              icmpv6_echo(128, 1, 1, pattern(8), peer_link_local, all_nodes_ip6))) ==
          DropReason::other_ip_protocol);
    CHECK(reason_of(mld_frame(peer_link_local, all_nodes_ip6, {}, 1)) == DropReason::other_ip_protocol);
    // To our unicast address: no MLD query comes that way, and RoCE never has extension headers.
    Bytes to_us = router_alert_hop_by_hop();
    to_us.insert(to_us.end(), query.begin(), query.end());
    CHECK(reason_of(ipv6_frame(peer_link_local, our_ip6, 0, to_us)) == DropReason::other_ip_protocol);
    CHECK(reason_of(ipv6_frame(peer_ip6, our_ip6, 0, udp(4791, roce_body()))) == DropReason::other_ip_protocol);
    // To a group we do not listen to, which shares one of ours' MAC.
    CHECK(reason_of(mld_frame(peer_link_local, group6_alias, query), joined) == DropReason::not_for_our_ip);
  }
  SECTION("MLD without a Hop-by-Hop header is no MLD we take") {
    const Bytes bare = ipv6_frame(peer_link_local, all_nodes_ip6, 58, query);
    CHECK(reason_of(bare) == DropReason::other_icmpv6_type);
  }
  SECTION("RoCE and neighbour discovery are unchanged") {
    CHECK(classify_bytes(roce_v6_frame()).kind == FrameClass::roce);
    CHECK(classify_bytes(roce_to_group_v6(group6), joined).kind == FrameClass::roce);
    CHECK(classify_bytes(peer_ns()).kind == FrameClass::nd);
    CHECK(classify_bytes(peer_na()).kind == FrameClass::nd);
  }
}
