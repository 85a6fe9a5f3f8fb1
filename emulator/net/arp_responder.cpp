#include "emulator/net/arp_responder.hpp"

#include "emulator/net/arp_frames.hpp"

namespace uroce::emulator::net {

namespace {

// A MAC worth remembering as a peer's: not all-zero and not a group address (I/G bit clear).
bool is_unicast(const wire::MacAddress& mac) {
  return (mac.bytes[0] & 1) == 0 && mac != wire::MacAddress{};
}

}  // namespace

size_t ArpResponder::on_frame(const Classification& frame, Nanos now, std::span<uint8_t> reply,
                              ArpOutput& released) {
  const wire::ArpPacket& a = frame.arp;
  if (port_.owns_v4(a.sender_ip)) {
    if (a.sender_mac != port_.mac) {
      ++counters_.arp_conflicts;
      if (conflicts_) conflicts_->note(wire::IpAddress::from_v4(a.sender_ip), a.sender_mac);
    }
    return 0;
  }
  if (a.sender_mac == port_.mac) {
    ++counters_.arp_ignored;  // our own request (a probe from 0.0.0.0) reflected back: no reply to ourselves
    return 0;
  }
  if (!is_unicast(a.sender_mac)) {
    ++counters_.arp_ignored;  // bogus (Linux drops these too): a reply would go to a group address
    return 0;
  }
  const bool learnable = a.sender_ip != 0;
  if (!port_.owns_v4(a.target_ip)) {
    if (learnable) cache_.update_if_known(a.sender_ip, a.sender_mac, now, released);
    ++counters_.arp_ignored;
    return 0;
  }
  if (a.operation != wire::arp_op_request && a.operation != wire::arp_op_reply) {
    ++counters_.arp_ignored;  // RARP and InARP operations ride the same ethertype; not ours to answer
    return 0;
  }
  if (learnable) cache_.learn(a.sender_ip, a.sender_mac, now, released);
  if (a.operation == wire::arp_op_reply) {
    ++counters_.arp_replies_received;
    return 0;
  }
  ++counters_.arp_requests_received;
  const std::optional<uint16_t> tag =
      frame.eth.has_vlan ? std::optional<uint16_t>(frame.eth.vlan_tci) : std::nullopt;
  const size_t size = write_arp_reply(reply, a, port_.mac, tag);
  if (size != 0) ++counters_.arp_replies_sent;
  return size;
}

}  // namespace uroce::emulator::net
