// Property tests: random RC workloads over a network that loses, duplicates, reorders and corrupts,
// one seed after another. Seeds: UROCE_PROPERTY_SEEDS (default 10,000, about ten seconds;
// set it higher for a longer sweep). A failing seed prints itself; rerun it alone with UROCE_PROPERTY_SEED=N and
// UROCE_TEST_PCAP=FILE to get its capture for `uroce explain`. Every frame sent is also held to `uroce
// check`'s rules (pcap_tools/conformance.hpp) as it leaves its sender.
#include <cstdlib>

#include "pcap_tools/conformance.hpp"
#include "tests/unit/transport/workload.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace pcap_tools = uroce::pcap_tools;

namespace {

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::strtoull(v, nullptr, 0) : fallback;
}

struct Outcome {
  uint64_t frames = 0, dropped = 0, retransmitted = 0, naks = 0, timeouts = 0;
};

Outcome run_seed(uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
  sim::SimNetwork net(seed);
  auto capture = capture_if_asked(net);
  // Every frame either side transmits is held to `uroce check`'s rules as it leaves (before the network
  // impairs it), unless the frames go to a capture file instead.
  pcap_tools::ConformanceChecker checker;
  uint64_t transmitted = 0;
  if (!capture) {
    net.set_capture([&](const sim::CaptureEvent& e) {
      if (e.point != sim::CapturePoint::transmitted) return;
      uroce::wire::Frame f;
      uroce::wire::parse_frame(e.frame, f);
      checker.add(++transmitted, f);
    });
  }
  sim::LinkProfile profile;
  static constexpr double losses[] = {0, 0.005, 0.02, 0.05};
  profile.loss = losses[rng() % 4];
  profile.duplicate = (rng() % 3 == 0) ? 0.02 : 0;
  profile.corrupt = (rng() % 3 == 0) ? 0.01 : 0;
  profile.delay = 1000 + rng() % 20000;
  profile.bandwidth = 1'250'000'000ull * (1 + rng() % 8);  // 10-80 Gb/s: packets are spaced as on a wire
  // Reordering: none, mild (a few packets), or heavy (whole bursts scrambled: far beyond what RoCE
  // networks do, but delivery must stay exactly-once; it only costs retransmissions).
  switch (rng() % 4) {
    case 0: profile.jitter = 0; break;
    case 1:
    case 2: profile.jitter = rng() % 2000; break;
    default: profile.jitter = rng() % 30000; break;
  }
  if (rng() % 4 == 0) profile.queue_limit = 16384 + rng() % 65536;  // tail drops when bursts pile up
  net.set_default_profile(profile);

  Host a(net, ip("10.0.0.1"));
  Host b(net, ip("10.0.0.2"));
  QpParams params;
  params.mtu = Mtu(1 + rng() % 5);
  params.timeout = 8;  // ~1 ms of virtual time, so that lost tails are retried quickly
  params.max_rd_atomic = uint8_t(1 + rng() % 16);
  const uint32_t a_key = a.add_buffer(buffer_size, params.access, 0x10000000);
  const uint32_t b_key = b.add_buffer(buffer_size, params.access, 0x20000000);
  const uint32_t qa = a.create_qp(QpType::rc);
  const uint32_t qb = b.create_qp(QpType::rc);
  const uint32_t psn_a = uint32_t(rng()) & 0xffffff, psn_b = uint32_t(rng()) & 0xffffff;  // wraps included
  connect(a, qa, QpType::rc, b.address, qb, psn_a, psn_b, params);
  connect(b, qb, QpType::rc, a.address, qa, psn_b, psn_a, params);

  Workload w(seed, 1 + rng() % 24, rng() % 2 ? 3000 : 20000);
  w.prepare(a, b);
  w.post(a, qa, a_key, 0x10000000, b, qb, b_key, 0x20000000);
  REQUIRE(net.run_until_idle(net.now() + 60'000'000'000ull));
  w.check(a, b);
  QpAttr attr;
  REQUIRE(a.device->query_qp(qa, attr) == 0);
  CHECK(attr.qp_state == QpState::rts);
  REQUIRE(b.device->query_qp(qb, attr) == 0);
  CHECK(attr.qp_state == QpState::rts);

  for (const pcap_tools::Violation& v : checker.violations()) {
    UNSCOPED_INFO(v.rule << " in transmitted frame " << v.frame << ": " << v.text);
  }
  CHECK(checker.violations().empty());

  Outcome o;
  const auto s = net.stats();
  o.frames = s.links.frames_sent;
  o.dropped = s.frames_dropped() + s.links.corrupted;
  o.retransmitted = a.device->counters().tx_retransmitted;
  o.naks = b.device->counters().naks_sent;
  o.timeouts = a.device->counters().timeouts;
  return o;
}

}  // namespace

TEST_CASE("rc properties: exactly-once, in-order, byte-identical delivery over an impaired network",
          "[transport][rc][property]") {
  const uint64_t only = env_or("UROCE_PROPERTY_SEED", ~0ull);
  const uint64_t seeds = env_or("UROCE_PROPERTY_SEEDS", 10000);
  Outcome total;
  uint64_t ran = 0;
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    if (only != ~0ull && seed != only) continue;
    INFO("seed " << seed << " (rerun alone: UROCE_PROPERTY_SEED=" << seed << ")");
    const Outcome o = run_seed(seed);
    total.frames += o.frames;
    total.dropped += o.dropped;
    total.retransmitted += o.retransmitted;
    total.naks += o.naks;
    total.timeouts += o.timeouts;
    ++ran;
  }
  WARN(ran << " seeds: " << total.frames << " frames, " << total.dropped << " lost or corrupted, "
           << total.retransmitted << " PSNs retransmitted, " << total.naks << " sequence NAKs, " << total.timeouts
           << " timeouts");
  // The sweep must have exercised recovery, or it proves nothing.
  if (seeds >= 100 && only == ~0ull) {
    CHECK(total.dropped > 0);
    CHECK(total.retransmitted > 0);
    CHECK(total.naks > 0);
    CHECK(total.timeouts > 0);
  }
}
