#include "transport/sim/corruption.hpp"

#include <bit>

#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::sim {

namespace {

// Where the ICRC-relevant headers sit; derived from the bytes so that VLAN tags and IPv4 options work.
struct Layout {
  bool known = false;
  bool v6 = false;
  size_t l3 = 0;
  size_t l4 = 0;
};

Layout layout_of(std::span<const uint8_t> f) {
  Layout l;
  if (f.size() < wire::ethernet_header_size) return l;
  size_t type_at = 12;
  uint16_t type = uint16_t(f[type_at] << 8 | f[type_at + 1]);
  if (type == wire::ethertype_vlan) {
    type_at += wire::vlan_tag_size;
    if (f.size() < type_at + 2) return l;
    type = uint16_t(f[type_at] << 8 | f[type_at + 1]);
  }
  l.l3 = type_at + 2;
  if (type == wire::ethertype_ipv4) {
    if (f.size() < l.l3 + wire::ipv4_min_header_size) return l;
    l.l4 = l.l3 + size_t(f[l.l3] & 0x0f) * 4;
  } else if (type == wire::ethertype_ipv6) {
    l.v6 = true;
    l.l4 = l.l3 + wire::ipv6_header_size;
  } else {
    return l;
  }
  l.known = f.size() >= l.l4 + wire::udp_header_size + 12;
  return l;
}

// Bits of byte i that the scope allows to flip (the ICRC masks, from transport/wire/icrc.cpp's recipe).
uint8_t eligible_mask(const Layout& l, size_t i) {
  if (i < l.l3) return 0;
  const size_t r = i - l.l3;
  if (l.v6) {
    if (r == 0) return 0xf0;  // the version nibble is covered, the traffic class nibble is not
    if (r == 1 || r == 2 || r == 3 || r == 7) return 0;
  } else if (r == 1 || r == 8 || r == 10 || r == 11) {
    return 0;
  }
  if (i == l.l4 + 6 || i == l.l4 + 7) return 0;                        // UDP checksum
  if (i == l.l4 + wire::udp_header_size + 4) return 0;                 // BTH FECN/BECN/reserved
  return 0xff;
}

}  // namespace

size_t corruptible_bits(std::span<const uint8_t> frame, CorruptionScope scope) {
  const Layout l = layout_of(frame);
  if (scope == CorruptionScope::anywhere || !l.known) return frame.size() * 8;
  size_t n = 0;
  for (size_t i = l.l3; i < frame.size(); ++i) n += size_t(std::popcount(eligible_mask(l, i)));
  return n;
}

std::optional<size_t> flip_bit(std::span<uint8_t> frame, CorruptionScope scope, uint64_t draw) {
  const Layout l = layout_of(frame);
  const bool anywhere = scope == CorruptionScope::anywhere || !l.known;
  const size_t total = corruptible_bits(frame, scope);
  if (total == 0) return std::nullopt;
  size_t k = size_t(draw % total);
  if (anywhere) {
    frame[k / 8] ^= uint8_t(1u << (k % 8));
    return k;
  }
  for (size_t i = l.l3; i < frame.size(); ++i) {
    const uint8_t m = eligible_mask(l, i);
    const size_t here = size_t(std::popcount(m));
    if (k >= here) {
      k -= here;
      continue;
    }
    for (unsigned bit = 0; bit < 8; ++bit) {
      if (!(m & (1u << bit))) continue;
      if (k-- == 0) {
        frame[i] ^= uint8_t(1u << bit);
        return i * 8 + bit;
      }
    }
  }
  return std::nullopt;  // unreachable: k < total
}

}  // namespace uroce::sim
