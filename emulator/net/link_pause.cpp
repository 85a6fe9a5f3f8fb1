#include "emulator/net/link_pause.hpp"

namespace uroce::emulator::net {

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
