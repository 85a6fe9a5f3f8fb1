#include "transport/dcqcn.hpp"

#include <algorithm>

namespace uroce::transport {

DcqcnRate::DcqcnRate(const DcqcnConfig& config, Nanos now)
    : config_(config),
      rc_(config.line_rate_bps),
      rt_(config.line_rate_bps),
      alpha_at_(now + config.alpha_period),
      increase_at_(now + config.increase_period),
      next_send_(now) {}

void DcqcnRate::on_cnp(Nanos now) {
  cnp_since_alpha_update_ = true;
  if (cut_yet_ && now - last_cut_ < config_.min_cut_interval) return;
  cut_yet_ = true;
  last_cut_ = now;
  ++cuts_;
  rt_ = rc_;
  rc_ = std::max(config_.min_rate_bps, rc_ * (1 - alpha_ / 2));
  alpha_ = (1 - config_.g) * alpha_ + config_.g;
  // Recovery starts over from this cut.
  timer_events_ = byte_events_ = 0;
  bytes_since_increase_ = 0;
  alpha_at_ = now + config_.alpha_period;
  increase_at_ = now + config_.increase_period;
}

void DcqcnRate::on_sent(uint64_t bytes, Nanos now) {
  next_send_ = std::max(next_send_, now) + Nanos(double(bytes) * 8e9 / rc_);
  if (at_line_rate()) return;
  bytes_since_increase_ += bytes;
  while (bytes_since_increase_ >= config_.increase_bytes) {
    bytes_since_increase_ -= config_.increase_bytes;
    ++byte_events_;
    increase();
  }
}

void DcqcnRate::on_time(Nanos now) {
  while (alpha_at_ <= now) {
    if (!cnp_since_alpha_update_) alpha_ = (1 - config_.g) * alpha_;
    cnp_since_alpha_update_ = false;
    alpha_at_ += config_.alpha_period;
  }
  while (increase_at_ <= now) {
    increase_at_ += config_.increase_period;
    if (at_line_rate()) continue;
    ++timer_events_;
    increase();
  }
}

void DcqcnRate::increase() {
  const unsigned f = config_.fast_recovery_steps;
  if (std::max(timer_events_, byte_events_) <= f) {
    // fast recovery: towards the rate before the cut
  } else if (std::min(timer_events_, byte_events_) > f) {
    rt_ += double(std::min(timer_events_, byte_events_) - f) * config_.hyper_increase_bps;
  } else {
    rt_ += config_.additive_increase_bps;
  }
  rt_ = std::min(rt_, config_.line_rate_bps);
  rc_ = std::min(config_.line_rate_bps, (rt_ + rc_) / 2);
  // Within a nanosecond of line rate is line rate (halving the distance never gets there exactly).
  if (config_.line_rate_bps - rc_ < 1.0) rc_ = config_.line_rate_bps;
}

}  // namespace uroce::transport
