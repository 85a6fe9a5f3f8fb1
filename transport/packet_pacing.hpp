// Packet pacing (IBV_QP_RATE_LIMIT, ibv_modify_qp_rate_limit): a cap on a raw packet QP's sending rate,
// which the application sets, as a ConnectX paces the raw packet QPs it is asked to (mlx5 offers packet
// pacing for those alone; Linux 6.1's QP state table takes the attribute for them alone too).
//
// A token bucket in its "virtual scheduling" form (the GCRA of ATM's traffic contracts): every frame sent
// moves a theoretical finish time on by its length at the rate, never from a point earlier than now; the
// next frame may go once that time is no more than `burst` bytes' worth ahead of now. So a QP idle for a
// while sends a frame and `burst` bytes more at once, then at the rate, and over any stretch of time it
// sends no more than the rate's worth plus that. A pure function of frames sent and time (injected).
#pragma once

#include <cstdint>

#include "transport/packet_io.hpp"

namespace uroce::transport {

struct PacingLimits {
  // ibv_query_device_ex's packet_pacing_caps, in kbit/s: a ConnectX-5's range, 1 kbit/s to 100 Gbit/s.
  static constexpr uint32_t min_kbps = 1;
  static constexpr uint32_t max_kbps = 100'000'000;
  // The bucket when the application names none (max_burst_sz 0): one frame of the largest size a raw QP
  // may send with a 9000-byte MTU, so that pacing never holds back a single frame.
  static constexpr uint32_t default_burst_bytes = 9018;
};

class PacketPacer {
 public:
  // `kbps` within PacingLimits; `burst_bytes` 0 takes the default.
  PacketPacer(uint32_t kbps, uint32_t burst_bytes);

  uint32_t kbps() const { return kbps_; }
  uint32_t burst_bytes() const { return burst_bytes_; }
  // The earliest time the next frame may go.
  Nanos next_send_time() const { return finish_ > tolerance_ ? finish_ - tolerance_ : 0; }
  bool allows(Nanos now) const { return now >= next_send_time(); }
  // A frame of `bytes` went at `now`.
  void on_sent(uint64_t bytes, Nanos now);

 private:
  Nanos duration(uint64_t bytes) const;  // how long `bytes` take at the rate

  uint32_t kbps_;
  uint32_t burst_bytes_;
  Nanos tolerance_;  // the burst's duration at the rate
  Nanos finish_ = 0;  // when everything sent so far would have left at the rate
};

}  // namespace uroce::transport
