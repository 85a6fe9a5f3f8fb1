// The ARP cache on an injected clock: expiry to the nanosecond, resolution retries and failure, parked
// frames released in order with the right MAC, limits, probes of entries in use, and next_deadline().
#include <catch2/catch.hpp>

#include "emulator/net/arp_cache.hpp"
#include "net_test_support.hpp"

using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

using Cache = CacheFixture<ArpCache, ArpOutput, ArpCacheConfig>;

bool is_request_for(const Bytes& f, uint32_t target, const MacAddress& eth_dst, uint32_t sender = our_ip) {
  return f.size() == 42 && get_mac(&f[0]) == eth_dst && get_mac(&f[6]) == our_mac && get16(&f[12]) == 0x0806 &&
         get16(&f[20]) == 1 && get_mac(&f[22]) == our_mac && get32(&f[28]) == sender &&
         get_mac(&f[32]) == MacAddress{} && get32(&f[38]) == target;
}

}  // namespace

TEST_CASE("an empty cache knows only our own addresses and has nothing to do", "[arp_cache]") {
  Cache c;
  CHECK_FALSE(c.cache.lookup(peer_ip, 0).has_value());
  CHECK(c.cache.lookup(our_ip, 0) == our_mac);
  CHECK(c.cache.lookup(our_ip2, 0) == our_mac);
  CHECK(c.cache.next_deadline() == never);
  CHECK(c.poll(seconds(100)).frames.empty());
}

TEST_CASE("a learned entry is used for reachable_time, then expires", "[arp_cache]") {
  Cache c;
  const Nanos t0 = seconds(10);
  c.cache.learn(peer_ip, peer_mac, t0, c.out);
  CHECK(c.cache.lookup(peer_ip, t0) == peer_mac);
  CHECK(c.cache.lookup(peer_ip, t0 + seconds(60) - 1) == peer_mac);
  CHECK_FALSE(c.cache.lookup(peer_ip, t0 + seconds(60)).has_value());

  SECTION("an unused entry is dropped silently at expiry") {
    Cache u;
    u.cache.learn(peer_ip, peer_mac, t0, u.out);
    CHECK(u.cache.next_deadline() == t0 + seconds(60));
    CHECK(u.poll(t0 + seconds(60) - 1).frames.empty());
    CHECK(u.cache.entries() == 1);
    CHECK(u.poll(t0 + seconds(60)).frames.empty());
    CHECK(u.cache.entries() == 0);
    CHECK(u.counters.arp_entries_expired == 1);
    CHECK(u.counters.arp_probes_sent == 0);
    CHECK(u.cache.next_deadline() == never);
  }
  SECTION("the reachable time is configurable") {
    Cache s({.reachable_time = seconds(5)});
    s.cache.learn(peer_ip, peer_mac, 0, s.out);
    CHECK(s.cache.lookup(peer_ip, seconds(5) - 1) == peer_mac);
    CHECK_FALSE(s.cache.lookup(peer_ip, seconds(5)).has_value());
  }
}

TEST_CASE("resolution: max_requests broadcasts retry_interval apart, then failure", "[arp_cache]") {
  Cache c;
  const Nanos t0 = seconds(3);
  REQUIRE(c.cache.park(peer_ip, parkable_frame(1), t0) == ParkResult::queued);
  REQUIRE(c.cache.park(peer_ip, parkable_frame(2), t0 + 5) == ParkResult::queued);
  CHECK(c.cache.resolving(peer_ip));
  CHECK(c.cache.parked() == 2);
  CHECK(c.cache.next_deadline() == t0);

  for (int attempt = 0; attempt < 3; ++attempt) {
    const Nanos t = t0 + seconds(attempt);
    INFO("attempt " << attempt);
    CHECK(c.poll(t - 1).frames.empty());
    const ArpOutput& o = c.poll(t);
    REQUIRE(o.frames.size() == 1);
    CHECK(is_request_for(o.frames[0], peer_ip, MacAddress::broadcast()));
    CHECK(o.failed.empty());
    CHECK(c.cache.next_deadline() == t + seconds(1));
    CHECK(c.counters.arp_requests_sent == unsigned(attempt + 1));
  }
  CHECK(c.poll(t0 + seconds(3) - 1).frames.empty());
  const ArpOutput& o = c.poll(t0 + seconds(3));
  CHECK(o.frames.empty());
  REQUIRE(o.failed == std::vector<uint32_t>{peer_ip});
  CHECK(c.counters.arp_resolution_failures == 1);
  CHECK(c.counters.arp_parked == 2);
  CHECK(c.counters.arp_parked_dropped == 2);
  CHECK(c.counters.arp_parked_released == 0);
  CHECK(c.cache.parked() == 0);
  CHECK(c.cache.entries() == 0);
  CHECK(c.cache.next_deadline() == never);

  SECTION("the next packet starts a new resolution") {
    REQUIRE(c.cache.park(peer_ip, parkable_frame(3), seconds(20)) == ParkResult::queued);
    REQUIRE(c.poll(seconds(20)).frames.size() == 1);
    CHECK(c.counters.arp_requests_sent == 4);
  }
}

TEST_CASE("retries are configurable", "[arp_cache]") {
  Cache c({.retry_interval = milliseconds(100), .max_requests = 2});
  c.cache.park(peer_ip, parkable_frame(1), 0);
  CHECK(c.poll(0).frames.size() == 1);
  CHECK(c.poll(milliseconds(100)).frames.size() == 1);
  CHECK(c.poll(milliseconds(199)).failed.empty());
  CHECK(c.poll(milliseconds(200)).failed.size() == 1);
  CHECK(c.counters.arp_requests_sent == 2);
}

TEST_CASE("parked frames are released in order with the peer's MAC once it answers", "[arp_cache]") {
  Cache c;
  std::vector<Bytes> sent;
  for (uint8_t i = 0; i < 5; ++i) {
    sent.push_back(parkable_frame(i, 60 + i));
    REQUIRE(c.cache.park(peer_ip, sent.back(), milliseconds(i)) == ParkResult::queued);
  }
  c.cache.park(other_ip, parkable_frame(9), 0);  // another peer, still unresolved afterwards
  REQUIRE(c.poll(milliseconds(10)).frames.size() == 2);

  c.out.clear();
  c.cache.learn(peer_ip, peer_mac, milliseconds(700), c.out);
  REQUIRE(c.out.frames.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    INFO("frame " << i);
    Bytes expected = sent[i];
    std::copy(peer_mac.bytes.begin(), peer_mac.bytes.end(), expected.begin());
    CHECK(c.out.frames[i] == expected);
  }
  CHECK(c.counters.arp_parked_released == 5);
  CHECK(c.cache.parked() == 1);
  CHECK(c.cache.lookup(peer_ip, milliseconds(700)) == peer_mac);
  CHECK_FALSE(c.cache.resolving(peer_ip));
  CHECK(c.cache.resolving(other_ip));
  // The resolved peer sends no more requests; the other one continues on its own schedule.
  const ArpOutput& o = c.poll(seconds(1) + milliseconds(10));
  REQUIRE(o.frames.size() == 1);
  CHECK(is_request_for(o.frames[0], other_ip, MacAddress::broadcast()));
}

TEST_CASE("parking is bounded in bytes per destination and in total; drops are counted", "[arp_cache]") {
  const size_t frame = held(parkable_frame(1));
  Cache c({.max_parked_bytes_per_destination = 3 * frame, .max_parked_bytes_total = 5 * frame});
  for (int i = 0; i < 3; ++i) CHECK(c.cache.park(peer_ip, parkable_frame(1), 0) == ParkResult::queued);
  CHECK(c.cache.park(peer_ip, parkable_frame(1), 0) == ParkResult::dropped_destination_full);
  CHECK(c.cache.park(other_ip, parkable_frame(2), 0) == ParkResult::queued);
  CHECK(c.cache.park(other_ip, parkable_frame(2), 0) == ParkResult::queued);
  CHECK(c.cache.park(other_ip, parkable_frame(2), 0) == ParkResult::dropped_total_full);
  CHECK(c.cache.park(0x0a000077, parkable_frame(3), 0) == ParkResult::dropped_total_full);
  CHECK(c.cache.park(0x0a000077, Bytes(5, 0), 0) == ParkResult::dropped_too_short);
  CHECK(c.cache.parked() == 5);
  CHECK(c.cache.parked_bytes() == 5 * frame);
  CHECK(c.counters.arp_parked == 5);
  CHECK(c.counters.arp_parked_dropped == 4);

  // Releasing frees room.
  c.cache.learn(peer_ip, peer_mac, 1, c.out);
  CHECK(c.cache.parked() == 2);
  CHECK(c.cache.parked_bytes() == 2 * frame);
  CHECK(c.cache.park(other_ip, parkable_frame(2), 2) == ParkResult::queued);
}

TEST_CASE("the limit is in bytes, as Linux's unres_qlen_bytes: many small frames, fewer large ones",
          "[arp_cache]") {
  Cache c;  // the defaults: 212992 bytes per destination
  // A burst of 1078-byte frames (RDMA WRITE packets at path MTU 1024): as many as fit in 212992 bytes, the
  // newest dropped once they are full. 16 of them used to be the limit.
  const size_t large = held(parkable_frame(1, 1078));
  size_t queued = 0;
  while (c.cache.park(peer_ip, parkable_frame(1, 1078), 0) == ParkResult::queued) ++queued;
  CHECK(queued == 212992 / large);
  CHECK(queued > 180);
  // A small frame still fits in what is left, a large one did not.
  REQUIRE(212992 - queued * large >= held(parkable_frame(2)));
  CHECK(c.cache.park(peer_ip, parkable_frame(2), 0) == ParkResult::queued);

  // 64-byte datagrams to another peer: many more of them.
  queued = 0;
  while (c.cache.park(other_ip, parkable_frame(3), 0) == ParkResult::queued) ++queued;
  CHECK(queued == 212992 / held(parkable_frame(3)));

  // All of them leave, in order, once the peer answers, and the bytes are free again.
  c.cache.learn(peer_ip, peer_mac, 1, c.out);
  REQUIRE(c.out.frames.size() == 212992 / large + 1);
  CHECK(c.out.frames.front().size() == 1078);
  CHECK(c.out.frames.back().size() == 64);
  CHECK(get_mac(&c.out.frames.back()[0]) == peer_mac);
  CHECK(c.cache.parked_bytes() == queued * held(parkable_frame(3)));
}

TEST_CASE("a full cache evicts the resolved entry closest to expiry, never a resolution", "[arp_cache]") {
  Cache c({.max_entries = 2});
  c.cache.learn(0x0a000010, peer_mac, seconds(1), c.out);
  c.cache.learn(0x0a000011, other_mac, seconds(2), c.out);
  c.cache.learn(0x0a000012, peer_mac, seconds(3), c.out);  // evicts .16, learned first
  CHECK(c.cache.entries() == 2);
  CHECK_FALSE(c.cache.lookup(0x0a000010, seconds(3)).has_value());
  CHECK(c.cache.lookup(0x0a000011, seconds(3)) == other_mac);

  CHECK(c.cache.park(0x0a000020, parkable_frame(1), seconds(3)) == ParkResult::queued);  // evicts .17
  CHECK(c.cache.park(0x0a000021, parkable_frame(1), seconds(3)) == ParkResult::queued);  // evicts .18
  CHECK(c.cache.park(0x0a000022, parkable_frame(1), seconds(3)) == ParkResult::dropped_cache_full);
  c.cache.learn(0x0a000030, peer_mac, seconds(3), c.out);  // no room either: not learned
  CHECK_FALSE(c.cache.lookup(0x0a000030, seconds(3)).has_value());
  CHECK(c.cache.resolving(0x0a000020));
  CHECK(c.cache.resolving(0x0a000021));
}

TEST_CASE("an entry in use is probed by unicast before it expires", "[arp_cache]") {
  Cache c;
  c.cache.learn(peer_ip, peer_mac, 0, c.out);
  CHECK(c.cache.next_deadline() == seconds(60));
  REQUIRE(c.cache.lookup(peer_ip, seconds(10)) == peer_mac);  // in use: probing starts at 57 s
  CHECK(c.cache.next_deadline() == seconds(57));
  CHECK(c.poll(seconds(57) - 1).frames.empty());

  SECTION("the peer answers: the entry lives on, traffic never stalls") {
    REQUIRE(c.poll(seconds(57)).frames.size() == 1);
    CHECK(is_request_for(c.out.frames[0], peer_ip, peer_mac));
    CHECK(c.counters.arp_probes_sent == 1);
    c.cache.learn(peer_ip, peer_mac, seconds(57) + milliseconds(1), c.out);
    CHECK(c.cache.lookup(peer_ip, seconds(100)) == peer_mac);
    // next_deadline() may come early (the probe that was due at 58 s), never late; a poll settles it.
    CHECK(c.cache.next_deadline() <= seconds(58));
    CHECK(c.poll(seconds(100)).frames.empty());
    CHECK(c.cache.next_deadline() == seconds(114) + milliseconds(1));
  }
  SECTION("the peer is silent: three probes, then the entry expires") {
    CHECK(c.poll(seconds(57)).frames.size() == 1);
    CHECK(c.poll(seconds(58) - 1).frames.empty());
    CHECK(c.poll(seconds(58)).frames.size() == 1);
    CHECK(c.poll(seconds(59)).frames.size() == 1);
    CHECK(c.cache.next_deadline() == seconds(60));
    CHECK(c.poll(seconds(60)).frames.empty());
    CHECK(c.counters.arp_probes_sent == 3);
    CHECK(c.counters.arp_requests_sent == 0);
    CHECK(c.counters.arp_entries_expired == 1);
    CHECK_FALSE(c.cache.lookup(peer_ip, seconds(60)).has_value());
    // The next packet resolves afresh, by broadcast.
    CHECK(c.cache.park(peer_ip, parkable_frame(1), seconds(61)) == ParkResult::queued);
    REQUIRE(c.poll(seconds(61)).frames.size() == 1);
    CHECK(is_request_for(c.out.frames[0], peer_ip, MacAddress::broadcast()));
  }
}

TEST_CASE("an expired entry not yet swept is resolved again when a packet is parked for it", "[arp_cache]") {
  Cache c;
  c.cache.learn(peer_ip, peer_mac, 0, c.out);
  CHECK(c.cache.park(peer_ip, parkable_frame(1), seconds(61)) == ParkResult::queued);
  CHECK(c.counters.arp_entries_expired == 1);
  REQUIRE(c.poll(seconds(61)).frames.size() == 1);
  CHECK(is_request_for(c.out.frames[0], peer_ip, MacAddress::broadcast()));
  c.out.clear();
  c.cache.learn(peer_ip, other_mac, seconds(62), c.out);
  REQUIRE(c.out.frames.size() == 1);
  CHECK(get_mac(c.out.frames[0].data()) == other_mac);
}

TEST_CASE("a frame parked for a peer already known leaves at the next poll", "[arp_cache]") {
  Cache c;
  c.cache.learn(peer_ip, peer_mac, 0, c.out);
  const Bytes p = parkable_frame(4);
  CHECK(c.cache.park(peer_ip, p, 1) == ParkResult::ready);
  CHECK(c.cache.next_deadline() == 1);
  const ArpOutput& o = c.poll(1);
  REQUIRE(o.frames.size() == 1);
  CHECK(get_mac(o.frames[0].data()) == peer_mac);
  CHECK(std::equal(p.begin() + 6, p.end(), o.frames[0].begin() + 6));
  CHECK(c.cache.parked() == 0);
  CHECK(c.counters.arp_parked_released == 1);
}

TEST_CASE("requests come from our address nearest the peer, with the port's VLAN tag", "[arp_cache]") {
  Cache c({}, test_port(0x0123));
  c.cache.park(0xc0a80107, parkable_frame(1), 0);  // 192.168.1.7: our 192.168.1.1 speaks
  const ArpOutput& o = c.poll(0);
  REQUIRE(o.frames.size() == 1);
  const Bytes& f = o.frames[0];
  REQUIRE(f.size() == 46);
  CHECK(get16(&f[12]) == 0x8100);
  CHECK(get16(&f[14]) == 0x0123);
  CHECK(get16(&f[16]) == 0x0806);
  CHECK(get32(&f[18 + 14]) == our_ip2);
  CHECK(get32(&f[18 + 24]) == 0xc0a80107);

  PortAddresses v6_only;
  v6_only.mac = our_mac;
  Cache none({}, v6_only);
  none.cache.park(peer_ip, parkable_frame(1), 0);
  REQUIRE(none.poll(0).frames.size() == 1);
  CHECK(get32(&none.out.frames[0][28]) == 0);  // no IPv4 address: an RFC 5227 probe
}

TEST_CASE("resolve() starts a resolution with nothing parked and says when the peer is known", "[arp_cache]") {
  Cache c;
  CHECK(c.cache.resolve(our_ip, 0));  // our own address: known, nothing sent
  CHECK(c.cache.next_deadline() == never);

  const Nanos t0 = seconds(1);
  CHECK_FALSE(c.cache.resolve(peer_ip, t0));
  CHECK(c.cache.resolving(peer_ip));
  CHECK(c.cache.next_deadline() == t0);
  const auto first = c.poll(t0).frames;
  REQUIRE(first.size() == 1);
  CHECK(is_request_for(first[0], peer_ip, MacAddress::broadcast()));
  // Asking again while it runs keeps its schedule: no second request before the retry interval.
  CHECK_FALSE(c.cache.resolve(peer_ip, t0 + 1));
  CHECK(c.poll(t0 + 1).frames.empty());

  c.cache.learn(peer_ip, peer_mac, t0 + seconds(1) / 2, c.out);
  CHECK(c.out.frames.empty());  // nothing was parked
  CHECK(c.cache.resolve(peer_ip, t0 + seconds(1) / 2));
  CHECK(c.counters.arp_parked == 0);

  SECTION("a peer that never answers: the resolution fails, and a new resolve() starts another") {
    Cache u;
    CHECK_FALSE(u.cache.resolve(peer_ip, 0));
    for (int i = 0; i <= 3; ++i) u.poll(seconds(i));
    CHECK(u.counters.arp_requests_sent == 3);
    CHECK(u.counters.arp_resolution_failures == 1);
    CHECK_FALSE(u.cache.resolving(peer_ip));
    CHECK_FALSE(u.cache.resolve(peer_ip, seconds(4)));
    CHECK(u.poll(seconds(4)).frames.size() == 1);
  }
}
