// IPv6 router discovery, the host's side: Router Advertisements written by hand from RFC 4861 §4.2 and
// §4.6 (checksums computed independently of the code under test) through classify(), hostile ones as
// counted drops with their reason, our Router Solicitation byte for byte (§4.1), and what RouterDiscovery
// learns and forgets on an injected clock.
#include <catch2/catch.hpp>

#include "emulator/net/classify.hpp"
#include "emulator/net/router_discovery.hpp"
#include "net_test_support.hpp"

using namespace uroce;
using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

wire::IpAddress v6(const uint8_t* p) { return wire::IpAddress::from_v6_bytes(p); }

// The router: fe80::ff:fe00:2 at peer_mac.
const uint8_t router_ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0x02};
const uint8_t router2_ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0x03};
const uint8_t our_ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0x01};
const uint8_t prefix_a[16] = {0xfd, 0x81, 0, 1, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0};  // junk past /64
const uint8_t prefix_b[16] = {0xfd, 0x81, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

struct Ra {
  uint8_t code = 0;
  uint16_t lifetime = 1800;
  Bytes options;
  bool bad_checksum = false;
};

Bytes prefix_option(const uint8_t* prefix, uint8_t length, bool on_link, uint32_t valid, uint32_t preferred = 600) {
  Bytes b{3, 4, length, uint8_t(on_link ? 0xc0 : 0x40)};  // L and A, or A alone
  put32(b, valid);
  put32(b, preferred);
  put32(b, 0);
  b.insert(b.end(), prefix, prefix + 16);
  return b;
}

Bytes mtu_option(uint32_t mtu) {
  Bytes b{5, 1, 0, 0};
  put32(b, mtu);
  return b;
}

Bytes ra_message(const Ra& r, const uint8_t* src, const uint8_t* dst) {
  Bytes b{134, r.code, 0, 0, 64, 0};  // type, code, checksum, cur hop limit, M/O flags
  put16(b, r.lifetime);
  put32(b, 0);  // reachable time
  put32(b, 0);  // retrans timer
  b.insert(b.end(), r.options.begin(), r.options.end());
  uint16_t sum = ref_icmpv6_checksum(src, dst, b);
  if (r.bad_checksum) sum ^= 0x0100;
  b[2] = uint8_t(sum >> 8);
  b[3] = uint8_t(sum);
  return b;
}

Bytes ra_frame(const Ra& r, const uint8_t* src = router_ll, uint8_t hop_limit = 255,
               const uint8_t* dst = all_nodes_ip6) {
  return icmpv6_frame(ra_message(r, src, dst), src, dst, mcast_mac(dst), hop_limit);
}

Classification classify_bytes(const Bytes& f) { return classify(std::span<const uint8_t>(f), test_port()); }

DropReason reason_of(const Bytes& f) {
  const Classification c = classify_bytes(f);
  REQUIRE(c.kind == FrameClass::drop);
  return c.reason;
}

RouterAdvertisement advertisement(const Ra& r, const uint8_t* src = router_ll) {
  const Classification c = classify_bytes(ra_frame(r, src));
  REQUIRE(c.kind == FrameClass::router_advertisement);
  return c.ra;
}

PortAddresses port_with_link_local() {
  PortAddresses p = test_port();
  p.ips.push_back(v6(our_ll));
  return p;
}

}  // namespace

TEST_CASE("a Router Advertisement is read field by field; unknown and malformed options are skipped", "[router-discovery]") {
  Ra r;
  r.lifetime = 1800;
  r.options = lladdr_option(1, peer_mac);
  const Bytes unknown{25, 1, 1, 2, 3, 4, 5, 6};  // RDNSS-like: skipped (§4.6)
  r.options.insert(r.options.end(), unknown.begin(), unknown.end());
  for (const Bytes& o : {mtu_option(9000), prefix_option(prefix_a, 64, true, 86400),
                         prefix_option(prefix_b, 64, false, 0xffffffff), prefix_option(prefix_b, 129, true, 60)}) {
    r.options.insert(r.options.end(), o.begin(), o.end());
  }
  const RouterAdvertisement ra = advertisement(r);
  CHECK(ra.router == v6(router_ll));
  CHECK(ra.router_lifetime == 1800);
  REQUIRE(ra.router_mac);
  CHECK(*ra.router_mac == peer_mac);
  CHECK(ra.mtu == 9000u);
  // The prefix of length 129 makes no sense: skipped, the message stays valid.
  REQUIRE(ra.prefixes.size() == 2);
  CHECK(wire::to_string(ra.prefixes[0].prefix) == "fd81:1::");  // the junk past /64 cleared
  CHECK(ra.prefixes[0].length == 64);
  CHECK(ra.prefixes[0].on_link);
  CHECK(ra.prefixes[0].valid_lifetime == 86400);
  CHECK(ra.prefixes[0].autonomous);  // the A flag and the preferred lifetime, for SLAAC (address_autoconf)
  CHECK(ra.prefixes[0].preferred_lifetime == 600);
  CHECK_FALSE(ra.prefixes[1].on_link);
  CHECK(ra.prefixes[1].valid_lifetime == 0xffffffff);

  NetCounters counters;
  count(counters, classify_bytes(ra_frame(r)));
  CHECK(counters.rx_router_advertisements == 1);

  // Unicast to one of our addresses is taken too (a router answering a solicitation may unicast, §6.2.6).
  CHECK(classify_bytes(ra_frame(r, router_ll, 255, our_ip6)).kind == FrameClass::router_advertisement);
  // At most max_advertised_prefixes are kept from one message.
  Ra many;
  for (int i = 0; i < 12; ++i) {
    const Bytes o = prefix_option(prefix_b, 64, true, 60);
    many.options.insert(many.options.end(), o.begin(), o.end());
  }
  CHECK(advertisement(many).prefixes.size() == max_advertised_prefixes);
}

TEST_CASE("hostile or invalid advertisements are counted drops with their reason (RFC 4861 §6.1.2)", "[router-discovery]") {
  Ra good;
  good.options = lladdr_option(1, peer_mac);
  CHECK(reason_of(ra_frame(good, router_ll, 64)) == DropReason::bad_router_advertisement);   // forwarded: off-link
  CHECK(reason_of(ra_frame(good, peer_ip6)) == DropReason::bad_router_advertisement);        // not link-local
  Ra coded = good;
  coded.code = 1;
  CHECK(reason_of(ra_frame(coded)) == DropReason::bad_router_advertisement);
  Ra zero_option = good;
  zero_option.options = {1, 0, 0, 0, 0, 0, 0, 0};
  CHECK(reason_of(ra_frame(zero_option)) == DropReason::bad_router_advertisement);
  Ra past_end = good;
  past_end.options = {3, 4, 64, 0xc0};  // claims 32 bytes, has 4
  CHECK(reason_of(ra_frame(past_end)) == DropReason::bad_router_advertisement);
  Ra odd = good;
  odd.options.push_back(1);  // a lone byte after the options: no room for a length
  CHECK(reason_of(ra_frame(odd)) == DropReason::bad_router_advertisement);
  Ra bad_sum = good;
  bad_sum.bad_checksum = true;
  CHECK(reason_of(ra_frame(bad_sum)) == DropReason::bad_icmp_checksum);

  // Shorter than an advertisement's 16 bytes, checksum right.
  Bytes short_ra{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0};
  const uint16_t short_sum = ref_icmpv6_checksum(router_ll, all_nodes_ip6, short_ra);
  short_ra[2] = uint8_t(short_sum >> 8);
  short_ra[3] = uint8_t(short_sum);
  Bytes f = icmpv6_frame(short_ra, router_ll, all_nodes_ip6, mcast_mac(all_nodes_ip6));
  CHECK(reason_of(f) == DropReason::bad_router_advertisement);
  // Cut inside the ICMPv6 header.
  f.resize(f.size() - short_ra.size() + 4);
  f[14 + 5] = 4;
  CHECK(reason_of(f) == DropReason::truncated_icmp);

  // Another host's solicitation is for routers, not for us: ignored, not malformed.
  // Its solicitation, checksum right for `dst`, sent to our MAC so that only the IP layer decides.
  const auto solicitation_to = [](const uint8_t* dst) {
    Bytes rs{133, 0, 0, 0, 0, 0, 0, 0};
    const Bytes sll = lladdr_option(1, peer_mac);
    rs.insert(rs.end(), sll.begin(), sll.end());
    const uint16_t sum = ref_icmpv6_checksum(peer_ip6, dst, rs);
    rs[2] = uint8_t(sum >> 8);
    rs[3] = uint8_t(sum);
    return icmpv6_frame(rs, peer_ip6, dst, our_mac);
  };
  // ff02::2 is not a group of ours: dropped before ICMPv6 is looked at. To all-nodes it is a type we ignore.
  CHECK(reason_of(solicitation_to(all_routers_ip6)) == DropReason::not_for_our_ip);
  CHECK(reason_of(solicitation_to(all_nodes_ip6)) == DropReason::other_icmpv6_type);
}

TEST_CASE("our Router Solicitation is RFC 4861's, byte for byte", "[router-discovery]") {
  Bytes out(128);
  out.resize(write_router_solicitation(out, our_mac, v6(our_ll), std::nullopt));
  // Written by hand: Ethernet to 33:33:00:00:00:02; IPv6 payload 16, next header 58, hop limit 255,
  // fe80::ff:fe00:1 -> ff02::2; ICMPv6 type 133, code 0, checksum, reserved; option 1 (source link-layer
  // address), length 1, our MAC.
  const Bytes expected = {
      0x33, 0x33, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x86, 0xdd,                //
      0x60, 0, 0, 0, 0, 0x10, 0x3a, 0xff,                                          //
      0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0x01,              //
      0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,                    //
      0x85, 0, 0, 0, 0, 0, 0, 0,                                                   //
      0x01, 0x01, 0x02, 0, 0, 0, 0, 0x01};
  REQUIRE(out.size() == expected.size());
  Bytes masked = out;
  masked[56] = masked[57] = 0;
  CHECK(masked == expected);
  const Bytes zeroed(masked.begin() + 54, masked.end());
  CHECK(get16(&out[56]) == ref_icmpv6_checksum(our_ll, all_routers_ip6, zeroed));
  CHECK(write_router_solicitation(std::span<uint8_t>(out.data(), 20), our_mac, v6(our_ll), std::nullopt) == 0);
}

TEST_CASE("solicitations: up to three, four seconds apart, the first within a second; an advertisement ends them", "[router-discovery]") {
  NetCounters counters;
  const Nanos t0 = seconds(100);
  {
    RouterDiscovery rd(port_with_link_local(), counters);
    CHECK(rd.next_deadline() == never);  // not before the port is up
    rd.start(t0);
    const Nanos first = rd.next_deadline();
    CHECK(first >= t0);
    CHECK(first < t0 + seconds(1));
    RouterDiscoveryOutput out;
    rd.poll(first - 1, out);
    CHECK(out.frames.empty());
    std::vector<Nanos> sent;
    for (Nanos t = first; t < t0 + seconds(60); t += milliseconds(250)) {
      rd.poll(t, out);
      if (!out.frames.empty()) sent.push_back(t);
      Bytes expected(128);
      expected.resize(write_router_solicitation(expected, our_mac, v6(our_ll), std::nullopt));
      for (const auto& f : out.frames) CHECK(f == expected);  // the solicitation checked byte for byte above
      out.clear();
    }
    REQUIRE(sent.size() == 3);
    CHECK(sent[1] - sent[0] == seconds(4));
    CHECK(sent[2] - sent[1] == seconds(4));
    CHECK(rd.next_deadline() == never);
    CHECK(counters.rd_solicitations_sent == 3);
  }
  {
    RouterDiscovery rd(port_with_link_local(), counters);
    rd.start(t0);
    RouterDiscoveryOutput out;
    rd.poll(t0 + seconds(1), out);
    CHECK(out.frames.size() == 1);
    rd.on_advertisement(advertisement(Ra{}), t0 + seconds(2));
    CHECK(rd.next_deadline() == never);
  }
  {
    // No link-local address (the loopback port): nothing to solicit from. Disabled: nothing either.
    RouterDiscovery no_source(test_port(), counters);
    no_source.start(t0);
    CHECK(no_source.next_deadline() == never);
    RouterDiscovery disabled(port_with_link_local(), counters, RouterDiscoveryConfig{.enabled = false});
    disabled.start(t0);
    CHECK(disabled.next_deadline() == never);
  }
}

TEST_CASE("default routers and on-link prefixes: learned, refreshed, expired, withdrawn, bounded", "[router-discovery]") {
  NetCounters counters;
  RouterDiscovery rd(port_with_link_local(), counters, RouterDiscoveryConfig{.max_routers = 2, .max_prefixes = 2});
  const Nanos t0 = seconds(10);
  const auto dst_a = [] {
    uint8_t a[16] = {0xfd, 0x81, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
    return wire::IpAddress::from_v6_bytes(a);
  }();
  const auto dst_b = [] {
    uint8_t a[16] = {0xfd, 0x81, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
    return wire::IpAddress::from_v6_bytes(a);
  }();
  CHECK_FALSE(rd.default_router(t0));

  Ra r;
  r.lifetime = 30;
  r.options = prefix_option(prefix_a, 64, true, 20);
  const Bytes not_on_link = prefix_option(prefix_b, 64, false, 0xffffffff);
  r.options.insert(r.options.end(), not_on_link.begin(), not_on_link.end());
  rd.on_advertisement(advertisement(r), t0);
  CHECK(rd.default_router(t0) == v6(router_ll));
  CHECK(rd.on_link(dst_a, t0));
  CHECK_FALSE(rd.on_link(dst_b, t0));  // no L flag: reached through the router
  CHECK(rd.prefixes(t0) == 1);
  // The prefix's valid lifetime (20 s) ends before the router's (30 s).
  CHECK_FALSE(rd.on_link(dst_a, t0 + seconds(20)));
  CHECK(rd.default_router(t0 + seconds(29)) == v6(router_ll));
  CHECK_FALSE(rd.default_router(t0 + seconds(30)));
  // A later advertisement refreshes both.
  rd.on_advertisement(advertisement(r), t0 + seconds(25));
  CHECK(rd.default_router(t0 + seconds(50)) == v6(router_ll));
  CHECK(rd.on_link(dst_a, t0 + seconds(40)));
  CHECK(rd.routers(t0 + seconds(50)) == 1);

  // A second router; a third does not fit (counted), until one expires.
  Ra other;
  other.lifetime = 0xffff;
  rd.on_advertisement(advertisement(other, router2_ll), t0 + seconds(26));
  CHECK(rd.routers(t0 + seconds(26)) == 2);
  const uint8_t router3_ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0x04};
  rd.on_advertisement(advertisement(other, router3_ll), t0 + seconds(27));
  CHECK(counters.rd_ignored == 1);
  rd.on_advertisement(advertisement(other, router3_ll), t0 + seconds(60));  // the first router expired at 55
  CHECK(rd.routers(t0 + seconds(60)) == 2);
  CHECK(counters.rd_ignored == 1);

  // Router Lifetime 0: no longer a default router, at once. Valid lifetime 0 withdraws a prefix.
  Ra withdraw;
  withdraw.lifetime = 0;
  withdraw.options = prefix_option(prefix_a, 64, true, 0);
  rd.on_advertisement(advertisement(r), t0 + seconds(61));
  CHECK(rd.on_link(dst_a, t0 + seconds(61)));
  rd.on_advertisement(advertisement(withdraw), t0 + seconds(62));
  CHECK_FALSE(rd.on_link(dst_a, t0 + seconds(62)));
  CHECK(rd.default_router(t0 + seconds(62)) == v6(router2_ll));

  // An infinite valid lifetime never ends; a link-local prefix is ignored (§6.3.4).
  Ra forever;
  forever.lifetime = 0;
  forever.options = prefix_option(prefix_a, 64, true, 0xffffffff);
  const uint8_t fe80[16] = {0xfe, 0x80};
  const Bytes ll = prefix_option(fe80, 64, true, 0xffffffff);
  forever.options.insert(forever.options.end(), ll.begin(), ll.end());
  rd.on_advertisement(advertisement(forever), t0 + seconds(63));
  CHECK(rd.on_link(dst_a, never - 1));
  CHECK(rd.prefixes(t0 + seconds(63)) == 1);
  CHECK(counters.rd_advertisements_received == 8);
}
