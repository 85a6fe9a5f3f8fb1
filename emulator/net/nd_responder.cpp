#include "emulator/net/nd_responder.hpp"

#include "emulator/net/nd_frames.hpp"

namespace uroce::emulator::net {

void NdResponder::conflict(const wire::IpAddress& ip, const wire::MacAddress& mac) {
  ++counters_.nd_conflicts;
  if (conflicts_) conflicts_->note(ip, mac);
}

size_t NdResponder::on_frame(const Classification& frame, Nanos now, std::span<uint8_t> reply, NdOutput& released) {
  const NdMessage& m = frame.nd;
  const bool target_ours = port_.owns_v6(m.target.bytes.data());
  if (port_.owns_v6(m.ip_src.bytes.data())) {
    // Our own solicitation or advertisement coming back (a hub, a bridge reflecting multicast), or another
    // station using one of our addresses.
    if (frame.eth.src != port_.mac) conflict(m.ip_src, frame.eth.src);  // the station that sent it
    return 0;
  }
  if (frame.eth.src == port_.mac) {
    ++counters_.nd_ignored;  // our own duplicate address detection (from ::) reflected back: not answered
    return 0;
  }
  if (m.lladdr && !is_unicast_mac(*m.lladdr)) {
    ++counters_.nd_ignored;  // bogus: an answer would go to a group address, learning it would misroute
    return 0;
  }
  const bool learnable = !is_unspecified(m.ip_src) && m.lladdr;
  if (!m.is_solicitation()) {
    if (target_ours) {
      if (!m.lladdr || *m.lladdr != port_.mac) conflict(m.target, m.lladdr ? *m.lladdr : frame.eth.src);
      return 0;
    }
    if (m.lladdr && cache_.update_if_known(m.target, *m.lladdr, now, released)) {
      ++counters_.nd_advertisements_received;
    } else {
      ++counters_.nd_ignored;
    }
    return 0;
  }
  if (!target_ours) {
    if (learnable) cache_.update_if_known(m.ip_src, *m.lladdr, now, released);
    ++counters_.nd_ignored;
    return 0;
  }
  ++counters_.nd_solicitations_received;
  if (learnable) cache_.learn(m.ip_src, *m.lladdr, now, released);
  // Nowhere to answer: no link-layer option and a group (or zero) Ethernet source.
  if (!is_unspecified(m.ip_src) && !learnable && !is_unicast_mac(frame.eth.src)) {
    ++counters_.nd_ignored;
    return 0;
  }
  const std::optional<uint16_t> tag = frame.eth.has_vlan ? std::optional<uint16_t>(frame.eth.vlan_tci) : std::nullopt;
  const size_t size = write_neighbor_advertisement(reply, m, frame.eth.src, port_.mac, tag);
  if (size != 0) ++counters_.nd_advertisements_sent;
  return size;
}

}  // namespace uroce::emulator::net
