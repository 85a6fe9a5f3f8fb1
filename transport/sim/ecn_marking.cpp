#include "transport/sim/ecn_marking.hpp"

#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::sim {

namespace {

constexpr uint8_t ce = uint8_t(wire::Ecn::ce);

bool ect(uint8_t ecn) { return ecn == uint8_t(wire::Ecn::ect0) || ecn == uint8_t(wire::Ecn::ect1); }

uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }

// The header checksum after the 16-bit word that holds the TOS changed from `old_word` to `new_word`:
// RFC 1624's HC' = ~(~HC + ~m + m'), so a header whose checksum was already wrong stays wrong (as through
// a real switch) instead of being silently repaired by a full recomputation.
uint16_t updated_checksum(uint16_t hc, uint16_t old_word, uint16_t new_word) {
  uint32_t sum = uint32_t(uint16_t(~hc)) + uint16_t(~old_word) + new_word;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

}  // namespace

bool mark_ce(std::span<uint8_t> f) {
  // A few bytes read directly rather than wire::parse_frame(): this runs on every frame a marking queue
  // holds, and only the IP version, the ECN field and (IPv4) the checksum matter.
  size_t type_at = 12;
  if (f.size() < wire::ethernet_header_size) return false;
  uint16_t type = be16(&f[type_at]);
  if (type == wire::ethertype_vlan) {
    type_at += wire::vlan_tag_size;
    if (f.size() < type_at + 2) return false;
    type = be16(&f[type_at]);
  }
  const size_t l3 = type_at + 2;
  if (type == wire::ethertype_ipv4) {
    if (f.size() < l3 + wire::ipv4_min_header_size || f[l3] >> 4 != 4) return false;
    uint8_t* p = &f[l3];
    if (!ect(p[1] & 3)) return false;
    const uint16_t old_word = be16(p);
    p[1] |= ce;
    const uint16_t hc = updated_checksum(be16(p + 10), old_word, be16(p));
    p[10] = uint8_t(hc >> 8);
    p[11] = uint8_t(hc);
    return true;
  }
  if (type == wire::ethertype_ipv6) {
    // Traffic class = the low nibble of byte 0 and the high nibble of byte 1; ECN is its low two bits.
    if (f.size() < l3 + wire::ipv6_header_size || f[l3] >> 4 != 6) return false;
    uint8_t& b1 = f[l3 + 1];
    if (!ect((b1 >> 4) & 3)) return false;
    b1 |= uint8_t(ce << 4);
    return true;
  }
  return false;
}

}  // namespace uroce::sim
