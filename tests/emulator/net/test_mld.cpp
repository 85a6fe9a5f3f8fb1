// MLDv1 host side: the Multicast Listener Report and Done frames byte by byte (RFC 2710 §3, RFC 2711's Router
// Alert in a Hop-by-Hop header, RFC 2464's MAC mapping), the parsing of v1 and v2 queries (RFC 3810 §5.1,
// §6.2, §8.1) with every drop, and MldMembership's timing (RFC 2710 §4) on an injected clock.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "emulator/net/classify.hpp"
#include "emulator/net/mld.hpp"
#include "emulator/net/nd_frames.hpp"
#include "net_test_support.hpp"

using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;
namespace wire = uroce::wire;

namespace {

wire::IpAddress v6(const uint8_t* p) { return wire::IpAddress::from_v6_bytes(p); }

const wire::IpAddress group_x = v6(group6);                 // ff0e::1234
const wire::IpAddress group_y = *wire::parse_ip("ff05::77");  // site-local scope

// test_port() with its link-local address fe80::1 after the others, as uroced lists it.
PortAddresses port_with_link_local(std::optional<uint16_t> vlan = std::nullopt) {
  PortAddresses p = test_port(vlan);
  p.ips.push_back(v6(our_link_local));
  return p;
}

// The fields of one MLD frame we sent, read back at fixed offsets.
struct SentMld : SentEthernet {
  wire::IpAddress ip_src, ip_dst;
  uint8_t type = 0;
  wire::IpAddress group;
};

SentMld read_sent(const Bytes& f) {
  SentMld s;
  static_cast<SentEthernet&>(s) = read_ethernet(f);
  REQUIRE(f.size() == s.l3 + 40 + 8 + 24);
  const uint8_t* ip = f.data() + s.l3;
  s.ip_src = v6(ip + 8);
  s.ip_dst = v6(ip + 24);
  s.type = ip[48];
  s.group = v6(ip + 48 + 8);
  return s;
}

// Checks what RFC 2710 §3 and RFC 2711 ask of every MLD message a host sends, then reads it back.
SentMld checked(const Bytes& f) {
  const size_t l3 = read_ethernet(f).l3;
  REQUIRE(f.size() == l3 + 72);
  CHECK(get16(f.data() + l3 - 2) == 0x86dd);
  const uint8_t* ip = f.data() + l3;
  CHECK(ip[0] >> 4 == 6);
  CHECK(get16(ip + 4) == 32);  // payload length: Hop-by-Hop 8 + MLD 24
  CHECK(ip[6] == 0);           // next header: Hop-by-Hop
  CHECK(ip[7] == 1);           // hop limit 1
  const uint8_t* hbh = ip + 40;
  CHECK(hbh[0] == 58);  // then ICMPv6
  CHECK(hbh[1] == 0);   // 8 bytes
  CHECK(hbh[2] == 5);   // Router Alert, 2 bytes, value 0 (MLD)
  CHECK(hbh[3] == 2);
  CHECK(get16(hbh + 4) == 0);
  CHECK(hbh[6] == 1);  // PadN, no data
  CHECK(hbh[7] == 0);
  const uint8_t* mld = hbh + 8;
  CHECK(mld[1] == 0);             // code
  CHECK(get16(mld + 4) == 0);     // max response delay: zero in what hosts send
  CHECK(get16(mld + 6) == 0);     // reserved
  // The pseudo-header's next header is 58 (ICMPv6), not the Hop-by-Hop header's 0.
  CHECK(ref_icmpv6_checksum(ip + 8, ip + 24, Bytes(mld, mld + 24)) == 0);
  return read_sent(f);
}

// A Report (131, to the group) or a Done (132, to all-routers) for `group`, from `src` and our MAC, at the
// destination's 33:33 MAC.
void check_message(const SentMld& s, uint8_t type, const wire::IpAddress& group,
                   const wire::IpAddress& src = v6(our_link_local)) {
  const wire::IpAddress ip_dst = type == 131 ? group : v6(all_routers_ip6);
  CHECK(s.type == type);
  CHECK(s.group == group);
  CHECK(s.ip_dst == ip_dst);
  CHECK(s.eth_dst == mcast_mac(ip_dst.bytes.data()));
  CHECK(s.ip_src == src);
  CHECK(s.eth_src == our_mac);
}

struct Membership : MembershipFixture<MldMembership, MldOutput, SentMld, read_sent> {
  MldMembership& mld = membership;

  explicit Membership(PortAddresses p = port_with_link_local(), uint64_t seed = 7)
      : MembershipFixture(std::move(p), seed) {}
};

MldQuery query(const wire::IpAddress& group, Nanos max_response) {
  return MldQuery{.group = group, .max_response = max_response};
}

// A query message from the router's link-local address to `dst`, parsed as classify() would hand it over.
std::optional<DropReason> parse(const Bytes& m, MldQuery& q, const uint8_t* dst = all_nodes_ip6,
                                const uint8_t* src = peer_link_local, uint8_t hop_limit = 1,
                                bool router_alert = true) {
  return parse_mld_query(v6(src), v6(dst), hop_limit, router_alert, m.data(), m.size(), q);
}

Bytes general_v1(uint16_t max_resp_ms, const uint8_t* src = peer_link_local, const uint8_t* dst = all_nodes_ip6) {
  return mld_message(130, max_resp_ms, nullptr, src, dst);
}

}  // namespace

TEST_CASE("the solicited-node group of an address is ff02::1:ff + its last 24 bits", "[mld]") {
  CHECK(solicited_node_address(v6(our_ip6)) == v6(solicited_ip6(our_ip6).data()));
  CHECK(solicited_node_address(*wire::parse_ip("fe80::1234:5678:9abc")) == *wire::parse_ip("ff02::1:ff78:9abc"));
}

TEST_CASE("a Multicast Listener Report goes to its group: hop limit 1, Router Alert, checksum right", "[mld]") {
  Bytes buf(max_mld_frame_size);
  SECTION("untagged, from the link-local address") {
    buf.resize(write_mld_report(buf, our_mac, v6(our_link_local), group_x, std::nullopt));
    CHECK(buf.size() == 86);
    const SentMld s = checked(buf);
    check_message(s, 131, group_x);
    CHECK(s.eth_dst == MacAddress{{0x33, 0x33, 0x00, 0x00, 0x12, 0x34}});
    CHECK_FALSE(s.vlan);
  }
  SECTION("with the port's VLAN tag, from :: (no link-local address yet, RFC 3590)") {
    const wire::IpAddress solicited = solicited_node_address(v6(our_ip6));
    buf.resize(write_mld_report(buf, our_mac, wire::IpAddress{}, solicited, 0x2005));
    CHECK(buf.size() == 90);
    const SentMld s = checked(buf);
    CHECK(s.vlan == 0x2005);
    check_message(s, 131, solicited, wire::IpAddress{});
    CHECK(s.eth_dst == MacAddress{{0x33, 0x33, 0xff, 0x00, 0x00, 0x01}});
  }
  SECTION("a buffer too small gets nothing") {
    CHECK(write_mld_report(std::span<uint8_t>(buf).first(85), our_mac, v6(our_link_local), group_x, std::nullopt) ==
          0);
    CHECK(write_mld_report(std::span<uint8_t>(buf).first(89), our_mac, v6(our_link_local), group_x, 1) == 0);
  }
}

TEST_CASE("a Done goes to all-routers ff02::2 and names the group", "[mld]") {
  Bytes buf(max_mld_frame_size);
  buf.resize(write_mld_done(buf, our_mac, v6(our_link_local), group_y, 7));
  CHECK(buf.size() == 90);
  const SentMld s = checked(buf);
  check_message(s, 132, group_y);
  CHECK(s.eth_dst == MacAddress{{0x33, 0x33, 0x00, 0x00, 0x00, 0x02}});
  CHECK(s.vlan == 7);
}

TEST_CASE("v1 and v2 queries are parsed; anything else is dropped with its reason", "[mld]") {
  MldQuery q;
  SECTION("v1: 24 bytes, max response delay in ms; general and group-specific") {
    REQUIRE_FALSE(parse(general_v1(10000), q));
    CHECK(q.group == wire::IpAddress{});
    CHECK(q.max_response == seconds(10));
    REQUIRE_FALSE(parse(mld_message(130, 500, group6, peer_link_local, group6), q, group6));
    CHECK(q.group == group_x);
    CHECK(q.max_response == milliseconds(500));
  }
  SECTION("v2: 28 bytes and more, the code exponential from 32768 on, sources within the message") {
    REQUIRE_FALSE(parse(mld_message(130, 10000, nullptr, peer_link_local, all_nodes_ip6, mld_v2_tail(0, 0)), q));
    CHECK(q.max_response == seconds(10));
    // 0x8000: exp 0, mant 0: 0x1000 << 3 = 32768 ms.
    REQUIRE_FALSE(parse(mld_message(130, 0x8000, nullptr, peer_link_local, all_nodes_ip6, mld_v2_tail(0, 0)), q));
    CHECK(q.max_response == milliseconds(32768));
    // 0xffff: the largest, 0x1fff << 10 ms.
    REQUIRE_FALSE(parse(mld_message(130, 0xffff, nullptr, peer_link_local, all_nodes_ip6, mld_v2_tail(0, 0)), q));
    CHECK(q.max_response == milliseconds(8191u << 10));
    // Group-and-source-specific: answered as group-specific.
    REQUIRE_FALSE(parse(mld_message(130, 2000, group6, peer_link_local, group6, mld_v2_tail(2, 2)), q, group6));
    CHECK(q.group == group_x);
    CHECK(q.max_response == seconds(2));
    // Max response 0: report at once.
    REQUIRE_FALSE(parse(mld_message(130, 0, nullptr, peer_link_local, all_nodes_ip6, mld_v2_tail(0, 0)), q));
    CHECK(q.max_response == 0);
  }
  SECTION("the code field is ignored") {
    Bytes m = general_v1(1000);
    m[1] = 9;
    m[2] = m[3] = 0;
    set_checksum(m, ref_icmpv6_checksum(peer_link_local, all_nodes_ip6, m));
    CHECK_FALSE(parse(m, q));
  }
  SECTION("malformed") {
    CHECK(parse(mld_message(130, 1000, nullptr, peer_link_local, all_nodes_ip6, {}, true), q) ==
          DropReason::bad_icmp_checksum);
    // The checksum covers the pseudo-header: the same message to another destination fails it.
    CHECK(parse(general_v1(1000), q, group6) == DropReason::bad_icmp_checksum);
    CHECK(parse(Bytes{130, 0, 0}, q) == DropReason::truncated_icmp);
    Bytes shorter = general_v1(1000);
    shorter.resize(20);
    set_checksum(shorter, 0);
    set_checksum(shorter, ref_icmpv6_checksum(peer_link_local, all_nodes_ip6, shorter));
    CHECK(parse(shorter, q) == DropReason::truncated_icmp);
    // 26 bytes: no MLD version's query (RFC 3810 §8.1).
    CHECK(parse(mld_message(130, 1000, nullptr, peer_link_local, all_nodes_ip6, Bytes{0x02, 125}), q) ==
          DropReason::bad_mld_message);
    // Three sources announced, two present.
    CHECK(parse(mld_message(130, 1000, nullptr, peer_link_local, all_nodes_ip6, mld_v2_tail(3, 2)), q) ==
          DropReason::bad_mld_message);
  }
  SECTION("RFC 3810 §6.2: hop limit 1, a link-local source, the Router Alert; a group that is a group") {
    CHECK(parse(general_v1(1000), q, all_nodes_ip6, peer_link_local, 255) == DropReason::bad_mld_message);
    CHECK(parse(general_v1(1000), q, all_nodes_ip6, peer_link_local, 1, false) == DropReason::bad_mld_message);
    CHECK(parse(general_v1(1000, peer_ip6), q, all_nodes_ip6, peer_ip6) == DropReason::bad_mld_message);
    CHECK(parse(general_v1(1000, unspecified_ip6), q, all_nodes_ip6, unspecified_ip6) ==
          DropReason::bad_mld_message);
    CHECK(parse(mld_message(130, 1000, peer_ip6, peer_link_local, all_nodes_ip6), q) == DropReason::bad_mld_message);
  }
  SECTION("reports and dones are not queries") {
    CHECK(parse(mld_message(131, 0, group6, peer_link_local, group6), q, group6) == DropReason::mld_not_a_query);
    CHECK(parse(mld_message(132, 0, group6, peer_link_local, all_routers_ip6), q, all_routers_ip6) ==
          DropReason::mld_not_a_query);
    // A v2 report: 8-byte header and records; not a query whatever its length.
    Bytes v2_report{143, 0, 0, 0, 0, 0, 0, 0};
    set_checksum(v2_report, ref_icmpv6_checksum(peer_link_local, group6, v2_report));
    CHECK(parse(v2_report, q, group6) == DropReason::mld_not_a_query);
  }
}

// What a run sent, one "time type group" line a frame, so that a whole exchange is compared at once.
std::vector<std::string> timeline(const std::vector<std::pair<Nanos, SentMld>>& sent) {
  std::vector<std::string> out;
  for (const auto& [t, s] : sent) {
    const std::string when = std::to_string(t / milliseconds(1)) + "ms ";
    out.push_back(when + std::to_string(s.type) + " " + wire::to_string(s.group));
  }
  return out;
}

TEST_CASE("MLD: a join reports at once and 1 s later; a leave sends a Done and cancels what was due",
          "[mld][membership]") {
  Membership m(port_with_link_local(0x0123));
  CHECK(m.mld.next_deadline() == never);
  m.mld.join(group_x, seconds(5));
  m.mld.join(group_y, seconds(5));
  m.mld.join(group_x, seconds(5));  // again: nothing more
  CHECK(m.mld.groups() == 2);
  CHECK(m.mld.is_member(group_x));
  CHECK(m.mld.next_deadline() == seconds(5));
  const auto first = m.poll(seconds(5));
  REQUIRE(first.size() == 2);
  check_message(first[0], 131, group_x);  // from the link-local address, with the port's tag
  check_message(first[1], 131, group_y);
  CHECK(first[1].vlan == 0x0123);

  m.mld.leave(group_x, seconds(5) + milliseconds(300));
  m.mld.leave(group_x, seconds(5) + milliseconds(300));  // not a member any more: nothing
  CHECK_FALSE(m.mld.is_member(group_x));
  const auto rest = m.run_until(seconds(100));
  CHECK(timeline(rest) == std::vector<std::string>{"5300ms 132 ff0e::1234", "6000ms 131 ff05::77"});
  check_message(rest[0].second, 132, group_x);
  CHECK(m.mld.next_deadline() == never);

  // Left and joined again before a poll: the Done goes first, so the group ends joined.
  m.mld.leave(group_y, seconds(200));
  m.mld.join(group_y, seconds(200));
  CHECK(timeline(m.run_until(seconds(300))) ==
        std::vector<std::string>{"200000ms 132 ff05::77", "200000ms 131 ff05::77", "201000ms 131 ff05::77"});
  CHECK(m.counters.mld_reports_sent == 5);
  CHECK(m.counters.mld_dones_sent == 2);
}

TEST_CASE("MLD: a port without a link-local address reports from ::, and the solicited-node group too",
          "[mld][membership]") {
  Membership m(test_port(0x0064));
  const wire::IpAddress solicited = solicited_node_address(v6(our_ip6));
  m.mld.join(solicited, 0);
  const auto sent = m.poll(0);
  REQUIRE(sent.size() == 1);
  check_message(sent[0], 131, solicited, wire::IpAddress{});
  CHECK(sent[0].vlan == 0x0064);
}

TEST_CASE("MLD: all-nodes, scopes 0 and 1, IPv4 and non-group addresses are never joined", "[mld][membership]") {
  Membership m;
  m.mld.join(v6(all_nodes_ip6), 0);
  m.mld.join(*wire::parse_ip("ff00::1234"), 0);  // scope 0, reserved
  m.mld.join(*wire::parse_ip("ff01::1"), 0);     // interface-local
  m.mld.join(*wire::parse_ip("ff11::5"), 0);     // transient, interface-local
  m.mld.join(wire::IpAddress::from_v4(group_a), 0);
  m.mld.join(v6(our_ip6), 0);
  m.mld.join(wire::IpAddress{}, 0);
  CHECK(m.mld.groups() == 0);
  CHECK(m.mld.next_deadline() == never);
  // Link scope and up are reported, all-routers included.
  m.mld.join(v6(all_routers_ip6), 0);
  m.mld.join(*wire::parse_ip("ff12::5"), 0);
  CHECK(m.mld.groups() == 2);
}

TEST_CASE("MLD: queries are answered within max_response for the groups they cover, solicited-node ones too",
          "[mld][membership]") {
  Membership m;
  const wire::IpAddress solicited = solicited_node_address(v6(our_ip6));
  m.mld.join(group_x, 0);
  m.mld.join(group_y, 0);
  m.mld.join(solicited, 0);
  m.mld.join(solicited_node_address(v6(our_link_local)), 0);  // fe80::1 and fd00::1 share ff02::1:ff00:1
  CHECK(m.mld.groups() == 3);
  m.run_until(seconds(2));

  // General (group ::): every group, at random times in [60 s, 70 s].
  m.mld.on_query(query(wire::IpAddress{}, seconds(10)), seconds(60));
  const auto general = m.run_until(seconds(100));
  std::set<std::string> groups;
  std::set<Nanos> times;
  for (const auto& [when, s] : general) {
    CHECK(s.type == 131);
    CHECK((when >= seconds(60) && when <= seconds(70)));
    groups.insert(wire::to_string(s.group));
    times.insert(when);
  }
  CHECK(groups == std::set<std::string>{"ff0e::1234", "ff05::77", "ff02::1:ff00:1"});
  CHECK(times.size() > 1);  // random delays, not one burst

  // Group-specific: that group only; for a group we are not in, nothing.
  m.mld.on_query(query(solicited, seconds(1)), seconds(200));
  const auto specific = m.run_until(seconds(300));
  REQUIRE(specific.size() == 1);
  CHECK(specific[0].second.group == solicited);
  CHECK(specific[0].first <= seconds(201));
  m.mld.on_query(query(*wire::parse_ip("ff0e::9"), seconds(1)), seconds(400));
  CHECK(m.mld.next_deadline() == never);
  CHECK(m.counters.mld_queries_received == 3);
}

TEST_CASE("MLD: a query frame, classified, drives the membership; our own messages are not queries",
          "[mld][classify]") {
  PortAddresses p = port_with_link_local();
  p.groups = {group_x};
  Membership m(p);
  m.mld.join(group_x, 0);
  m.mld.join(solicited_node_address(v6(our_ip6)), 0);
  m.run_until(seconds(2));
  const Classification c = classify(mld_general_query_frame(), m.port);
  REQUIRE(c.kind == FrameClass::mld);
  m.mld.on_query(c.mld, seconds(10));
  m.mld.leave(group_x, seconds(10));
  // The Done at once; the solicited-node group's report within the query's 10 s.
  std::vector<Bytes> frames;
  while (m.mld.next_deadline() <= seconds(20)) {
    m.poll(m.mld.next_deadline());
    frames.insert(frames.end(), m.out.frames.begin(), m.out.frames.end());
  }
  REQUIRE(frames.size() == 2);
  CHECK(read_sent(frames[0]).type == 132);
  CHECK(read_sent(frames[1]).type == 131);
  CHECK(m.mld.next_deadline() == never);

  // A listener of ff0e::1234 and ff02::1:ff00:1 that also hears all-routers, as a router does: each message
  // is valid MLD (checksum, Hop-by-Hop header) but no query.
  PortAddresses listener;
  listener.mac = peer_mac;
  listener.groups = {group_x, solicited_node_address(v6(our_ip6)), v6(all_routers_ip6)};
  for (const Bytes& frame : frames) {
    const Classification r = classify(frame, listener);
    CHECK((r.kind == FrameClass::drop && r.reason == DropReason::mld_not_a_query));
  }
}
