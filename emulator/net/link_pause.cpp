#include "emulator/net/link_pause.hpp"

namespace uroce::emulator::net {

unsigned frame_priority(std::span<const uint8_t> frame, bool trust_dscp) {
  if (frame.size() < 14) return 0;
  size_t l3 = 12;  // at the EtherType
  unsigned pcp = 0;
  if (frame[12] == 0x81 && frame[13] == 0x00) {
    if (frame.size() < 18) return 0;
    pcp = frame[14] >> 5;
    l3 = 16;
  }
  if (!trust_dscp) return pcp;
  const uint16_t ethertype = uint16_t(frame[l3] << 8 | frame[l3 + 1]);
  l3 += 2;
  if (frame.size() < l3 + 2) return 0;
  if (ethertype == 0x0800) return frame[l3 + 1] >> 5;                                  // TOS: DSCP, ECN
  if (ethertype == 0x86dd) return unsigned((frame[l3] & 0x0f) << 4 | frame[l3 + 1] >> 4) >> 5;  // traffic class
  return 0;  // not IP (ARP): no DSCP to trust
}

void LinkPause::set(unsigned priority, uint16_t quanta, Nanos now, NetCounters& counters) {
  if (quanta == 0) {
    if (paused(priority, now)) ++counters.priority_resumes;
    until_[priority] = 0;
    return;
  }
  ++counters.priority_pauses;
  until_[priority] = now + wire::pause_nanoseconds(quanta, link_bps_);
}

void LinkPause::on_frame(const wire::MacControl& m, Nanos now, NetCounters& counters) {
  if (m.is_pause()) {
    ++counters.pause_frames_received;
    for (unsigned i = 0; i < 8; ++i) set(i, m.pause_quanta, now, counters);
  } else if (m.is_pfc()) {
    ++counters.pfc_frames_received;
    for (unsigned i = 0; i < 8; ++i) {
      if ((m.enabled >> i & 1) != 0) set(i, m.quanta[i], now, counters);
    }
  }
}

}  // namespace uroce::emulator::net
