// Loss, duplication, corruption, queue limits and blackholes: rates within statistical bounds for a fixed
// seed, exact reproducibility, and the invariants the counters must keep.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "sim_test_support.hpp"

using namespace uroce;
using namespace uroce::sim;
using namespace uroce::sim::test;

namespace {

constexpr size_t frame16_v4 = 74;

// `n` standard deviations of a binomial count around its mean.
bool within_sigmas(uint64_t count, uint64_t trials, double p, double n = 5) {
  const double mean = double(trials) * p;
  const double sigma = std::sqrt(double(trials) * p * (1 - p));
  return std::fabs(double(count) - mean) <= n * sigma;
}

struct Trace {
  std::vector<std::pair<Nanos, uint32_t>> arrivals;
  NetworkStats stats;
};

Trace run_lossy(uint64_t seed, uint32_t frames, const LinkProfile& prof) {
  Pair p(seed);
  p.b.keep_bytes = false;
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 0, 100, frames);
  REQUIRE(p.net.run_until_idle(never));
  Trace t;
  for (const Received& r : p.b.received) t.arrivals.emplace_back(r.at, r.psn);
  t.stats = p.net.stats();
  return t;
}

std::set<uint32_t> lost_psns(const Trace& t, uint32_t frames) {
  std::set<uint32_t> lost;
  for (uint32_t i = 0; i < frames; ++i) lost.insert(i);
  for (const auto& a : t.arrivals) lost.erase(a.second);
  return lost;
}

void check_conservation(const NetworkStats& s, size_t in_flight) {
  INFO("sent " << s.links.frames_sent << " dup " << s.links.duplicated << " delivered " << s.links.frames_delivered
               << " dropped " << s.links.frames_dropped());
  CHECK(s.links.frames_sent + s.links.duplicated == s.links.frames_delivered + s.links.frames_dropped() + in_flight);
  CHECK(s.transmitted == s.links.frames_sent + s.dropped_unknown_destination + s.dropped_invalid);
}

}  // namespace

TEST_CASE("loss over 100k frames is within bounds and exactly reproducible from the seed", "[sim][loss]") {
  constexpr uint32_t n = 100'000;
  LinkProfile prof;
  prof.delay = 1000;
  prof.loss = 0.1;
  const Trace t1 = run_lossy(2024, n, prof);
  const uint64_t lost = n - t1.arrivals.size();
  CHECK(within_sigmas(lost, n, 0.1));
  CHECK(t1.stats.links.dropped_loss == lost);
  CHECK(t1.stats.links.frames_sent == n);
  CHECK(t1.stats.frames_dropped() == lost);
  check_conservation(t1.stats, 0);

  const Trace t2 = run_lossy(2024, n, prof);
  CHECK(t1.arrivals == t2.arrivals);  // the same frames lost, the same times
  const Trace other = run_lossy(2025, n, prof);
  CHECK(other.arrivals != t1.arrivals);
  CHECK(within_sigmas(n - other.arrivals.size(), n, 0.1));
}

TEST_CASE("a link's losses do not depend on jitter, and more loss only adds losses", "[sim][loss]") {
  constexpr uint32_t n = 20'000;
  LinkProfile prof;
  prof.loss = 0.05;
  const std::set<uint32_t> base = lost_psns(run_lossy(99, n, prof), n);
  LinkProfile jittery = prof;
  jittery.jitter = 50'000;
  jittery.duplicate = 0.1;
  const Trace jt = run_lossy(99, n, jittery);
  CHECK(lost_psns(jt, n) == base);
  CHECK(jt.arrivals.size() == n - base.size() + jt.stats.links.duplicated);

  LinkProfile worse = prof;
  worse.loss = 0.2;
  const std::set<uint32_t> more = lost_psns(run_lossy(99, n, worse), n);
  CHECK(std::includes(more.begin(), more.end(), base.begin(), base.end()));
  CHECK(within_sigmas(more.size(), n, 0.2));
}

TEST_CASE("duplication delivers some frames twice", "[sim][duplication]") {
  constexpr uint32_t n = 20'000;
  LinkProfile prof;
  prof.delay = 500;
  prof.duplicate = 0.25;
  const Trace t = run_lossy(5, n, prof);
  const uint64_t dups = t.stats.links.duplicated;
  CHECK(within_sigmas(dups, n, 0.25));
  CHECK(t.arrivals.size() == n + dups);
  CHECK(t.stats.links.frames_delivered == n + dups);
  std::map<uint32_t, int> copies;
  for (const auto& a : t.arrivals) ++copies[a.second];
  CHECK(copies.size() == n);
  uint64_t twice = 0;
  for (const auto& [psn, c] : copies) {
    CHECK(c <= 2);
    twice += c == 2;
  }
  CHECK(twice == dups);
  check_conservation(t.stats, 0);
}

TEST_CASE("every corrupted frame is caught by the receiver's parse and ICRC check", "[sim][corruption]") {
  for (bool v6 : {false, true}) {
    Pair p(31337, v6 ? ip("2001:db8::a") : ip4(10, 0, 0, 1), v6 ? ip("2001:db8::b") : ip4(10, 0, 0, 2));
    p.b.keep_bytes = false;
    LinkProfile prof;
    prof.delay = 100;
    prof.jitter = 1000;
    prof.corrupt = 0.3;
    prof.duplicate = 0.1;  // copies are corrupted independently
    p.net.set_default_profile(prof);
    constexpr uint32_t n = 20'000;
    p.a.stream(to(p.b_ip), 0, 50, n, 29);  // 29: a payload with a pad
    REQUIRE(p.net.run_until_idle(never));
    const LinkStats s = p.net.link_stats(p.na, p.nb);
    const size_t bad = p.b.received.size() - p.b.good_count();
    INFO("IPv" << (v6 ? 6 : 4));
    CHECK(s.corrupted == bad);
    CHECK(within_sigmas(s.corrupted, n + s.duplicated, 0.3));
    CHECK(p.b.received.size() == n + s.duplicated);
  }
}

TEST_CASE("corruption anywhere in the frame is not always detectable", "[sim][corruption]") {
  Pair p(31337);
  p.b.keep_bytes = false;
  LinkProfile prof;
  prof.corrupt = 0.5;
  prof.corrupt_scope = CorruptionScope::anywhere;
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 0, 50, 5000);
  REQUIRE(p.net.run_until_idle(never));
  const uint64_t corrupted = p.net.stats().links.corrupted;
  const size_t bad = p.b.received.size() - p.b.good_count();
  CHECK(bad > 0);
  CHECK(bad < corrupted);  // MAC addresses, TTL, FECN/BECN... flipped without a trace
}

TEST_CASE("a byte-limited queue tail-drops, and accepts again as it drains", "[sim][queue]") {
  Pair p(77);
  LinkProfile prof;
  prof.delay = 100;
  prof.bandwidth = 100'000'000;  // 10 ns per byte
  prof.queue_limit = 3 * frame16_v4;
  p.net.set_default_profile(prof);
  const Nanos ser = frame16_v4 * 10;
  p.a.stream(to(p.b_ip), 0, 0, 10);           // 3 fit, 7 are dropped
  p.a.stream(to(p.b_ip), ser, 0, 2, 16, 100);  // the first finished: room for exactly one
  REQUIRE(p.net.run_until_idle(never));
  const LinkStats s = p.net.link_stats(p.na, p.nb);
  CHECK(s.frames_sent == 12);
  CHECK(s.dropped_queue_full == 8);
  CHECK(s.frames_delivered == 4);
  CHECK(s.max_queue_bytes == 3 * frame16_v4);
  REQUIRE(p.b.received.size() == 4);
  CHECK(p.b.received[0].psn == 0);
  CHECK(p.b.received[1].psn == 1);
  CHECK(p.b.received[2].psn == 2);
  CHECK(p.b.received[3].psn == 100);
  CHECK(p.b.received[3].at == 4 * ser + 100);
}

TEST_CASE("a queue limit means nothing without a bandwidth: the queue never builds", "[sim][queue]") {
  Pair p(78);
  LinkProfile prof;
  prof.queue_limit = frame16_v4;
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 0, 0, 100);
  REQUIRE(p.net.run_until_idle(never));
  CHECK(p.b.received.size() == 100);
  CHECK(p.net.link_stats(p.na, p.nb).max_queue_bytes == 0);
}

TEST_CASE("blackholed links and nodes drop everything, in flight included", "[sim][blackhole]") {
  Pair p(3);
  LinkProfile prof;
  prof.delay = 10'000;
  p.net.set_default_profile(prof);

  SECTION("one direction of a link") {
    LinkProfile dead = prof;
    dead.blackhole = true;
    p.net.set_link_profile(p.na, p.nb, dead);
    p.a.send(to(p.b_ip), 1);
    p.b.send(to(p.a_ip), 2);
    REQUIRE(p.net.run_until_idle(never));
    CHECK(p.b.received.empty());
    CHECK(p.a.received.size() == 1);
    CHECK(p.net.link_stats(p.na, p.nb).dropped_blackhole == 1);
    p.net.clear_link_profile(p.na, p.nb);
    CHECK(p.net.link_profile(p.na, p.nb).delay == 10'000);
    CHECK_FALSE(p.net.link_profile(p.na, p.nb).blackhole);
    p.a.send(to(p.b_ip), 3);
    REQUIRE(p.net.run_until_idle(never));
    CHECK(p.b.received.size() == 1);
  }
  SECTION("a dead node, also for frames already on the way") {
    p.a.send(to(p.b_ip), 1);  // lands at 10000
    p.net.run_until(5000);
    p.net.set_node_blackholed(p.nb, true);
    CHECK(p.net.node_blackholed(p.nb));
    p.a.send(to(p.b_ip), 2);
    p.b.send(to(p.a_ip), 3);
    p.b.alarm(6000);  // a dead peer's engine still runs
    REQUIRE(p.net.run_until_idle(never));
    CHECK(p.b.received.empty());
    CHECK(p.a.received.empty());
    CHECK(p.b.alarms_fired == std::vector<Nanos>{6000});
    CHECK(p.net.stats().links.dropped_blackhole == 3);
    p.net.set_node_blackholed(p.nb, false);
    p.a.send(to(p.b_ip), 4);
    REQUIRE(p.net.run_until_idle(never));
    REQUIRE(p.b.received.size() == 1);
    CHECK(p.b.received[0].psn == 4);
  }
  SECTION("a node without an endpoint") {
    const NodeId ghost = p.net.add_node({.addresses = {ip4(10, 0, 0, 9)}, .mac = {}, .name = "ghost"});
    p.a.send(to(ip4(10, 0, 0, 9)), 1);
    REQUIRE(p.net.run_until_idle(never));
    CHECK(p.net.link_stats(p.na, ghost).dropped_blackhole == 1);
  }
}

TEST_CASE("profile changes apply to frames sent afterwards", "[sim][profile]") {
  Pair p(4);
  LinkProfile prof;
  prof.delay = 1000;
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 0, 100, 100);  // sent 0..9900
  p.net.run_until(4950);                // 50 sent, 40 arrived
  CHECK(p.b.received.size() == 40);
  LinkProfile cut = prof;
  cut.loss = 1;
  cut.delay = 5;  // a faster path too: does not overtake what is already on the wire
  p.net.set_path_profile(p.na, p.nb, cut);
  REQUIRE(p.net.run_until_idle(never));
  CHECK(p.b.received.size() == 50);
  CHECK(p.b.received.back().psn == 49);
  CHECK(p.net.link_stats(p.na, p.nb).dropped_loss == 50);
}

TEST_CASE("the counters balance under every impairment at once", "[sim][stats]") {
  SimNetwork net(123);
  std::vector<std::unique_ptr<TestEndpoint>> eps;
  std::vector<NodeId> ids;
  for (uint8_t i = 0; i < 4; ++i) {
    eps.push_back(std::make_unique<TestEndpoint>());
    eps.back()->keep_bytes = false;
    eps.back()->echo_sends = true;
    ids.push_back(net.add_node(*eps.back(), ip4(10, 0, 1, uint8_t(i + 1))));
    eps.back()->attach(net.sink(ids.back()));
  }
  LinkProfile prof;
  prof.delay = 2000;
  prof.jitter = 3000;
  prof.loss = 0.05;
  prof.duplicate = 0.05;
  prof.corrupt = 0.05;
  prof.bandwidth = 1'000'000'000;
  prof.queue_limit = 1000;
  net.set_default_profile(prof);
  LinkProfile dead = prof;
  dead.blackhole = true;
  net.set_link_profile(ids[3], ids[0], dead);
  for (size_t i = 0; i < 4; ++i) {
    for (size_t j = 0; j < 4; ++j) {
      if (i != j) eps[i]->stream(to(ip4(10, 0, 1, uint8_t(j + 1))), 10 * i, 37, 2000, 8 * (j + 1));
    }
  }
  eps[0]->send(to(ip4(10, 9, 9, 9)), 0);  // nobody
  net.run_until(40'000);
  check_conservation(net.stats(), net.frames_in_flight());
  REQUIRE(net.run_until_idle(never));
  const NetworkStats s = net.stats();
  check_conservation(s, 0);
  CHECK(s.dropped_unknown_destination == 1);
  CHECK(s.links.dropped_loss > 0);
  CHECK(s.links.dropped_queue_full > 0);
  CHECK(s.links.dropped_blackhole > 0);
  CHECK(s.links.duplicated > 0);
  CHECK(s.links.corrupted > 0);
  uint64_t received = 0;
  for (const auto& e : eps) received += e->received.size();
  CHECK(received == s.links.frames_delivered);
  LinkStats sum;
  for (NodeId i : ids) {
    for (NodeId j : ids) sum += net.link_stats(i, j);
  }
  CHECK(sum.frames_sent == s.links.frames_sent);
  CHECK(sum.frames_delivered == s.links.frames_delivered);
}
