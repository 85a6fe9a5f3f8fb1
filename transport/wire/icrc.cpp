#include "transport/wire/icrc.hpp"

#include <cstring>

#include "transport/wire/crc32.hpp"

namespace uroce::wire {

namespace {

// Every ICRC starts with 8 bytes of 0xFF standing in for the InfiniBand LRH. Their CRC is a constant:
// continuing from it saves a dependent CRC call per packet. (0x2144DF1C is ~0xDEBB20E3, the register
// state after those 8 bytes, in zlib's convention; test_icrc.cpp checks it against crc32 of the bytes.)
constexpr uint32_t crc_of_lrh_ones = 0x2144DF1C;

// Largest masked prefix: IPv4 with maximal options (60) + UDP (8) + BTH (12).
constexpr size_t max_masked_prefix = 60 + 8 + 12;

}  // namespace

uint32_t compute_icrc(std::span<const uint8_t> packet, IpVersion version, size_t ip_header_length) {
  const size_t prefix = ip_header_length + 8 + 12;
  // Mask a copy of the variant fields; the payload is CRC'd in place, so the copy is at most 80 bytes.
  uint8_t masked[max_masked_prefix];
  std::memcpy(masked, packet.data(), prefix);
  if (version == IpVersion::v4) {
    masked[1] = 0xff;            // TOS
    masked[8] = 0xff;            // TTL
    masked[10] = masked[11] = 0xff;  // header checksum
  } else {
    masked[0] |= 0x0f;           // traffic class (low 4 bits of byte 0) ...
    masked[1] = masked[2] = masked[3] = 0xff;  // ... its high 4 bits and the flow label
    masked[7] = 0xff;            // hop limit
  }
  uint8_t* udp = masked + ip_header_length;
  udp[6] = udp[7] = 0xff;        // UDP checksum
  uint8_t* bth = udp + 8;
  bth[4] = 0xff;                 // FECN, BECN, reserved

  uint32_t crc = crc32_update(crc_of_lrh_ones, masked, prefix);
  return crc32_update(crc, packet.data() + prefix, packet.size() - prefix);
}

uint32_t load_icrc(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void store_icrc(uint8_t* p, uint32_t icrc) {
  p[0] = uint8_t(icrc);
  p[1] = uint8_t(icrc >> 8);
  p[2] = uint8_t(icrc >> 16);
  p[3] = uint8_t(icrc >> 24);
}

}  // namespace uroce::wire
