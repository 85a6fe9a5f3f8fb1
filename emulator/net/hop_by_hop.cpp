#include "emulator/net/hop_by_hop.hpp"

#include "transport/wire/bytes.hpp"

namespace uroce::emulator::net {

namespace {

// RFC 8200 §4.2: the two high bits of an option's type say what a node that does not know it does; only
// 00 ("skip over this option") lets the packet through.
bool may_skip_unknown(uint8_t option_type) { return (option_type >> 6) == 0; }

}  // namespace

std::optional<DropReason> parse_hop_by_hop(const uint8_t* p, size_t avail, HopByHop& out) {
  if (avail < hop_by_hop_min_size) return DropReason::bad_hop_by_hop;
  const size_t length = (size_t(p[1]) + 1) * 8;  // in 8-byte units, the first 8 not counted
  if (length > avail) return DropReason::bad_hop_by_hop;
  HopByHop h;
  h.next_header = p[0];
  h.length = length;
  for (size_t at = 2; at < length;) {
    const uint8_t type = p[at];
    if (type == ipv6_option_pad1) {  // the one option without a length byte
      ++at;
      continue;
    }
    if (length - at < 2 || size_t(p[at + 1]) > length - at - 2) return DropReason::bad_hop_by_hop;
    const size_t data_length = p[at + 1];
    if (type == ipv6_option_router_alert) {
      if (data_length != 2) return DropReason::bad_hop_by_hop;  // RFC 2711 §2.1: always 2
      if (wire::load_be16(p + at + 2) == router_alert_mld) h.mld_router_alert = true;
    } else if (type != ipv6_option_padn && !may_skip_unknown(type)) {
      return DropReason::bad_hop_by_hop;
    }
    at += 2 + data_length;
  }
  out = h;
  return std::nullopt;
}

}  // namespace uroce::emulator::net
