// The virtual clock: exact delivery times under delay and bandwidth, ordering, jitter, deadlines, the
// run loops, and what happens when an endpoint never settles.
#include <catch2/catch.hpp>

#include "sim_test_support.hpp"

using namespace uroce;
using namespace uroce::sim;
using namespace uroce::sim::test;

namespace {
// Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 16 payload + ICRC 4.
constexpr size_t frame16_v4 = 74;
}  // namespace

TEST_CASE("delivery time is serialization plus delay, and a busy link queues", "[sim][timing]") {
  Pair p(1);
  LinkProfile prof;
  prof.delay = 1000;
  prof.bandwidth = 125'000'000;  // 1 Gb/s: 8 ns per byte
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 0, 0, 3);          // a burst of three at t=0
  p.a.stream(to(p.b_ip), 10'000, 0, 1, 16, 3);  // one more once the link is idle again
  CHECK(p.net.run_until_idle(never));

  REQUIRE(p.b.received.size() == 4);
  const Nanos ser = frame16_v4 * 8;
  CHECK(p.b.received[0].size == frame16_v4);
  CHECK(p.b.received[0].at == 1 * ser + 1000);
  CHECK(p.b.received[1].at == 2 * ser + 1000);
  CHECK(p.b.received[2].at == 3 * ser + 1000);
  CHECK(p.b.received[3].at == 10'000 + ser + 1000);
  CHECK(p.net.now() == 10'000 + ser + 1000);
  for (uint32_t i = 0; i < 4; ++i) {
    CHECK(p.b.received[i].good());
    CHECK(p.b.received[i].psn == i);
  }
  const LinkStats s = p.net.link_stats(p.na, p.nb);
  CHECK(s.frames_sent == 4);
  CHECK(s.frames_delivered == 4);
  CHECK(s.bytes_sent == 4 * frame16_v4);
  CHECK(s.bytes_delivered == 4 * frame16_v4);
  CHECK(s.max_queue_bytes == 3 * frame16_v4);
  CHECK(p.net.link_stats(p.nb, p.na).frames_sent == 0);
}

TEST_CASE("serialization time rounds up to whole nanoseconds", "[sim][timing]") {
  CHECK(serialization_time(74, 0) == 0);
  CHECK(serialization_time(74, 1'000'000'000) == 74);
  CHECK(serialization_time(1, 3'000'000'000) == 1);  // 0.33 ns
  CHECK(serialization_time(3, 3'000'000'000) == 1);
  CHECK(serialization_time(4, 3'000'000'000) == 2);
}

TEST_CASE("without jitter frames arrive in the order sent, after exactly the delay", "[sim][timing]") {
  Pair p(2);
  LinkProfile prof;
  prof.delay = 5000;
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 100, 100, 1000);
  CHECK(p.net.run_until_idle(never));
  REQUIRE(p.b.received.size() == 1000);
  for (uint32_t i = 0; i < 1000; ++i) {
    CHECK(p.b.received[i].psn == i);
    CHECK(p.b.received[i].at == 100 + 100 * Nanos(i) + 5000);
  }
}

TEST_CASE("jitter reorders, within [delay, delay + jitter]", "[sim][timing]") {
  Pair p(3);
  LinkProfile prof;
  prof.delay = 2000;
  prof.jitter = 20'000;
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 0, 1000, 1000);
  CHECK(p.net.run_until_idle(never));
  REQUIRE(p.b.received.size() == 1000);
  size_t late = 0;
  uint32_t highest = 0;
  std::set<uint32_t> seen;
  for (size_t i = 0; i < p.b.received.size(); ++i) {
    const Received& r = p.b.received[i];
    const Nanos sent = Nanos(r.psn) * 1000;
    CHECK(r.at >= sent + 2000);
    CHECK(r.at <= sent + 2000 + 20'000);
    if (i > 0 && r.psn < highest) ++late;
    highest = std::max(highest, r.psn);
    if (i > 0) CHECK(r.at >= p.b.received[i - 1].at);
    seen.insert(r.psn);
  }
  CHECK(seen.size() == 1000);
  CHECK(late > 100);  // jitter of 20 frame intervals reorders a lot
}

TEST_CASE("an endpoint's deadline gets run() at exactly that time, and only then", "[sim][timing]") {
  Pair p(4);
  p.a.alarm(12'345);
  p.a.alarm(20'000);
  p.a.alarm(20'001);
  CHECK(p.net.next_event_time() == 12'345);
  p.net.run_until(15'000);
  CHECK(p.net.now() == 15'000);
  CHECK(p.a.alarms_fired == std::vector<Nanos>{12'345});
  CHECK(p.net.next_event_time() == 20'000);
  CHECK(p.net.step());
  CHECK(p.net.now() == 20'000);
  CHECK(p.net.run_until_idle(never));
  CHECK(p.net.now() == 20'001);
  CHECK(p.a.alarms_fired == std::vector<Nanos>{12'345, 20'000, 20'001});
  CHECK(p.a.runs == std::vector<Nanos>{12'345, 20'000, 20'001});
  CHECK(p.b.runs.empty());  // b never had anything to do
  CHECK_FALSE(p.net.step());
  CHECK(p.net.next_event_time() == never);
}

TEST_CASE("a frame and a deadline at the same instant: frames first, then run", "[sim][timing]") {
  Pair p(5);
  LinkProfile prof;
  prof.delay = 1000;
  p.net.set_default_profile(prof);
  p.a.send(to(p.b_ip), 1);  // at t=0, outside any step: stamped with now()
  p.b.alarm(1000);
  CHECK(p.net.step());
  CHECK(p.net.now() == 1000);
  REQUIRE(p.b.received.size() == 1);
  CHECK(p.b.received[0].at == 1000);
  CHECK(p.b.runs == std::vector<Nanos>{1000});
}

TEST_CASE("pending work is served at the same instant: an echo costs one round trip of delay", "[sim][timing]") {
  Pair p(6);
  LinkProfile prof;
  prof.delay = 1000;
  p.net.set_default_profile(prof);
  p.b.echo_sends = true;
  p.a.stream(to(p.b_ip), 500, 0, 1);
  CHECK(p.net.run_until_idle(never));
  REQUIRE(p.a.received.size() == 1);
  CHECK(p.a.received[0].opcode == op_ack);
  CHECK(p.a.received[0].at == 2500);
  CHECK(p.b.runs == std::vector<Nanos>{1500});
}

TEST_CASE("zero delay: the reply arrives in a later round of the same instant", "[sim][timing]") {
  Pair p(7);
  p.b.echo_sends = true;
  p.a.stream(to(p.b_ip), 42, 0, 3);
  CHECK(p.net.step());
  CHECK(p.net.now() == 42);
  CHECK(p.b.received.size() == 3);
  CHECK(p.a.received.size() == 3);
  CHECK(p.net.frames_in_flight() == 0);
  CHECK(p.net.stats().max_rounds_in_an_instant >= 2);
  CHECK_FALSE(p.net.step());
}

TEST_CASE("an endpoint that never settles is reported, not spun on forever", "[sim][timing][livelock]") {
  Pair p(8);
  p.net.set_max_rounds_per_instant(50);
  p.a.alarm(777);
  p.b.stuck = true;
  CHECK(p.net.next_event_time() == 0);
  try {
    p.net.step();
    FAIL("expected SimLivelock");
  } catch (const SimLivelock& e) {
    CHECK(e.time == 0);
    CHECK(std::string(e.what()).find("node 1 (b)") != std::string::npos);
    CHECK(std::string(e.what()).find("node 0") == std::string::npos);
  }
  CHECK(p.b.runs.size() == 50);
  CHECK(p.net.stats().max_rounds_in_an_instant == 50);
  // Once it settles the network carries on.
  p.b.stuck = false;
  CHECK(p.net.run_until_idle(never));
  CHECK(p.a.alarms_fired == std::vector<Nanos>{777});
}

TEST_CASE("a zero-delay ping-pong is a livelock; with any delay time moves on", "[sim][timing][livelock]") {
  {
    Pair p(9);
    p.net.set_max_rounds_per_instant(1000);
    p.a.echo_all = p.b.echo_all = true;
    p.a.send(to(p.b_ip), 0);
    CHECK_THROWS_AS(p.net.run_until(1'000'000), SimLivelock);
    CHECK(p.net.now() == 0);
  }
  {
    Pair p(9);
    LinkProfile prof;
    prof.delay = 1;
    p.net.set_default_profile(prof);
    p.a.echo_all = p.b.echo_all = true;
    p.a.send(to(p.b_ip), 0);
    p.net.run_until(1000);
    CHECK(p.net.now() == 1000);
    CHECK(p.a.received.size() + p.b.received.size() == 1000);
    CHECK_FALSE(p.net.run_until_idle(5000));  // never idle: a frame is always in flight
    CHECK(p.net.now() == 5000);
  }
}

TEST_CASE("run_until_idle separates frames in flight from far timers", "[sim][timing]") {
  Pair p(10);
  LinkProfile prof;
  prof.delay = 10'000;
  p.net.set_default_profile(prof);
  p.a.send(to(p.b_ip), 1);
  p.a.alarm(1'000'000);
  CHECK_FALSE(p.net.run_until_idle(5000));  // the frame lands at 10000
  CHECK(p.net.now() == 5000);
  CHECK(p.b.received.empty());
  CHECK(p.net.run_until_idle(50'000));      // only a timer beyond the limit remains
  CHECK(p.net.now() == 10'000);
  CHECK(p.b.received.size() == 1);
  CHECK(p.a.alarms_fired.empty());
  CHECK(p.net.run_until_idle(never));
  CHECK(p.net.now() == 1'000'000);
}

TEST_CASE("run_while stops at the event that made the condition false", "[sim][timing]") {
  Pair p(11);
  LinkProfile prof;
  prof.delay = 300;
  p.net.set_default_profile(prof);
  p.a.stream(to(p.b_ip), 0, 1000, 10);
  CHECK(p.net.run_while([&] { return p.b.received.size() < 5; }, never));
  CHECK(p.b.received.size() == 5);
  CHECK(p.net.now() == 4300);
  CHECK_FALSE(p.net.run_while([&] { return p.b.received.size() < 100; }, 7000));
  CHECK(p.net.now() == 7000);
  CHECK(p.b.received.size() == 7);
  CHECK_FALSE(p.net.run_while([&] { return p.b.received.size() < 100; }, never));  // idle forever
  CHECK(p.b.received.size() == 10);
  CHECK(p.net.run_while([] { return false; }, 0));
}

TEST_CASE("run_until moves the clock even when nothing happens", "[sim][timing]") {
  Pair p(12);
  p.net.run_until(123);
  CHECK(p.net.now() == 123);
  p.net.run_until(100);  // never backwards
  CHECK(p.net.now() == 123);
  CHECK_FALSE(p.net.step());
}
