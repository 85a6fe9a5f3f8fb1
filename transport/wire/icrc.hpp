// The RoCEv2 Invariant CRC.
//
// CRC-32 over: 8 bytes of 0xFF standing in for the InfiniBand LRH, the IP header with its variant fields
// set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow label, hop limit), the UDP header
// with its checksum set to ones, the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF, and everything
// after the BTH up to the ICRC. Stored on the wire least-significant byte first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace uroce::wire {

enum class IpVersion : uint8_t { v4 = 4, v6 = 6 };

// `packet` runs from the first byte of the IP header to the last byte before the ICRC (the pad included);
// `ip_header_length` is 20+ for IPv4 (options are covered, unmasked), 40 for IPv6. Requires
// packet.size() >= ip_header_length + 8 + 12. The result continues like any CRC: given only the packet's
// first bytes (at least its headers), crc32_update() or crc32_copy() over the rest gives the ICRC.
uint32_t compute_icrc(std::span<const uint8_t> packet, IpVersion version, size_t ip_header_length);

namespace detail {
// The ways compute_icrc can take a packet of 40 to 256 bytes on this CPU, best first (the first is what it
// uses): AVX-512 registers, 16-byte lanes, a masked copy CRC'd in one call. For tests.
struct ShortIcrcKernel {
  const char* name;
  uint32_t (*fn)(std::span<const uint8_t> packet, IpVersion version, size_t ip_header_length);
};
std::vector<ShortIcrcKernel> short_icrc_kernels();
}  // namespace detail

// The ICRC as stored on the wire (4 bytes, least-significant first).
uint32_t load_icrc(const uint8_t* p);
void store_icrc(uint8_t* p, uint32_t icrc);

}  // namespace uroce::wire
