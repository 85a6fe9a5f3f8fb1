// IGMPv2 host side: the Membership Report and Leave Group frames byte by byte (RFC 2236 §2, RFC 2113, RFC
// 1112's MAC mapping), the parsing of v1/v2/v3 queries (RFC 3376 §4.1, §7.1), and IgmpMembership's timing
// (RFC 2236 §3) on an injected clock.
#include <catch2/catch.hpp>

#include <set>

#include "emulator/net/classify.hpp"
#include "emulator/net/igmp.hpp"
#include "emulator/net/multicast.hpp"
#include "net_test_support.hpp"

using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;
namespace wire = uroce::wire;

namespace {

// The fields of one IGMP frame we sent, read back at fixed offsets.
struct SentIgmp : SentEthernet {
  uint32_t ip_src = 0, ip_dst = 0;
  uint8_t type = 0;
  uint32_t group = 0;
};

SentIgmp read_sent(const Bytes& f) {
  SentIgmp s;
  static_cast<SentEthernet&>(s) = read_ethernet(f);
  REQUIRE(f.size() == s.l3 + 24 + 8);
  const uint8_t* ip = f.data() + s.l3;
  s.ip_src = get32(ip + 12);
  s.ip_dst = get32(ip + 16);
  s.type = ip[24];
  s.group = get32(ip + 28);
  return s;
}

// Checks what RFC 2236 §2 and RFC 2113 ask of every IGMP message a host sends.
void check_igmp_frame(const Bytes& f, size_t l3) {
  REQUIRE(f.size() == l3 + 32);
  CHECK(get16(f.data() + l3 - 2) == 0x0800);
  const uint8_t* ip = f.data() + l3;
  CHECK(ip[0] == 0x46);                      // IPv4, 24-byte header
  CHECK(get16(ip + 2) == 32);                // total length
  CHECK((get16(ip + 6) & 0x3fff) == 0);      // not a fragment
  CHECK(ip[8] == 1);                         // TTL 1
  CHECK(ip[9] == 2);                         // IGMP
  CHECK(ref_checksum(ip, 24) == 0);
  CHECK(ip[20] == 0x94);                     // Router Alert: copied, class 0, option 20
  CHECK(ip[21] == 4);
  CHECK(get16(ip + 22) == 0);                // "every router examines the packet"
  CHECK(ip[25] == 0);                        // max resp time: zero in what hosts send
  CHECK(ref_checksum(ip + 24, 8) == 0);
}

// A report (0x16, to the group) or a leave (0x17, to all-routers) for `group`, from `src` and our MAC, at
// the destination's multicast MAC.
void check_message(const SentIgmp& s, uint8_t type, uint32_t group, uint32_t src = our_ip) {
  const uint32_t ip_dst = type == 0x16 ? group : all_routers_ip;
  CHECK(s.type == type);
  CHECK(s.group == group);
  CHECK(s.ip_dst == ip_dst);
  CHECK(s.eth_dst == ipv4_group_mac(ip_dst));
  CHECK(s.ip_src == src);
  CHECK(s.eth_src == our_mac);
}

struct Membership : MembershipFixture<IgmpMembership, IgmpOutput, SentIgmp, read_sent> {
  IgmpMembership& igmp = membership;

  explicit Membership(PortAddresses p = test_port(), uint64_t seed = 7) : MembershipFixture(std::move(p), seed) {}
};

IgmpQuery query(uint32_t group, Nanos max_response) { return IgmpQuery{.group = group, .max_response = max_response}; }

std::optional<DropReason> parse(const Bytes& m, IgmpQuery& q) { return parse_igmp_query(m.data(), m.size(), q); }

}  // namespace

TEST_CASE("IPv4 and IPv6 groups map to their multicast MACs", "[igmp][multicast]") {
  CHECK(ipv4_multicast_mac(group_a) == MacAddress{{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}});
  // Only the low 23 bits survive (RFC 1112 §6.4): 239.129.2.3 shares 224.1.2.3's MAC.
  CHECK(ipv4_multicast_mac(group_a_alias) == ipv4_multicast_mac(group_a));
  CHECK(ipv4_multicast_mac(all_hosts_ip) == MacAddress{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}});
  CHECK(multicast_mac_of(wire::IpAddress::from_v4(group_b)) == MacAddress{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x05}});
  CHECK(multicast_mac_of(wire::IpAddress::from_v6_bytes(group6)) == mcast_mac(group6));
}

TEST_CASE("a Membership Report goes to its group, TTL 1, Router Alert, checksums right", "[igmp]") {
  Bytes buf(max_igmp_frame_size);
  SECTION("untagged") {
    REQUIRE(write_igmp_report(buf, our_mac, our_ip, group_a, std::nullopt) == 46);
    buf.resize(46);
    check_igmp_frame(buf, 14);
    const SentIgmp s = read_sent(buf);
    check_message(s, 0x16, group_a);
    CHECK(s.eth_dst == MacAddress{{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}});
    CHECK_FALSE(s.vlan);
  }
  SECTION("with the port's VLAN tag") {
    REQUIRE(write_igmp_report(buf, our_mac, our_ip, group_b, 0x2005) == 50);
    check_igmp_frame(buf, 18);
    const SentIgmp s = read_sent(buf);
    CHECK(s.vlan == 0x2005);
    check_message(s, 0x16, group_b);
  }
  SECTION("a buffer too small gets nothing") {
    CHECK(write_igmp_report(std::span<uint8_t>(buf).first(45), our_mac, our_ip, group_a, std::nullopt) == 0);
    CHECK(write_igmp_report(std::span<uint8_t>(buf).first(49), our_mac, our_ip, group_a, 1) == 0);
  }
}

TEST_CASE("a Leave Group goes to all-routers and names the group", "[igmp]") {
  Bytes buf(max_igmp_frame_size);
  REQUIRE(write_igmp_leave(buf, our_mac, our_ip2, group_a, 7) == 50);
  check_igmp_frame(buf, 18);
  const SentIgmp s = read_sent(buf);
  check_message(s, 0x17, group_a, our_ip2);
  CHECK(s.eth_dst == MacAddress{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x02}});
  CHECK(s.vlan == 7);
}

TEST_CASE("Membership Queries of every version are parsed; anything else is dropped with its reason", "[igmp]") {
  IgmpQuery q;
  SECTION("v1: 8 bytes, max resp 0, read as 10 s (RFC 2236 §4)") {
    REQUIRE_FALSE(parse(igmp_message(0x11, 0, 0), q));
    CHECK(q.group == 0);
    CHECK(q.max_response == seconds(10));
  }
  SECTION("v2: tenths of a second; group-specific") {
    REQUIRE_FALSE(parse(igmp_message(0x11, 100, 0), q));
    CHECK(q.max_response == seconds(10));
    REQUIRE_FALSE(parse(igmp_message(0x11, 5, group_a), q));
    CHECK(q.group == group_a);
    CHECK(q.max_response == milliseconds(500));
  }
  SECTION("v3: 12 bytes and more, the max resp code exponential from 128 on, sources within the message") {
    REQUIRE_FALSE(parse(igmp_message(0x11, 100, 0, igmp_v3_tail(0, 0)), q));
    CHECK(q.max_response == seconds(10));
    // 0x8a: exp 0, mant 10: (0x10 | 10) << 3 = 208 tenths.
    REQUIRE_FALSE(parse(igmp_message(0x11, 0x8a, group_b, igmp_v3_tail(0, 0)), q));
    CHECK(q.group == group_b);
    CHECK(q.max_response == milliseconds(20800));
    // 0xff: the largest, (0x1f << 10) tenths = 3174.4 s.
    REQUIRE_FALSE(parse(igmp_message(0x11, 0xff, 0, igmp_v3_tail(0, 0)), q));
    CHECK(q.max_response == milliseconds(3174400));
    // Group-and-source-specific: answered as group-specific.
    REQUIRE_FALSE(parse(igmp_message(0x11, 20, group_a, igmp_v3_tail(2, 2)), q));
    CHECK(q.group == group_a);
    CHECK(q.max_response == seconds(2));
    // v3 max resp 0: report at once.
    REQUIRE_FALSE(parse(igmp_message(0x11, 0, 0, igmp_v3_tail(0, 0)), q));
    CHECK(q.max_response == 0);
  }
  SECTION("malformed") {
    CHECK(parse(igmp_message(0x11, 100, 0, {}, true), q) == DropReason::bad_igmp_checksum);
    CHECK(parse(igmp_message(0x11, 100, 0, igmp_v3_tail(0, 0), true), q) == DropReason::bad_igmp_checksum);
    Bytes shorter = igmp_message(0x11, 100, 0);
    shorter.pop_back();
    CHECK(parse(shorter, q) == DropReason::truncated_igmp);
    CHECK(parse(Bytes{}, q) == DropReason::truncated_igmp);
    // 10 bytes: no IGMP version's query (RFC 3376 §7.1).
    CHECK(parse(igmp_message(0x11, 100, 0, Bytes{0x02, 125}), q) == DropReason::bad_igmp_message);
    // Three sources announced, two present.
    CHECK(parse(igmp_message(0x11, 100, 0, igmp_v3_tail(3, 2)), q) == DropReason::bad_igmp_message);
  }
  SECTION("reports and leaves are not queries") {
    CHECK(parse(igmp_message(0x16, 0, group_a), q) == DropReason::igmp_not_a_query);
    CHECK(parse(igmp_message(0x17, 0, group_a), q) == DropReason::igmp_not_a_query);
    CHECK(parse(igmp_message(0x12, 0, group_a), q) == DropReason::igmp_not_a_query);  // v1 report
  }
}

TEST_CASE("join: a report at once and once more 1 s later", "[igmp][membership]") {
  Membership m;
  CHECK(m.igmp.next_deadline() == never);
  m.igmp.join(group_a, seconds(5));
  CHECK(m.igmp.is_member(group_a));
  CHECK(m.igmp.next_deadline() == seconds(5));
  auto sent = m.poll(seconds(5));
  REQUIRE(sent.size() == 1);
  check_message(sent[0], 0x16, group_a, our_ip);  // from the port's first IPv4 address
  CHECK(m.igmp.next_deadline() == seconds(6));
  CHECK(m.poll(seconds(6) - 1).empty());
  sent = m.poll(seconds(6));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].group == group_a);
  CHECK(m.igmp.next_deadline() == never);
  CHECK(m.poll(seconds(100)).empty());
  CHECK(m.counters.igmp_reports_sent == 2);

  // Joining again changes nothing.
  m.igmp.join(group_a, seconds(200));
  CHECK(m.igmp.next_deadline() == never);
  CHECK(m.igmp.groups() == 1);
}

TEST_CASE("all-hosts and non-group addresses are never joined", "[igmp][membership]") {
  Membership m;
  m.igmp.join(all_hosts_ip, 0);
  m.igmp.join(our_ip, 0);
  m.igmp.join(0, 0);
  CHECK(m.igmp.groups() == 0);
  CHECK(m.igmp.next_deadline() == never);
}

TEST_CASE("a general query: one report per group, each within max_response", "[igmp][membership]") {
  Membership m;
  const std::vector<uint32_t> groups{group_a, group_b, 0xe0000105, 0xe8000001, 0xefffffff};
  for (uint32_t g : groups) m.igmp.join(g, 0);
  m.run_until(seconds(2));  // the joins' unsolicited reports
  REQUIRE(m.counters.igmp_reports_sent == 2 * groups.size());

  const Nanos t = seconds(60);
  m.igmp.on_query(query(0, seconds(10)), t);
  CHECK(m.counters.igmp_queries_received == 1);
  CHECK(m.igmp.next_deadline() >= t);
  CHECK(m.igmp.next_deadline() <= t + seconds(10));
  const auto sent = m.run_until(t + seconds(100));
  REQUIRE(sent.size() == groups.size());
  std::set<uint32_t> reported;
  std::set<Nanos> times;
  for (const auto& [when, s] : sent) {
    CHECK(s.type == 0x16);
    CHECK(when >= t);
    CHECK(when <= t + seconds(10));
    reported.insert(s.group);
    times.insert(when);
  }
  CHECK(reported == std::set<uint32_t>(groups.begin(), groups.end()));
  CHECK(times.size() > 1);  // random delays, not one burst
  CHECK(m.igmp.next_deadline() == never);
}

TEST_CASE("a group-specific query is answered for that group only", "[igmp][membership]") {
  Membership m;
  m.igmp.join(group_a, 0);
  m.igmp.join(group_b, 0);
  m.run_until(seconds(2));
  m.igmp.on_query(query(group_b, seconds(1)), seconds(10));
  auto sent = m.run_until(seconds(100));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].second.group == group_b);
  CHECK(sent[0].first <= seconds(11));

  // A query for a group we are not in: nothing.
  m.igmp.on_query(query(0xe0090909, seconds(1)), seconds(200));
  CHECK(m.igmp.next_deadline() == never);
  CHECK(m.counters.igmp_queries_received == 2);
}

TEST_CASE("a query brings a later report forward and never delays an earlier one", "[igmp][membership]") {
  Membership m;
  m.igmp.join(group_a, 0);
  m.run_until(seconds(2));
  m.igmp.on_query(query(group_a, 0), seconds(10));  // max resp 0: report now
  CHECK(m.igmp.next_deadline() == seconds(10));
  m.igmp.on_query(query(0, seconds(25)), seconds(10));
  CHECK(m.igmp.next_deadline() == seconds(10));
  auto sent = m.run_until(seconds(100));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].first == seconds(10));

  // Report pending at some time in [20 s, 45 s]; a query with max resp 0 brings it to now.
  m.igmp.on_query(query(0, seconds(25)), seconds(20));
  m.igmp.on_query(query(0, 0), seconds(20));
  CHECK(m.igmp.next_deadline() == seconds(20));
  sent = m.run_until(seconds(100));
  CHECK(sent.size() == 1);
}

TEST_CASE("a join's repetition is not delayed by a query", "[igmp][membership]") {
  Membership m;
  m.igmp.join(group_a, 0);
  m.poll(0);
  // The repetition is due at 1 s; a query allowing 10 s must not push it back.
  m.igmp.on_query(query(0, seconds(10)), milliseconds(500));
  CHECK(m.igmp.next_deadline() <= seconds(1));
}

TEST_CASE("leave: a Leave Group at once, and any report still due is dropped", "[igmp][membership]") {
  Membership m(test_port(0x0123));
  m.igmp.join(group_a, 0);
  m.igmp.join(group_b, 0);
  m.poll(0);
  m.igmp.leave(group_a, milliseconds(300));
  CHECK_FALSE(m.igmp.is_member(group_a));
  CHECK(m.igmp.next_deadline() == milliseconds(300));
  auto sent = m.poll(milliseconds(300));
  REQUIRE(sent.size() == 1);
  check_message(sent[0], 0x17, group_a);
  CHECK(sent[0].vlan == 0x0123);
  // group_a's repetition is gone; group_b's is still due.
  const auto later = m.run_until(seconds(100));
  REQUIRE(later.size() == 1);
  CHECK(later[0].second.group == group_b);
  CHECK(later[0].second.type == 0x16);
  CHECK(m.counters.igmp_leaves_sent == 1);

  // Leaving a group we are not in: nothing.
  m.igmp.leave(group_a, seconds(200));
  m.igmp.leave(0xe0090909, seconds(200));
  CHECK(m.igmp.next_deadline() == never);
}

TEST_CASE("leave and join again within one poll: the Leave goes first, the report after", "[igmp][membership]") {
  Membership m;
  m.igmp.join(group_a, 0);
  m.run_until(seconds(2));
  m.igmp.leave(group_a, seconds(3));
  m.igmp.join(group_a, seconds(3));
  const auto sent = m.poll(seconds(3));
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].type == 0x17);
  CHECK(sent[1].type == 0x16);
  CHECK(m.igmp.is_member(group_a));
}

TEST_CASE("a port without an IPv4 address sends no IGMP", "[igmp][membership]") {
  PortAddresses v6_only = test_port();
  v6_only.ips = {wire::IpAddress::from_v6_bytes(our_ip6)};
  Membership m(v6_only);
  m.igmp.join(group_a, 0);
  CHECK(m.igmp.is_member(group_a));
  m.igmp.on_query(query(0, seconds(1)), seconds(5));
  m.igmp.leave(group_a, seconds(6));
  CHECK(m.igmp.next_deadline() == never);
  CHECK(m.poll(seconds(100)).empty());
  CHECK(m.counters.igmp_reports_sent == 0);
  CHECK(m.counters.igmp_leaves_sent == 0);
}

TEST_CASE("the seed decides the delays: one seed repeats them, another differs", "[igmp][membership]") {
  const auto delays = [](uint64_t seed) {
    Membership m(test_port(), seed);
    for (uint32_t g = 0; g < 8; ++g) m.igmp.join(0xe0000100 + g, 0);
    m.run_until(seconds(2));
    m.igmp.on_query(query(0, seconds(10)), seconds(10));
    std::vector<Nanos> when;
    for (const auto& [t, s] : m.run_until(seconds(100))) when.push_back(t);
    return when;
  };
  CHECK(delays(1) == delays(1));
  CHECK(delays(1) != delays(2));
}

TEST_CASE("a query frame, classified, drives the membership; our own report is not a query", "[igmp][classify]") {
  Membership m(joined_port());
  m.igmp.join(group_a, 0);
  m.run_until(seconds(2));
  const Classification c = classify(general_query_frame(), m.port);
  REQUIRE(c.kind == FrameClass::igmp);
  m.igmp.on_query(c.igmp, seconds(10));
  const auto sent = m.run_until(seconds(100));
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].first <= seconds(20));

  // A member of group_a hearing our report (as another host): dropped as no query.
  Bytes report(max_igmp_frame_size);
  report.resize(write_igmp_report(report, other_mac, other_ip, group_a, std::nullopt));
  const Classification r = classify(report, m.port);
  REQUIRE(r.kind == FrameClass::drop);
  CHECK(r.reason == DropReason::igmp_not_a_query);
}
