#include "transport/packet_pacing.hpp"

#include <algorithm>

namespace uroce::transport {

PacketPacer::PacketPacer(uint32_t kbps, uint32_t burst_bytes)
    : kbps_(kbps),
      burst_bytes_(burst_bytes != 0 ? burst_bytes : PacingLimits::default_burst_bytes),
      tolerance_(duration(burst_bytes_)) {}

Nanos PacketPacer::duration(uint64_t bytes) const {
  // bytes * 8 bits at kbps * 1000 bit/s take bytes * 8 / (kbps * 1000) s = bytes * 8 * 10^6 / kbps ns,
  // rounded up so that the rate is never exceeded. (kbps >= 1 and bytes < 2^32: no overflow.)
  const uint64_t scaled = bytes * 8'000'000;
  return (scaled + kbps_ - 1) / kbps_;
}

void PacketPacer::on_sent(uint64_t bytes, Nanos now) { finish_ = std::max(finish_, now) + duration(bytes); }

}  // namespace uroce::transport
