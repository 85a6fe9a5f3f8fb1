// ICMP echo replies, v4 and v6: every field checked against the request, the checksums verified
// independently, the size bound, and the reply read back by the classifier from the requester's side.
#include <catch2/catch.hpp>

#include "emulator/net/icmp.hpp"
#include "net_test_support.hpp"

using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

struct Echo {
  PortAddresses port = test_port();
  NetCounters counters;
  IcmpEchoResponder responder{port.mac, counters};
  Bytes out = Bytes(9200, 0xcc);

  Bytes reply_to(const Bytes& request) {
    const Classification c = classify(request, on_vlan_of(request, port));
    REQUIRE(c.kind == FrameClass::icmp_echo_request);
    const size_t n = responder.on_frame(request, c, out);
    return Bytes(out.begin(), out.begin() + std::ptrdiff_t(n));
  }
};

// The reply, field by field, against the request's meaning (not its bytes' positions).
void check_reply(const Bytes& r, const Bytes& request_icmp, std::optional<uint16_t> vlan, uint8_t tos,
                 uint32_t our_address, uint16_t identification) {
  const size_t l3 = vlan ? 18 : 14;
  REQUIRE(r.size() == l3 + 20 + request_icmp.size());
  CHECK(get_mac(&r[0]) == peer_mac);
  CHECK(get_mac(&r[6]) == our_mac);
  if (vlan) {
    CHECK(get16(&r[12]) == 0x8100);
    CHECK(get16(&r[14]) == *vlan);
  }
  CHECK(get16(&r[l3 - 2]) == 0x0800);
  const uint8_t* ip = &r[l3];
  CHECK(ip[0] == 0x45);
  CHECK(ip[1] == tos);
  CHECK(get16(ip + 2) == 20 + request_icmp.size());
  CHECK(get16(ip + 4) == identification);
  CHECK(get16(ip + 6) == 0);  // no DF, not a fragment
  CHECK(ip[8] == 64);
  CHECK(ip[9] == 1);
  CHECK(ref_checksum(ip, 20) == 0);
  CHECK(get32(ip + 12) == our_address);
  CHECK(get32(ip + 16) == peer_ip);
  const uint8_t* icmp = ip + 20;
  CHECK(icmp[0] == 0);  // echo reply
  CHECK(icmp[1] == 0);
  CHECK(ref_checksum(icmp, request_icmp.size()) == 0);
  CHECK(get16(icmp + 4) == get16(&request_icmp[4]));  // identifier
  CHECK(get16(icmp + 6) == get16(&request_icmp[6]));  // sequence
  CHECK(std::equal(request_icmp.begin() + 8, request_icmp.end(), icmp + 8));
}

}  // namespace

TEST_CASE("an echo request gets the reply ping expects", "[icmp]") {
  Echo e;
  const Bytes icmp = icmp_echo(8, 0x4242, 7, pattern(56));
  Ipv4 h{.protocol = 1, .tos = 0xb8};
  check_reply(e.reply_to(ipv4_frame(h, icmp)), icmp, std::nullopt, 0xb8, our_ip, 0);
  CHECK(e.counters.icmp_echo_replied == 1);

  SECTION("to the second address, tagged, odd length: identification moves on") {
    const Bytes odd = icmp_echo(8, 1, 65535, pattern(33, 5));
    const Bytes r = e.reply_to(ipv4_frame({.dst = our_ip2, .protocol = 1}, odd, our_mac, 0x4007));
    check_reply(r, odd, 0x4007, 0, our_ip2, 1);
  }
  SECTION("IP options and Ethernet padding of the request are not echoed") {
    const Bytes small = icmp_echo(8, 9, 9, {});
    Bytes f = ipv4_frame({.protocol = 1, .options = {0x94, 0x04, 0x00, 0x00}}, small);  // router alert
    f.resize(60, 0);
    check_reply(e.reply_to(f), small, std::nullopt, 0, our_ip, 1);
  }
  SECTION("the reply is an echo reply to its receiver: well-formed, checksums right") {
    const Bytes r = e.reply_to(echo_request_frame(100));
    PortAddresses requester;
    requester.mac = peer_mac;
    requester.ips = {uroce::wire::IpAddress::from_v4(peer_ip)};
    const Classification c = classify(r, requester);
    CHECK(c.kind == FrameClass::drop);
    CHECK(c.reason == DropReason::other_icmp_type);  // reached only past every header check
  }
}

TEST_CASE("echo replies are bounded in size", "[icmp]") {
  Echo e;
  // 1472 bytes of data: a full 1500-byte IP packet, the largest a standard MTU carries, in 1514 bytes.
  CHECK(e.reply_to(echo_request_frame(1472)).size() == 1514);
  CHECK(e.reply_to(echo_request_frame(1472, 1)).size() == 1518);
  CHECK(e.reply_to(echo_request_frame(1473, 1)).empty());
  CHECK(e.reply_to(echo_request_frame(8000)).empty());
  CHECK(e.counters.icmp_echo_too_large == 2);
  CHECK(e.counters.icmp_echo_replied == 2);

  NetCounters counters;
  IcmpEchoResponder jumbo(our_mac, counters, 9018);
  const Bytes big = echo_request_frame(8000);
  const Classification c = classify(big, e.port);
  Bytes out(9018);
  CHECK(jumbo.on_frame(big, c, out) == big.size());
  std::array<uint8_t, 100> tiny{};
  CHECK(jumbo.on_frame(big, c, tiny) == 0);  // the buffer bounds it too
  CHECK(write_icmp_echo_reply(big, c, our_mac, 0, tiny) == 0);
}

TEST_CASE("an IPv6 echo request gets the reply ping -6 expects", "[icmp][ipv6]") {
  Echo e;
  for (const std::optional<uint16_t> vlan : {std::optional<uint16_t>{}, std::optional<uint16_t>{0x4007}}) {
    const Bytes request = echo6_request_frame(57, vlan, our_ip6, 0xb8);
    const size_t l3 = vlan ? 18 : 14;
    const Bytes request_icmp(request.begin() + std::ptrdiff_t(l3 + 40), request.end());
    const Bytes r = e.reply_to(request);
    REQUIRE(r.size() == request.size());
    CHECK(get_mac(&r[0]) == peer_mac);
    CHECK(get_mac(&r[6]) == our_mac);
    if (vlan) CHECK(get16(&r[14]) == *vlan);
    CHECK(get16(&r[l3 - 2]) == 0x86dd);
    const uint8_t* ip = &r[l3];
    CHECK(ip[0] >> 4 == 6);
    CHECK(uint8_t(ip[0] << 4 | ip[1] >> 4) == 0xb8);       // traffic class kept
    CHECK(((ip[1] & 0x0f) | ip[2] | ip[3]) == 0);          // a flow label of our own: none
    CHECK(get16(ip + 4) == request_icmp.size());
    CHECK(ip[6] == 58);
    CHECK(ip[7] == 64);
    CHECK(std::equal(our_ip6, our_ip6 + 16, ip + 8));
    CHECK(std::equal(peer_ip6, peer_ip6 + 16, ip + 24));
    const Bytes icmp(ip + 40, ip + 40 + request_icmp.size());
    CHECK(icmp[0] == 129);  // echo reply
    CHECK(icmp[1] == 0);
    CHECK(ref_icmpv6_checksum(our_ip6, peer_ip6, icmp) == 0);
    CHECK(std::equal(request_icmp.begin() + 4, request_icmp.end(), icmp.begin() + 4));  // id, seq, data
  }
  CHECK(e.counters.icmp_echo_replied == 2);
  CHECK(e.counters.rx_icmp_echo_requests == 0);  // counted by count(), which the engine calls, not here

  SECTION("the reply is an echo reply to its receiver, checksum right") {
    PortAddresses requester;
    requester.mac = peer_mac;
    requester.ips = {uroce::wire::IpAddress::from_v6_bytes(peer_ip6)};
    const Classification c = classify(e.reply_to(echo6_request_frame()), requester);
    CHECK(c.kind == FrameClass::drop);
    CHECK(c.reason == DropReason::other_icmpv6_type);  // reached only past every header check
  }
  SECTION("too large for the bound: not answered") {
    CHECK(e.reply_to(echo6_request_frame(1452)).size() == 1514);  // a full 1500-byte IPv6 packet
    CHECK(e.reply_to(echo6_request_frame(1453, 0x4007)).empty());
    CHECK(e.counters.icmp_echo_too_large == 1);
  }
}

TEST_CASE("IPv6 echo requests that are not answered", "[icmp][ipv6]") {
  const PortAddresses port = test_port();
  const auto reason = [&](const Bytes& f) {
    const Classification c = classify(f, port);
    REQUIRE(c.kind == FrameClass::drop);
    return c.reason;
  };
  // To all-nodes: every host would answer; the NIC stays out of it.
  Bytes to_all = echo6_request_frame(8, std::nullopt, all_nodes_ip6);
  std::copy_n(mcast_mac(all_nodes_ip6).bytes.begin(), 6, to_all.begin());
  CHECK(reason(to_all) == DropReason::not_for_our_ip);
  // To someone else's address.
  CHECK(reason(echo6_request_frame(8, std::nullopt, peer2_ip6)) == DropReason::not_for_our_ip);
  // A damaged request (one data bit) and one whose checksum is right for another destination.
  Bytes damaged = echo6_request_frame(8);
  damaged.back() ^= 0x10;
  CHECK(reason(damaged) == DropReason::bad_icmp_checksum);
  Bytes wrong_pseudo = ipv6_frame(peer_ip6, our_ip6, 58, icmpv6_echo(128, 1, 1, pattern(8), peer_ip6, peer2_ip6));
  CHECK(reason(wrong_pseudo) == DropReason::bad_icmp_checksum);
  // Code other than 0.
  Bytes coded = echo_message(128, 1, 1, pattern(8));
  coded[1] = 1;
  set_checksum(coded, ref_icmpv6_checksum(peer_ip6, our_ip6, coded));
  CHECK(reason(ipv6_frame(peer_ip6, our_ip6, 58, coded)) == DropReason::other_icmpv6_type);
  // Shorter than an echo header: the ND parser's verdict.
  CHECK(reason(ipv6_frame(peer_ip6, our_ip6, 58, Bytes{128, 0, 0, 0})) != DropReason::bad_icmp_checksum);
}
