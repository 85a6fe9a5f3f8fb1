// DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015),
// the rate control RoCE NICs apply to a QP whose peer sends it CNPs: one flow's sending rate, as a pure
// function of CNPs, bytes sent and time (injected), so that it can be checked step by step.
//
// - A CNP cuts the current rate Rc by alpha/2 (alpha: the estimate of how congested the path is, raised by
//   each CNP and decaying while none comes), after remembering it as the target Rt. Cuts are at least
//   min_cut_interval apart, as NICs rate-limit their reaction to a burst of CNPs.
// - Recovery comes in stages, counted by a timer (every increase_period) and a byte counter (every
//   increase_bytes sent), each event moving Rc half way to Rt: for the first `fast_recovery_steps` events
//   of both kinds Rt stays (fast recovery); then Rt grows by additive_increase per event (additive
//   increase), and once both counters are past the threshold by hyper_increase times how far (hyper
//   increase).
// - The rate never leaves [min_rate, line_rate]; back at line rate the flow is no longer limited.
//
// Pacing: a limited flow may send its next packet at next_send_time(), which each packet sent pushes on by
// its size at the current rate.
#pragma once

#include <cstdint>

#include "transport/packet_io.hpp"

namespace uroce::transport {

struct DcqcnConfig {
  double line_rate_bps = 100e9;       // the port's speed: where a flow starts and returns to
  double min_rate_bps = 1e6;
  double g = 1.0 / 256;               // alpha's gain
  Nanos alpha_period = 55'000;        // K: alpha decays by (1 - g) for each such period with no CNP
  Nanos increase_period = 300'000;    // T: the rate increase timer
  uint64_t increase_bytes = 32767;   // B: the byte counter (as mlx5's rpg_byte_reset)
  unsigned fast_recovery_steps = 5;   // F (the paper's)
  double additive_increase_bps = 5e6;   // R_AI
  double hyper_increase_bps = 50e6;     // R_HAI
  Nanos min_cut_interval = 4'000;     // CNPs closer than this to the last cut only raise alpha
};

class DcqcnRate {
 public:
  // A flow at line rate with alpha = 1 (the first CNP halves it), as DCQCN starts one.
  DcqcnRate(const DcqcnConfig& config, Nanos now);

  void on_cnp(Nanos now);
  void on_sent(uint64_t bytes, Nanos now);
  // Fires the alpha and increase timers that are due at `now`.
  void on_time(Nanos now);

  double rate_bps() const { return rc_; }
  double target_bps() const { return rt_; }
  double alpha() const { return alpha_; }
  bool at_line_rate() const { return rc_ >= config_.line_rate_bps; }
  Nanos next_send_time() const { return next_send_; }
  Nanos next_timer() const { return alpha_at_ < increase_at_ ? alpha_at_ : increase_at_; }
  uint64_t cuts() const { return cuts_; }

 private:
  void increase();

  DcqcnConfig config_;
  double rc_, rt_, alpha_ = 1.0;
  bool cnp_since_alpha_update_ = false;
  Nanos last_cut_ = 0;
  bool cut_yet_ = false;
  Nanos alpha_at_, increase_at_;
  uint64_t bytes_since_increase_ = 0;
  unsigned timer_events_ = 0, byte_events_ = 0;
  Nanos next_send_ = 0;
  uint64_t cuts_ = 0;
};

}  // namespace uroce::transport
