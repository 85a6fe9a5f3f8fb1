// DCQCN's reaction point, step by step (dcqcn.hpp): the cut on a CNP, alpha, the recovery stages, pacing.
#include <catch2/catch.hpp>

#include <cmath>

#include "transport/dcqcn.hpp"

using uroce::transport::DcqcnConfig;
using uroce::transport::DcqcnRate;
using uroce::transport::Nanos;
using Catch::Detail::Approx;

namespace {

DcqcnConfig config() {
  DcqcnConfig c;
  c.line_rate_bps = 100e9;
  c.min_rate_bps = 1e6;
  c.g = 1.0 / 256;
  c.alpha_period = 55'000;
  c.increase_period = 300'000;
  c.increase_bytes = 10'000'000;
  c.fast_recovery_steps = 5;
  c.additive_increase_bps = 5e6;
  c.hyper_increase_bps = 50e6;
  c.min_cut_interval = 4'000;
  return c;
}

}  // namespace

TEST_CASE("dcqcn: a CNP halves a new flow's rate; CNPs closer than the interval cut once", "[dcqcn]") {
  DcqcnRate r(config(), 0);
  CHECK(r.at_line_rate());
  r.on_cnp(1'000);
  CHECK(r.rate_bps() == Approx(50e9));  // alpha starts at 1: Rc * (1 - 1/2)
  CHECK(r.target_bps() == Approx(100e9));
  CHECK(r.alpha() == Approx(1.0));      // (1 - g) * 1 + g
  CHECK_FALSE(r.at_line_rate());
  r.on_cnp(3'000);                      // 2 us later: no second cut
  CHECK(r.rate_bps() == Approx(50e9));
  CHECK(r.cuts() == 1);
  r.on_cnp(6'000);                      // 5 us after the cut: another
  CHECK(r.rate_bps() == Approx(25e9));
  CHECK(r.target_bps() == Approx(50e9));
  CHECK(r.cuts() == 2);
}

TEST_CASE("dcqcn: alpha decays by (1 - g) per period without a CNP, so later cuts are gentler", "[dcqcn]") {
  DcqcnRate r(config(), 0);
  r.on_cnp(0);
  r.on_time(55'000);  // the period of the CNP: no decay
  CHECK(r.alpha() == Approx(1.0));
  r.on_time(55'000 * 11);  // ten periods with no CNP
  const double g = 1.0 / 256;
  CHECK(r.alpha() == Approx(std::pow(1 - g, 10)));
  const double before = r.rate_bps();
  const double alpha = r.alpha();
  r.on_cnp(55'000 * 11 + 1);
  CHECK(r.rate_bps() == Approx(before * (1 - alpha / 2)));
}

TEST_CASE("dcqcn: fast recovery halves the distance to the target, then additive and hyper increase",
          "[dcqcn]") {
  DcqcnConfig c = config();
  DcqcnRate r(c, 0);
  r.on_cnp(0);  // Rc 50, Rt 100 (Gb/s)
  double rc = 50e9;
  for (int i = 1; i <= 5; ++i) {  // five timer events: fast recovery towards Rt = 100
    r.on_time(Nanos(i) * 300'000);
    rc = (100e9 + rc) / 2;
    CHECK(r.rate_bps() == Approx(rc));
    CHECK(r.target_bps() == Approx(100e9));
  }
  // Past F timer events (and no byte events): additive increase, Rt capped at line rate.
  r.on_time(6 * 300'000);
  CHECK(r.target_bps() == Approx(100e9));
  CHECK(r.rate_bps() == Approx((100e9 + rc) / 2));

  // From a deeper cut the stages show: Rt grows by R_AI, then by R_HAI * (min(T, BC) - F) once the byte
  // counter too is past F.
  DcqcnRate d(c, 0);
  d.on_cnp(0);                // Rc 50
  d.on_cnp(10'000);           // Rc 25, Rt 50
  for (int i = 1; i <= 5; ++i) d.on_time(10'000 + Nanos(i) * 300'000);  // fast recovery: Rt stays 50
  CHECK(d.target_bps() == Approx(50e9));
  d.on_time(10'000 + 6 * 300'000);                                       // T = 6 > F, BC = 0: additive
  CHECK(d.target_bps() == Approx(50e9 + 5e6));
  for (int i = 0; i < 6; ++i) d.on_sent(c.increase_bytes, 10'000 + 6 * 300'000 + 1);  // BC 1..6
  // BC 1..5 with T 6: additive each (5 events); BC 6 with T 6: hyper, by R_HAI * (6 - 5).
  CHECK(d.target_bps() == Approx(50e9 + 5e6 + 5 * 5e6 + 50e6));
}

TEST_CASE("dcqcn: the rate comes back to line rate and stops limiting", "[dcqcn]") {
  DcqcnRate r(config(), 0);
  r.on_cnp(0);
  Nanos t = 0;
  for (int i = 0; i < 200 && !r.at_line_rate(); ++i) r.on_time(t += 300'000);
  CHECK(r.at_line_rate());
  CHECK(r.rate_bps() == 100e9);
}

TEST_CASE("dcqcn: pacing spaces packets by their size at the current rate; never below the minimum", "[dcqcn]") {
  DcqcnConfig c = config();
  DcqcnRate r(c, 0);
  r.on_cnp(0);  // 50 Gb/s: a 4158-byte frame takes 665.28 ns
  r.on_sent(4158, 1'000);
  CHECK(r.next_send_time() == 1'000 + 665);
  r.on_sent(4158, 1'100);  // sent early (the caller was allowed to): the next slot follows the last
  CHECK(r.next_send_time() == 1'000 + 665 + 665);
  for (int i = 0; i < 100; ++i) r.on_cnp(10'000 + Nanos(i) * 5'000);
  CHECK(r.rate_bps() == Approx(c.min_rate_bps));
}
