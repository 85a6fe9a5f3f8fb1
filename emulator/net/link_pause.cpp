#include "emulator/net/link_pause.hpp"

#include "transport/wire/bytes.hpp"
#include "transport/wire/ethernet.hpp"

namespace uroce::emulator::net {

unsigned frame_priority(std::span<const uint8_t> frame, bool trust_dscp) {
  if (frame.size() < wire::ethernet_header_size) return 0;
  size_t l3 = wire::ethernet_header_size;
  uint16_t ethertype = wire::load_be16(frame.data() + 12);
  unsigned pcp = 0;
  if (ethertype == wire::ethertype_vlan) {
    if (frame.size() < wire::ethernet_header_size + wire::vlan_tag_size) return 0;
    pcp = frame[14] >> 5;
    ethertype = wire::load_be16(frame.data() + 16);
    l3 += wire::vlan_tag_size;
  }
  if (!trust_dscp) return pcp;
  if (frame.size() < l3 + 2) return 0;
  if (ethertype == wire::ethertype_ipv4) return frame[l3 + 1] >> 5;  // TOS: DSCP, ECN
  if (ethertype == wire::ethertype_ipv6) return unsigned((frame[l3] & 0x0f) << 4 | frame[l3 + 1] >> 4) >> 5;  // TC
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
