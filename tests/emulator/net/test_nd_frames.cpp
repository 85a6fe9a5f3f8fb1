// IPv6 neighbour discovery on the wire: the NS/NA we build against bytes written by hand from RFC 4861 §4.3,
// §4.4 and §4.6.1 (checksums computed independently, and once by hand), address helpers, and classify() on
// hostile ICMPv6: each invalid message is a counted drop with its reason, never a crash.
#include <catch2/catch.hpp>

#include "emulator/net/classify.hpp"
#include "emulator/net/nd_frames.hpp"
#include "net_test_support.hpp"

using namespace uroce;
using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

wire::IpAddress v6(const uint8_t* p) { return wire::IpAddress::from_v6_bytes(p); }

Classification classify_bytes(const Bytes& f, const PortAddresses& port = test_port()) {
  return classify(std::span<const uint8_t>(f), port);
}

DropReason reason_of(const Bytes& f) {
  const Classification c = classify_bytes(f);
  REQUIRE(c.kind == FrameClass::drop);
  return c.reason;
}

}  // namespace

TEST_CASE("address helpers: solicited-node group, its MAC, all-nodes, the EUI-64 link-local address", "[nd]") {
  CHECK(solicited_node_address(v6(our_ip6)).bytes == solicited_ip6(our_ip6));
  const uint8_t a[16] = {0x20, 0x01, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0x78};
  const uint8_t group[16] = {0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0x34, 0x56, 0x78};
  CHECK(solicited_node_address(v6(a)) == v6(group));
  CHECK(multicast_mac(v6(group)) == MacAddress{{0x33, 0x33, 0xff, 0x34, 0x56, 0x78}});
  CHECK(all_nodes_address() == v6(all_nodes_ip6));
  CHECK(multicast_mac(all_nodes_address()) == MacAddress{{0x33, 0x33, 0, 0, 0, 1}});
  // RFC 4291 Appendix A: 00:1b:21:aa:bb:cc -> fe80::21b:21ff:feaa:bbcc (universal/local bit flipped).
  const uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x1b, 0x21, 0xff, 0xfe, 0xaa, 0xbb, 0xcc};
  CHECK(link_local_from_mac(MacAddress{{0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc}}) == v6(ll));
  CHECK(wire::to_string(link_local_from_mac(MacAddress{{0x02, 0, 0, 0, 0, 1}})) == "fe80::ff:fe00:1");
  CHECK(is_multicast(v6(group)));
  CHECK_FALSE(is_multicast(v6(our_ip6)));
  CHECK(is_unspecified(wire::IpAddress{}));
}

TEST_CASE("our Neighbor Solicitation is RFC 4861's, byte for byte", "[nd]") {
  Bytes out(max_nd_frame_size);
  // fd00::1 (MAC 02:00:00:00:00:01) asks for fd00::2.
  const size_t n = write_neighbor_solicitation(out, our_mac, v6(our_ip6), v6(peer_ip6), std::nullopt);
  out.resize(n);
  // Written by hand: Ethernet to 33:33:ff:00:00:02; IPv6 version 6, payload 32, next header 58, hop limit 255,
  // fd00::1 -> ff02::1:ff00:2; ICMPv6 type 135, code 0, checksum, reserved, target fd00::2, option 1 (source
  // link-layer address), length 1, our MAC.
  const Bytes expected = {
      0x33, 0x33, 0xff, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xdd,  //
      0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff,                                      //
      0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,                                //
      0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x00, 0x00, 0x02,                 //
      0x87, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                                      //
      0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,                                //
      0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  REQUIRE(out.size() == expected.size());
  Bytes masked = out;
  masked[14 + 40 + 2] = masked[14 + 40 + 3] = 0;
  CHECK(masked == expected);
  const Bytes icmp(out.begin() + 54, out.end());
  Bytes zeroed = icmp;
  zeroed[2] = zeroed[3] = 0;
  const auto group = solicited_ip6(peer_ip6);
  CHECK(get16(&icmp[2]) == ref_icmpv6_checksum(our_ip6, group.data(), zeroed));
}

TEST_CASE("a hand-computed checksum: a peer's NS and our NA to it", "[nd]") {
  // Checksums worked out separately from RFC 1071 over the RFC 8200 pseudo-header (not with this code).
  const Bytes ns = peer_ns();  // fd00::2 asks ff02::1:ff00:1 for fd00::1
  CHECK(get16(&ns[54 + 2]) == 0x7d97);
  CHECK(icmpv6_checksum(v6(peer_ip6), wire::IpAddress{solicited_ip6(our_ip6)}, &ns[54], ns.size() - 54) == 0);

  const Classification c = classify_bytes(ns);
  REQUIRE(c.kind == FrameClass::nd);
  Bytes out(max_nd_frame_size);
  out.resize(write_neighbor_advertisement(out, c.nd, c.eth.src, our_mac, std::nullopt));
  REQUIRE(out.size() == 14 + 40 + 32);
  const Bytes expected = {
      0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x86, 0xdd,  //
      0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff,                                      //
      0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,                                //
      0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,                                //
      0x88, 0x00, 0x1c, 0x9c, 0x60, 0x00, 0x00, 0x00,                                      // S and O set
      0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,                                //
      0x02, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01};
  CHECK(out == expected);
}

TEST_CASE("parse_nd reads flags, target and the link-layer option; skips unknown options", "[nd]") {
  Nd n;
  n.type = 136;
  n.flags = 0xe0;
  n.target = peer_ip6;
  n.options = {3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const Bytes tlla = lladdr_option(2, peer_mac);
  n.options.insert(n.options.end(), tlla.begin(), tlla.end());
  const Bytes f = nd_frame(n, peer_ip6, our_ip6, our_mac);
  const Classification c = classify_bytes(f);
  REQUIRE(c.kind == FrameClass::nd);
  CHECK_FALSE(c.nd.is_solicitation());
  CHECK(c.nd.router);
  CHECK(c.nd.solicited);
  CHECK(c.nd.override_flag);
  CHECK(c.nd.target == v6(peer_ip6));
  CHECK(c.nd.lladdr == peer_mac);
  CHECK(c.nd.ip_src == v6(peer_ip6));
  CHECK(c.nd.ip_dst == v6(our_ip6));
  // A source link-layer option in an NA is not the target's MAC.
  n.options = lladdr_option(1, other_mac);
  const Classification d = classify_bytes(nd_frame(n, peer_ip6, our_ip6, our_mac));
  REQUIRE(d.kind == FrameClass::nd);
  CHECK_FALSE(d.nd.lladdr.has_value());
}

TEST_CASE("classify: which multicast frames and groups are taken", "[nd][classify]") {
  // Our solicited-node group (33:33:ff:00:00:01) and all-nodes are taken; another node's group is not.
  CHECK(classify_bytes(peer_ns()).kind == FrameClass::nd);
  CHECK(reason_of(peer_ns(peer2_ip6)) == DropReason::not_for_our_mac);
  // Right MAC, wrong group.
  Nd n;
  n.options = lladdr_option(1, peer_mac);
  const auto other_group = solicited_ip6(peer2_ip6);
  const auto our_group = solicited_ip6(our_ip6);
  CHECK(reason_of(nd_frame(n, peer_ip6, other_group.data(), mcast_mac(our_group.data()))) ==
        DropReason::not_for_our_ip);
  // A unicast NS to our address (a probe) and an NA to all-nodes (unsolicited) are taken.
  CHECK(classify_bytes(nd_frame(n, peer_ip6, our_ip6, our_mac)).kind == FrameClass::nd);
  Nd na;
  na.type = 136;
  na.flags = 0x20;
  na.target = peer_ip6;
  na.options = lladdr_option(2, peer_mac);
  CHECK(classify_bytes(nd_frame(na, peer_ip6, all_nodes_ip6, mcast_mac(all_nodes_ip6))).kind == FrameClass::nd);
  // RoCE to a multicast group is not ours; an echo request goes to the echo responder (test_icmp.cpp);
  // other ICMPv6 (an echo reply) is a counted drop.
  Bytes roce = ipv6_frame(peer_ip6, our_group.data(), 17, udp(4791, roce_body()));
  std::copy_n(mcast_mac(our_group.data()).bytes.begin(), 6, roce.begin());
  CHECK(reason_of(roce) == DropReason::not_for_our_ip);
  Nd echo;
  echo.type = 128;
  CHECK(classify_bytes(nd_frame(echo, peer_ip6, our_ip6, our_mac, 64)).kind == FrameClass::icmp_echo_request);
  echo.type = 129;
  CHECK(reason_of(nd_frame(echo, peer_ip6, our_ip6, our_mac, 64)) == DropReason::other_icmpv6_type);
  // Without a v6 address, no group and no multicast MAC is ours.
  PortAddresses v4_only = test_port();
  v4_only.ips.resize(2);
  const Classification c = classify_bytes(peer_ns(), v4_only);
  CHECK((c.kind == FrameClass::drop && c.reason == DropReason::not_for_our_mac));
}

TEST_CASE("hostile ICMPv6: every RFC 4861 §7.1 violation is a counted drop with its reason", "[nd][classify]") {
  const auto group = solicited_ip6(our_ip6);
  const MacAddress group_mac = mcast_mac(group.data());
  Nd ns;
  ns.options = lladdr_option(1, peer_mac);

  SECTION("hop limit other than 255 (a router forwarded it)") {
    CHECK(reason_of(nd_frame(ns, peer_ip6, group.data(), group_mac, 254)) == DropReason::bad_nd_hop_limit);
    CHECK(reason_of(nd_frame(ns, peer_ip6, group.data(), group_mac, 64)) == DropReason::bad_nd_hop_limit);
  }
  SECTION("bad checksum") {
    ns.bad_checksum = true;
    CHECK(reason_of(nd_frame(ns, peer_ip6, group.data(), group_mac)) == DropReason::bad_icmp_checksum);
  }
  SECTION("a checksum right for other addresses (the pseudo-header counts)") {
    Bytes f = nd_frame(ns, peer_ip6, group.data(), group_mac);
    f[14 + 8 + 15] = 0x09;  // source fd00::9 instead of fd00::2
    CHECK(reason_of(f) == DropReason::bad_icmp_checksum);
  }
  SECTION("code not 0") {
    ns.code = 1;
    CHECK(reason_of(nd_frame(ns, peer_ip6, group.data(), group_mac)) == DropReason::bad_nd_message);
  }
  SECTION("multicast target") {
    ns.target = all_nodes_ip6;
    const Bytes f = nd_frame(ns, peer_ip6, our_ip6, our_mac);
    CHECK(reason_of(f) == DropReason::bad_nd_message);
  }
  SECTION("an option of length 0 (would loop forever) or running past the end") {
    ns.options = {1, 0, 2, 0, 0, 0, 0, 2};
    CHECK(reason_of(nd_frame(ns, peer_ip6, group.data(), group_mac)) == DropReason::bad_nd_message);
    ns.options = {1, 2, 2, 0, 0, 0, 0, 2};
    CHECK(reason_of(nd_frame(ns, peer_ip6, group.data(), group_mac)) == DropReason::bad_nd_message);
    ns.options = {1};
    CHECK(reason_of(nd_frame(ns, peer_ip6, group.data(), group_mac)) == DropReason::bad_nd_message);
  }
  SECTION("shorter than 24 bytes") {
    Bytes f = nd_frame(ns, peer_ip6, group.data(), group_mac);
    Bytes icmp(f.begin() + 54, f.begin() + 54 + 20);
    icmp[2] = icmp[3] = 0;
    const uint16_t sum = ref_icmpv6_checksum(peer_ip6, group.data(), icmp);
    icmp[2] = uint8_t(sum >> 8);
    icmp[3] = uint8_t(sum);
    f.resize(54);
    f.insert(f.end(), icmp.begin(), icmp.end());
    f[18] = 0;
    f[19] = 20;
    CHECK(reason_of(f) == DropReason::truncated_icmp);
  }
  SECTION("IPv6 payload length beyond the frame, and a frame cut inside the IPv6 header") {
    Bytes f = nd_frame(ns, peer_ip6, group.data(), group_mac);
    f.resize(f.size() - 4);
    CHECK(reason_of(f) == DropReason::ip_length_mismatch);
    f.resize(14 + 30);
    CHECK(reason_of(f) == DropReason::truncated_ip);
  }
  SECTION("a payload of 0..3 bytes") {
    for (unsigned len = 0; len < 4; ++len) {
      Bytes f = nd_frame(ns, peer_ip6, group.data(), group_mac);
      f.resize(54 + len);
      f[18] = 0;
      f[19] = uint8_t(len);
      CHECK(reason_of(f) == DropReason::truncated_icmp);
    }
  }
  SECTION("NS from :: not to a solicited-node group, or with a source link-layer option") {
    Nd dad;
    CHECK(reason_of(nd_frame(dad, unspecified_ip6, our_ip6, our_mac)) == DropReason::bad_nd_message);
    dad.options = lladdr_option(1, peer_mac);
    CHECK(reason_of(nd_frame(dad, unspecified_ip6, group.data(), group_mac)) == DropReason::bad_nd_message);
    dad.options.clear();
    CHECK(classify_bytes(nd_frame(dad, unspecified_ip6, group.data(), group_mac)).kind == FrameClass::nd);
  }
  SECTION("NA to a multicast group with the Solicited flag") {
    Nd na;
    na.type = 136;
    na.flags = 0x60;
    na.target = peer_ip6;
    CHECK(reason_of(nd_frame(na, peer_ip6, all_nodes_ip6, mcast_mac(all_nodes_ip6))) ==
          DropReason::bad_nd_message);
  }
  SECTION("a multicast or IPv4-mapped source address, an IPv4-mapped target (found by the fuzzer)") {
    CHECK(reason_of(nd_frame(ns, all_nodes_ip6, group.data(), group_mac)) == DropReason::bad_nd_message);
    const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0};
    CHECK(reason_of(nd_frame(ns, mapped, group.data(), group_mac)) == DropReason::bad_nd_message);
    const uint8_t mapped_target[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    ns.target = mapped_target;
    CHECK(reason_of(nd_frame(ns, peer_ip6, our_ip6, our_mac)) == DropReason::bad_nd_message);
  }
}

TEST_CASE("hostile ICMPv6: every truncation of a valid NS is dropped without reading past it", "[nd][classify]") {
  const Bytes f = peer_ns();
  NetCounters counters;
  for (size_t n = 0; n < f.size(); ++n) {
    // A copy of exactly n bytes, so that AddressSanitizer sees any read past it.
    const Bytes cut(f.begin(), f.begin() + long(n));
    const Classification c = classify(std::span<const uint8_t>(cut), test_port());
    count(counters, c);
    CHECK(c.kind == FrameClass::drop);
  }
  CHECK(counters.dropped_total() == f.size());
  CHECK(counters.rx_nd == 0);
}
