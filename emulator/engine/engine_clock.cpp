#include "emulator/engine/engine_clock.hpp"

#include <time.h>

#include <fstream>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define UROCE_HAVE_TSC 1
#else
#define UROCE_HAVE_TSC 0
#endif

namespace uroce::emulator::engine {

namespace {

constexpr uint64_t anchor_interval_ns = 1'000'000;

uint64_t read_tsc() {
#if UROCE_HAVE_TSC
  return __rdtsc();
#else
  return 0;
#endif
}

}  // namespace

transport::Nanos EngineClock::monotonic() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return transport::Nanos(ts.tv_sec) * 1'000'000'000 + transport::Nanos(ts.tv_nsec);
}

// The kernel picks the TSC as its clocksource only when it found it invariant and synchronised across
// CPUs; anything else (kvm-clock, hpet, a TSC it marked unstable) and we leave timekeeping to it.
bool EngineClock::tsc_is_kernel_clock() {
  if (!UROCE_HAVE_TSC) return false;
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return f >> name && name == "tsc";
}

EngineClock::EngineClock(bool use_tsc) : use_tsc_(use_tsc && UROCE_HAVE_TSC) {
  if (use_tsc_) anchor(read_tsc());
}

transport::Nanos EngineClock::now() {
  if (!use_tsc_) return monotonic();
  const uint64_t tsc = read_tsc();
  transport::Nanos t;
  // Unsigned: a TSC that went backwards (it should not) looks like a long interval and re-anchors too.
  if (reanchor_ticks_ == 0 || tsc - tsc_anchor_ >= reanchor_ticks_) {
    anchor(tsc);
    t = ns_anchor_;
  } else {
    t = ns_anchor_ + transport::Nanos(double(tsc - tsc_anchor_) * ns_per_tick_);
  }
  // A re-anchoring can land slightly behind what the previous rate extrapolated: time never goes back.
  if (t < last_) t = last_;
  last_ = t;
  return t;
}

// Until a millisecond has passed there is no rate yet and every read is an anchor (clock_gettime). The
// rate is then measured over the whole time since the first anchor, so its error shrinks as it runs.
void EngineClock::anchor(uint64_t tsc) {
  const transport::Nanos ns = monotonic();
  if (tsc_start_ == 0 || tsc < tsc_start_ || ns < ns_start_) {
    tsc_start_ = tsc;
    ns_start_ = ns;
    reanchor_ticks_ = 0;
  } else if (ns - ns_start_ >= anchor_interval_ns && tsc > tsc_start_) {
    ns_per_tick_ = double(ns - ns_start_) / double(tsc - tsc_start_);
    reanchor_ticks_ = uint64_t(double(anchor_interval_ns) / ns_per_tick_);
    if (reanchor_ticks_ == 0) reanchor_ticks_ = 1;
  }
  tsc_anchor_ = tsc;
  ns_anchor_ = ns;
}

}  // namespace uroce::emulator::engine
