// The engine's idle back-off (poll, nap, sleep) and its clock, with the time passed in where it can be.
#include <catch2/catch.hpp>

#include "emulator/engine/back_off.hpp"
#include "emulator/engine/engine_clock.hpp"

namespace uroce::test::service {
namespace {

using emulator::engine::BackOff;
using emulator::engine::BackOffConfig;
using emulator::engine::EngineClock;
using Kind = BackOff::Kind;

constexpr transport::Nanos us = 1000;
constexpr transport::Nanos start = 1'000'000'000;  // any time but 0

BackOffConfig config() {
  BackOffConfig c;
  c.spin_ns = 5 * us;
  c.nap_ns = 20 * us;
  c.doze_ns = 1000 * us;
  c.max_sleep_ns = 500 * us;
  c.in_flight_sleep_ns = 20 * us;
  c.share_ns = 500'000 * us;  // shorter than the default, so that a test can outlast it
  c.yield_naps = false;       // timed naps; the yields have their own test
  return c;
}

}  // namespace

TEST_CASE("idle: poll, then naps, then sleeps that double up to the longest", "[back_off]") {
  BackOff b(config());
  CHECK(b.idle(start, transport::never, false).kind == Kind::poll);
  CHECK(b.idle(start + 4 * us, transport::never, false).kind == Kind::poll);
  const BackOff::Step nap = b.idle(start + 5 * us, transport::never, false);
  CHECK(nap.kind == Kind::nap);
  CHECK(nap.timeout_ns == 20 * us);
  CHECK(b.idle(start + 999 * us, transport::never, false).kind == Kind::nap);
  std::vector<uint64_t> sleeps;
  for (int i = 0; i < 8; ++i) {
    const BackOff::Step s = b.idle(start + 1000 * us + uint64_t(i) * us, transport::never, false);
    REQUIRE(s.kind == Kind::sleep);
    sleeps.push_back(s.timeout_ns / us);
  }
  CHECK(sleeps == std::vector<uint64_t>{10, 20, 40, 80, 160, 320, 500, 500});
}

TEST_CASE("work starts the idle period over", "[back_off]") {
  BackOff b(config());
  b.idle(start, transport::never, false);
  REQUIRE(b.idle(start + 2000 * us, transport::never, false).kind == Kind::sleep);
  b.rested();
  CHECK(b.busy(start + 2000 * us).kind == Kind::poll);
  CHECK(b.idle(start + 2001 * us, transport::never, false).kind == Kind::poll);
  CHECK(b.idle(start + 2006 * us, transport::never, false).kind == Kind::nap);
  CHECK(b.idle(start + 3001 * us, transport::never, false).timeout_ns == 10 * us);  // doubling from the start
}

TEST_CASE("no nap or sleep passes the next timer, and a due timer is polled", "[back_off]") {
  BackOff b(config());
  b.idle(start, transport::never, false);
  const BackOff::Step nap = b.idle(start + 10 * us, start + 17 * us, true);
  CHECK(nap.kind == Kind::nap);
  CHECK(nap.timeout_ns == 7 * us);
  CHECK(b.idle(start + 17 * us, start + 17 * us, true).kind == Kind::poll);
  CHECK(b.idle(start + 18 * us, start + 17 * us, true).kind == Kind::poll);
  const BackOff::Step sleep = b.idle(start + 1000 * us, start + 1003 * us, true);
  CHECK(sleep.kind == Kind::sleep);
  CHECK(sleep.timeout_ns == 3 * us);
}

TEST_CASE("while requests are in flight a sleep stays short", "[back_off]") {
  BackOff b(config());
  b.idle(start, transport::never, false);
  for (int i = 0; i < 6; ++i) {
    const BackOff::Step s = b.idle(start + 1000 * us + uint64_t(i), start + 5'000'000 * us, true);
    REQUIRE(s.kind == Kind::sleep);
    CHECK(s.timeout_ns <= 20 * us);
  }
}

TEST_CASE("nap_ns 0 polls until the doze, a doze beyond the test never sleeps", "[back_off]") {
  BackOffConfig c = config();
  c.nap_ns = 0;
  BackOff b(c);
  b.idle(start, transport::never, false);
  CHECK(b.idle(start + 500 * us, transport::never, false).kind == Kind::poll);
  CHECK(b.idle(start + 1000 * us, transport::never, false).kind == Kind::sleep);
  c = config();
  c.doze_ns = 600'000'000 * us;
  BackOff awake(c);
  awake.idle(start, transport::never, false);
  CHECK(awake.idle(start + 60'000'000 * us, transport::never, false).kind == Kind::nap);
}

TEST_CASE("a busy engine naps only once it was seen to share its core", "[back_off]") {
  BackOff b(config());
  // Alone on its core: busy turns back to back, never a nap, however long.
  for (transport::Nanos t = start; t < start + 50'000 * us; t += 10 * us) REQUIRE(b.busy(t).kind == Kind::poll);
  CHECK_FALSE(b.sharing(start + 50'000 * us));
  // A turn that starts 2 ms after the previous one, with no nap between: someone else had the core.
  const transport::Nanos later = start + 52'000 * us;
  CHECK(b.busy(later).kind == Kind::poll);
  CHECK(b.sharing(later));
  transport::Nanos t = later;
  while (b.busy(t += 10 * us).kind == Kind::poll) REQUIRE(t - later < 200 * us);
  CHECK(t - later >= 100 * us);  // a nap after each busy slice
  b.rested();
  CHECK(b.busy(t + 30 * us).kind == Kind::poll);  // the nap's own time is no preemption, the slice restarts
  CHECK(b.busy(t + 140 * us).kind == Kind::nap);
  b.rested();
  // Busy for a second more without being preempted again: alone again, no more naps.
  for (t += 140 * us; t < later + 1'000'000 * us; t += 50 * us) {
    if (b.busy(t).kind == Kind::nap) b.rested();
  }
  CHECK_FALSE(b.sharing(t));
  for (int i = 0; i < 10; ++i) CHECK(b.busy(t += 50 * us).kind == Kind::poll);
}

TEST_CASE("a busy engine naps at once when a receiver runs low", "[back_off]") {
  BackOffConfig c = config();
  c.yield_naps = true;
  BackOff b(c);
  // Alone on its core and busy: no nap, unless the turn saw a receive queue run low.
  transport::Nanos t = start;
  CHECK(b.busy(t).kind == Kind::poll);
  CHECK_FALSE(b.sharing(t));
  const BackOff::Step s = b.busy(t += 10 * us, true);
  CHECK(s.kind == Kind::nap);
  CHECK(s.yield);
  CHECK_FALSE(b.yielded(t, t + 3 * us));
  CHECK(b.busy(t += 10 * us).kind == Kind::poll);  // one nap per report, and its time is no preemption
  CHECK_FALSE(b.sharing(t));
  // With timed naps, a timed one; with naps off (nap_ns 0), none.
  c.yield_naps = false;
  BackOff timed(c);
  const BackOff::Step n = timed.busy(start, true);
  CHECK(n.kind == Kind::nap);
  CHECK_FALSE(n.yield);
  CHECK(n.timeout_ns == 20 * us);
  c.nap_ns = 0;
  BackOff never(c);
  CHECK(never.busy(start, true).kind == Kind::poll);
}

TEST_CASE("naps are yields, without a spin first; slow yields are told apart", "[back_off]") {
  BackOffConfig c = config();
  c.yield_naps = true;
  c.slow_yield_ns = 500 * us;
  BackOff b(c);
  // Idle: a yield at once, again and again until the doze (a yield needs no spin before it).
  BackOff::Step s = b.idle(start, transport::never, false);
  CHECK(s.kind == Kind::nap);
  CHECK(s.yield);
  CHECK_FALSE(b.yielded(start, start + 2 * us));  // nobody waited, or someone who gave the core back at once
  CHECK(b.idle(start + 3 * us, transport::never, false).yield);
  CHECK(b.idle(start + 999 * us, transport::never, false).kind == Kind::nap);
  CHECK(b.idle(start + 1000 * us, transport::never, false).kind == Kind::sleep);  // the doze is the same
  // A busy engine that shares its core yields after each busy slice too; a yield's time is no preemption.
  b.rested();
  transport::Nanos t = start + 10'000 * us;
  b.busy(t);
  CHECK(b.busy(t += 2000 * us).kind == Kind::poll);  // preempted: sharing from now on
  while ((s = b.busy(t += 10 * us)).kind == Kind::poll) REQUIRE(t < start + 13'000 * us);
  CHECK(s.yield);
  CHECK(b.yielded(t, t + 2000 * us));  // a neighbour that kept the core until its slice ended
  CHECK(b.busy(t + 2001 * us).kind == Kind::poll);
  // Switched off, naps are timed ones after a spin.
  c.yield_naps = false;
  BackOff timed(c);
  CHECK(timed.idle(start, transport::never, false).kind == Kind::poll);
  s = timed.idle(start + 5 * us, transport::never, false);
  CHECK(s.kind == Kind::nap);
  CHECK_FALSE(s.yield);
}

TEST_CASE("the engine clock follows CLOCK_MONOTONIC and never goes back", "[back_off][clock]") {
  for (const bool tsc : {false, EngineClock::tsc_is_kernel_clock()}) {
    EngineClock clock(tsc);
    transport::Nanos last = clock.now();
    const transport::Nanos begin = EngineClock::monotonic();
    // Long enough for the TSC clock to measure its rate and re-anchor a few times.
    while (EngineClock::monotonic() - begin < 5'000'000) {
      const transport::Nanos t = clock.now();
      REQUIRE(t >= last);
      last = t;
    }
    const transport::Nanos mono = EngineClock::monotonic();
    const transport::Nanos mine = clock.now();
    // Within a re-anchoring interval (1 ms) plus scheduling noise of the kernel's clock.
    CHECK(mine + 2'000'000 >= mono);
    CHECK(mine <= mono + 2'000'000);
  }
}

}  // namespace uroce::test::service
