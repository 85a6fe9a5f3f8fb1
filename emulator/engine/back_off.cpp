#include "emulator/engine/back_off.hpp"

#include <algorithm>

namespace uroce::emulator::engine {

// A preemption also gave the core away: the next busy slice counts from here.
void BackOff::note_turn(transport::Nanos now) {
  if (last_turn_ != 0 && now - last_turn_ >= config_.preempted_ns) {
    sharing_until_ = now + config_.share_ns;
    busy_since_ = 0;
  }
  last_turn_ = now;
}

BackOff::Step BackOff::busy(transport::Nanos now, bool receiver_starving) {
  note_turn(now);
  idle_since_ = 0;
  sleep_ns_ = 0;
  if (busy_since_ == 0) busy_since_ = now;
  if (config_.nap_ns == 0) return {};
  const bool slice_over = sharing(now) && now - busy_since_ >= config_.busy_slice_ns;
  if (!receiver_starving && !slice_over) return {};
  return {Kind::nap, config_.nap_ns, config_.yield_naps};
}

BackOff::Step BackOff::idle(transport::Nanos now, transport::Nanos deadline, bool in_flight) {
  note_turn(now);
  if (idle_since_ == 0) idle_since_ = now;
  const uint64_t idle_for = now - idle_since_;
  const bool yield = config_.yield_naps;
  if (!yield && idle_for < config_.spin_ns) return {};  // a yield needs no spin before it
  // Never past the next timer: a timer that is due makes the next turn useful at once.
  uint64_t until_deadline = ~uint64_t(0);
  if (deadline != transport::never) until_deadline = deadline <= now ? 0 : deadline - now;
  if (until_deadline == 0) return {};
  if (idle_for < config_.doze_ns) {
    const uint64_t nap = std::min(config_.nap_ns, until_deadline);
    return nap == 0 ? Step{} : Step{Kind::nap, nap, yield};  // nap_ns 0: keep polling
  }
  // A transport timer runs while requests are in flight: the peer's answer is due within microseconds,
  // so the sleep stays short instead of doubling towards max_sleep_ns (which would add up to that much
  // latency to every answer). An idle port (no timer) backs off all the way.
  const uint64_t cap = in_flight ? std::min(config_.in_flight_sleep_ns, config_.max_sleep_ns) : config_.max_sleep_ns;
  sleep_ns_ = sleep_ns_ == 0 ? std::min<uint64_t>(10'000, cap) : std::min(sleep_ns_ * 2, cap);
  const uint64_t timeout = std::min(sleep_ns_, until_deadline);
  return timeout == 0 ? Step{} : Step{Kind::sleep, timeout};
}

}  // namespace uroce::emulator::engine
