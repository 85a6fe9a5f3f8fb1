// The IPv6 neighbour cache on an injected clock: resolution by multicast NS with ARP's timing and failure,
// parked frames released in order with the peer's MAC, learning from NA/NS, expiry, unicast probes of
// entries in use, the source address chosen, limits.
#include <catch2/catch.hpp>

#include "emulator/net/classify.hpp"
#include "emulator/net/nd_cache.hpp"
#include "net_test_support.hpp"

using namespace uroce;
using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

wire::IpAddress v6(const uint8_t* p) { return wire::IpAddress::from_v6_bytes(p); }
const wire::IpAddress peer = v6(peer_ip6);
const wire::IpAddress peer2 = v6(peer2_ip6);

using Cache = CacheFixture<NdCache, NdOutput, NdCacheConfig>;

// An NS from `src` for `target`: to its solicited-node group (multicast) or unicast to `unicast`, as the
// target sees it (classified by a port owning the target), carrying our MAC as its source option.
bool is_solicitation_for(const Bytes& f, const wire::IpAddress& target, std::optional<MacAddress> unicast = {},
                         const wire::IpAddress& src = v6(our_ip6)) {
  PortAddresses target_port;
  target_port.mac = unicast.value_or(peer_mac);
  target_port.ips = {target};
  const Classification c = classify(std::span<const uint8_t>(f), target_port);
  const wire::IpAddress group = solicited_node_address(target);
  return c.kind == FrameClass::nd && c.nd.is_solicitation() && c.nd.target == target && c.nd.ip_src == src &&
         c.nd.lladdr == our_mac && get_mac(&f[6]) == our_mac &&
         (unicast ? get_mac(&f[0]) == *unicast && c.nd.ip_dst == target
                  : get_mac(&f[0]) == multicast_mac(group) && c.nd.ip_dst == group);
}

}  // namespace

TEST_CASE("nd cache: empty, it knows only our own addresses", "[nd_cache]") {
  Cache c;
  CHECK_FALSE(c.cache.lookup(peer, 0).has_value());
  CHECK(c.cache.lookup(v6(our_ip6), 0) == our_mac);
  CHECK_FALSE(c.cache.lookup(wire::IpAddress::from_v4(our_ip), 0).has_value());  // not an IPv6 address
  CHECK(c.cache.next_deadline() == never);
  CHECK(c.poll(seconds(100)).frames.empty());
}

TEST_CASE("nd cache: resolution sends max_requests solicitations retry_interval apart, then fails",
          "[nd_cache]") {
  Cache c;
  const Nanos t0 = seconds(3);
  REQUIRE(c.cache.park(peer, parkable_frame(1), t0) == ParkResult::queued);
  REQUIRE(c.cache.park(peer, parkable_frame(2), t0 + 5) == ParkResult::queued);
  CHECK(c.cache.resolving(peer));
  CHECK(c.cache.parked() == 2);
  CHECK(c.cache.next_deadline() == t0);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const Nanos t = t0 + seconds(attempt);
    INFO("attempt " << attempt);
    CHECK(c.poll(t - 1).frames.empty());
    const NdOutput& o = c.poll(t);
    REQUIRE(o.frames.size() == 1);
    CHECK(is_solicitation_for(o.frames[0], peer));
    CHECK(c.cache.next_deadline() == t + seconds(1));
    CHECK(c.counters.nd_solicitations_sent == unsigned(attempt + 1));
  }
  CHECK(c.poll(t0 + seconds(3) - 1).failed.empty());
  const NdOutput& o = c.poll(t0 + seconds(3));
  CHECK(o.frames.empty());
  REQUIRE(o.failed == std::vector<wire::IpAddress>{peer});
  CHECK(c.counters.nd_resolution_failures == 1);
  CHECK(c.counters.nd_parked == 2);
  CHECK(c.counters.nd_parked_dropped == 2);
  CHECK(c.cache.parked() == 0);
  CHECK(c.cache.entries() == 0);
  CHECK(c.cache.next_deadline() == never);
  // The ARP counters are not touched.
  CHECK(c.counters.arp_requests_sent == 0);
  CHECK(c.counters.arp_parked == 0);
}

TEST_CASE("nd cache: the same timing as the ARP cache for the same configuration", "[nd_cache]") {
  const NdCacheConfig config{.retry_interval = milliseconds(100), .max_requests = 2};
  Cache c(config);
  NetCounters arp_counters;
  ArpCache arp(test_port(), arp_counters, config);
  ArpOutput arp_out;
  c.cache.park(peer, parkable_frame(1), 0);
  arp.park(peer_ip, parkable_frame(1), 0);
  for (Nanos t = 0; t <= milliseconds(300); t += milliseconds(10)) {
    arp_out.clear();
    if (t >= arp.next_deadline()) arp.poll(t, arp_out);
    const NdOutput& o = c.poll(t);
    INFO("t = " << t);
    CHECK(o.frames.size() == arp_out.frames.size());
    CHECK(o.failed.size() == arp_out.failed.size());
    CHECK(c.cache.next_deadline() == arp.next_deadline());
  }
  CHECK(c.counters.nd_solicitations_sent == 2);
  CHECK(c.counters.nd_resolution_failures == 1);
}

TEST_CASE("nd cache: parked frames leave in order with the learned MAC", "[nd_cache]") {
  Cache c;
  std::vector<Bytes> sent;
  for (uint8_t i = 0; i < 4; ++i) {
    sent.push_back(parkable_frame(i, 60 + i));
    REQUIRE(c.cache.park(peer, sent.back(), milliseconds(i)) == ParkResult::queued);
  }
  c.cache.park(peer2, parkable_frame(9), 0);
  REQUIRE(c.poll(milliseconds(10)).frames.size() == 2);  // one NS each
  c.out.clear();
  c.cache.learn(peer, peer_mac, milliseconds(20), c.out);
  REQUIRE(c.out.frames.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    Bytes expected = sent[i];
    std::copy(peer_mac.bytes.begin(), peer_mac.bytes.end(), expected.begin());
    CHECK(c.out.frames[i] == expected);
  }
  CHECK(c.counters.nd_parked_released == 4);
  CHECK(c.cache.parked() == 1);
  CHECK(c.cache.resolving(peer2));
  CHECK(c.cache.lookup(peer, milliseconds(20)) == peer_mac);
  // Parked after the MAC is known: leaves at the next poll, MAC filled in.
  REQUIRE(c.cache.park(peer, parkable_frame(7), milliseconds(30)) == ParkResult::ready);
  const NdOutput& o = c.poll(milliseconds(30));
  REQUIRE(o.frames.size() == 1);
  CHECK(get_mac(o.frames[0].data()) == peer_mac);
}

TEST_CASE("nd cache: entries expire; one in use is probed with unicast NS before it does", "[nd_cache]") {
  Cache c;
  c.cache.learn(peer, peer_mac, 0, c.out);
  CHECK(c.cache.lookup(peer, seconds(60) - 1) == peer_mac);  // used
  // Probes start max_requests * retry_interval before expiry.
  CHECK(c.poll(seconds(57) - 1).frames.empty());
  const NdOutput& o = c.poll(seconds(57));
  REQUIRE(o.frames.size() == 1);
  CHECK(is_solicitation_for(o.frames[0], peer, peer_mac));
  CHECK(c.counters.nd_probes_sent == 1);
  // The peer answers: the entry lives on.
  c.out.clear();
  CHECK(c.cache.update_if_known(peer, peer_mac, seconds(57) + 1, c.out));
  CHECK(c.cache.lookup(peer, seconds(100)) == peer_mac);

  SECTION("an unused entry expires silently") {
    Cache u;
    u.cache.learn(peer, peer_mac, 0, u.out);
    CHECK(u.poll(seconds(60)).frames.empty());
    CHECK(u.cache.entries() == 0);
    CHECK(u.counters.nd_entries_expired == 1);
    CHECK(u.counters.nd_probes_sent == 0);
  }
}

TEST_CASE("nd cache: update_if_known creates nothing", "[nd_cache]") {
  Cache c;
  CHECK_FALSE(c.cache.update_if_known(peer, peer_mac, 0, c.out));
  CHECK(c.cache.entries() == 0);
  c.cache.park(peer, parkable_frame(1), 0);
  CHECK(c.cache.update_if_known(peer, peer_mac, 1, c.out));
  CHECK(c.out.frames.size() == 1);
}

TEST_CASE("nd cache: limits drop the newest frame and count it", "[nd_cache]") {
  const size_t frame = held(parkable_frame(1));
  Cache c({.max_parked_bytes_per_destination = 2 * frame, .max_parked_bytes_total = 3 * frame});
  CHECK(c.cache.park(peer, parkable_frame(1), 0) == ParkResult::queued);
  CHECK(c.cache.park(peer, parkable_frame(2), 0) == ParkResult::queued);
  CHECK(c.cache.park(peer, parkable_frame(3), 0) == ParkResult::dropped_destination_full);
  CHECK(c.cache.park(peer2, parkable_frame(4), 0) == ParkResult::queued);
  CHECK(c.cache.park(peer2, parkable_frame(5), 0) == ParkResult::dropped_total_full);
  CHECK(c.cache.park(peer2, Bytes(3), 0) == ParkResult::dropped_too_short);
  CHECK(c.counters.nd_parked_dropped == 3);
  CHECK(c.counters.nd_parked == 3);
}

TEST_CASE("nd cache: solicitations come from the best-matching address of ours", "[nd_cache]") {
  PortAddresses p = test_port();
  const uint8_t other_net[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const wire::IpAddress ll = link_local_from_mac(our_mac);
  p.ips.push_back(v6(other_net));
  p.ips.push_back(ll);
  Cache c({}, p);
  CHECK(c.cache.source_for(peer) == v6(our_ip6));
  const uint8_t other_peer[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42};
  CHECK(c.cache.source_for(v6(other_peer)) == v6(other_net));
  const wire::IpAddress peer_ll = link_local_from_mac(peer_mac);
  CHECK(c.cache.source_for(peer_ll) == ll);
  c.cache.park(peer_ll, parkable_frame(1), 0);
  const NdOutput& o = c.poll(0);
  REQUIRE(o.frames.size() == 1);
  CHECK(is_solicitation_for(o.frames[0], peer_ll, std::nullopt, ll));
}
