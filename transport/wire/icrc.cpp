#include "transport/wire/icrc.hpp"

#include <array>
#include <cstring>
#include <vector>

#include "transport/wire/crc32.hpp"
#include "transport/wire/crc32_fold.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::wire {

namespace {

// Every ICRC starts with 8 bytes of 0xFF standing in for the InfiniBand LRH. Their CRC is a constant:
// continuing from it saves a dependent CRC call per packet. (0x2144DF1C is ~0xDEBB20E3, the register
// state after those 8 bytes, in zlib's convention; test_icrc.cpp checks it against crc32 of the bytes.)
constexpr uint32_t crc_of_lrh_ones = 0x2144DF1C;

// Largest masked prefix: IPv4 with maximal options (60) + UDP (8) + BTH (12).
constexpr size_t max_masked_prefix = 60 + 8 + 12;

// Packets up to this size are folded in registers where the CPU can (icrc_folded, below), and otherwise
// copied whole and CRC'd in one call: for small packets the cost of a CRC call is mostly fixed, and two
// chained calls add their latencies, which costs more than copying a few hundred bytes (docs/icrc.md,
// "Where the ICRC time goes"). Larger packets are CRC'd in place after the masked prefix, so that no
// payload is copied.
constexpr size_t max_copied_packet = 256;

// Sets the fields of the IP, UDP and BTH headers that the ICRC does not cover to ones, in a copy. On a
// zeroed buffer it makes the OR mask of those fields.
constexpr void mask_variant_fields(uint8_t* masked, IpVersion version, size_t ip_header_length) {
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
}

// The masked copy is made 16 bytes at a time, each chunk ORed with its part of a constant mask and
// stored whole. The CRC kernel reads the copy back at once with 16-byte loads; had the masks been
// written as single bytes over a copy, those loads would wait for the stores to reach the cache (a
// store-forwarding stall) instead of taking the data from the store buffer.
using Chunk = uint8_t __attribute__((vector_size(16)));

struct OrMask {
  uint8_t bytes[max_copied_packet] = {};  // zero past the masked prefix
};

constexpr OrMask or_mask(IpVersion version, size_t ip_header_length) {
  OrMask m;
  mask_variant_fields(m.bytes, version, ip_header_length);
  return m;
}

// The header layouts a mask depends on: IPv4 with each possible header length (20 to 60 bytes, options
// included), then IPv6. per_layout() makes a table of something for each, header_layout() finds an entry.
constexpr size_t header_layouts = 12;

constexpr size_t header_layout(IpVersion version, size_t ip_header_length) {
  return version == IpVersion::v6 ? header_layouts - 1 : (ip_header_length - 20) / 4;
}

template <class Make>
constexpr auto per_layout(Make make) {
  std::array<decltype(make(IpVersion::v4, 20)), header_layouts> table{};
  for (size_t i = 0; i + 1 < header_layouts; ++i) table[i] = make(IpVersion::v4, 20 + 4 * i);
  table[header_layouts - 1] = make(IpVersion::v6, ipv6_header_size);
  return table;
}

constexpr auto or_masks = per_layout(or_mask);

const OrMask& or_mask_for(IpVersion version, size_t ip_header_length) {
  return or_masks[header_layout(version, ip_header_length)];
}

Chunk load_chunk(const uint8_t* p) {
  Chunk c;
  std::memcpy(&c, p, sizeof c);
  return c;
}

void store_chunk(uint8_t* p, Chunk c) { std::memcpy(p, &c, sizeof c); }

// Copies `n` (16 <= n <= max_copied_packet) bytes with the variant fields masked. `mask` must be the one
// for the packet's IP version and header length (20-60 bytes, a multiple of 4, for IPv4).
void copy_masked(uint8_t* out, const uint8_t* in, size_t n, const OrMask& mask) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) store_chunk(out + i, load_chunk(in + i) | load_chunk(mask.bytes + i));
  // The rest as the last 16 bytes, overlapping the chunk before.
  if (i < n) store_chunk(out + n - 16, load_chunk(in + n - 16) | load_chunk(mask.bytes + n - 16));
}

#if defined(__x86_64__)
// The folded path for small packets (crc32_fold.hpp). The CRC of the eight 0xFF bytes with zlib's start
// equals, by the rule that a register can be XORed into a message's first bytes, a zero register over
// 00 00 00 00 FF FF FF FF, and leading zeros count for nothing: so the ICRC is the inverted register after
// FF FF FF FF followed by the masked packet, from zero. That message, padded in front to whole 64-byte
// registers, is loaded straight from the packet (masked loads keep out the bytes before it) and ORed with
// an image of the four 0xFF bytes and the variant-field mask laid out the same way: no copy to reread,
// and every register is folded to the last in parallel.
struct FoldImage {
  // [64, 68): the 0xFF bytes; then the OR mask of the packet's first bytes; zero around them, so that
  // each register's slice of the image can be loaded whole.
  alignas(64) uint8_t bytes[64 + 4 + max_copied_packet + 60] = {};
};

constexpr FoldImage fold_image(IpVersion version, size_t ip_header_length) {
  FoldImage m;
  for (int i = 0; i < 4; ++i) m.bytes[64 + i] = 0xff;
  mask_variant_fields(m.bytes + 68, version, ip_header_length);
  return m;
}

constexpr auto fold_images = per_layout(fold_image);

// Register r of the message (FF FF FF FF, then the packet's n bytes) padded in front by `pad` zeros: message
// bytes [64 r - pad, 64 r - pad + 64), masked.
UROCE_FOLD_TARGET inline __m512i message_register(const uint8_t* packet, size_t pad, size_t r, const FoldImage& image) {
  const ptrdiff_t from = ptrdiff_t(64 * r) - ptrdiff_t(pad) - 4;  // its first byte, in packet offsets
  const __mmask64 inside = from >= 0 ? ~__mmask64(0) : from <= -64 ? __mmask64(0) : ~__mmask64(0) << -from;
  // Lanes outside the mask are neither read nor able to fault, even before the packet's first byte.
  const void* at = reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(packet) + uintptr_t(from));
  return _mm512_or_si512(_mm512_maskz_loadu_epi8(inside, at), _mm512_loadu_si512(image.bytes + 64 + 64 * r - pad));
}

// 40 <= n <= max_copied_packet (every packet has IP, UDP and BTH headers).
UROCE_FOLD_TARGET uint32_t icrc_folded(const uint8_t* packet, size_t n, const FoldImage& image) {
  constexpr fold::FoldConstant by_registers[] = {fold::fold_forward(512), fold::fold_forward(1024),
                                                 fold::fold_forward(1536), fold::fold_forward(2048)};
  const size_t message = n + 4;
  const size_t registers = (message + 63) / 64;
  const size_t pad = registers * 64 - message;
  const size_t last = registers - 1;
  __m512i acc = message_register(packet, pad, last, image);
  for (size_t r = 0; r < last; ++r) {
    acc = fold::fold(message_register(packet, pad, r, image), fold::broadcast(by_registers[last - 1 - r]), acc);
  }
  return ~fold::reduce_lane(fold::fold_to_last_lane(acc));
}

// The same folding one 16-byte lane at a time, for CPUs without AVX-512 (every x86-64 CPU with PCLMULQDQ):
// there are no byte-masked loads, so the message is the packet alone, and the eight 0xFF bytes enter as
// the register they leave (~crc_of_lrh_ones) XORed into the packet's first four bytes. The message is
// padded in front to whole lanes: the first lane's r = n mod 16 bytes are loaded from the packet's start
// and shuffled to the lane's top (all 16 when r is 0). Every lane is folded straight onto the last.
#define UROCE_LANE_FOLD_TARGET __attribute__((target("pclmul,ssse3")))

constexpr size_t max_lanes = max_copied_packet / 16;

constexpr std::array<fold::FoldConstant, max_lanes> lane_distances = [] {
  std::array<fold::FoldConstant, max_lanes> k{};
  for (size_t d = 1; d < max_lanes; ++d) k[d] = fold::fold_forward(unsigned(128 * d));
  return k;
}();

// The register the 0xFF bytes leave, little-endian, where the packet's first four bytes are, then zeros:
// loaded at a lane's packet offset (0 to 16), it is what XORs that lane's share of those bytes.
struct RegisterImage {
  alignas(16) uint8_t bytes[32] = {};
};
constexpr RegisterImage lrh_register_image = [] {
  RegisterImage m;
  for (int i = 0; i < 4; ++i) m.bytes[i] = uint8_t(~crc_of_lrh_ones >> (8 * i));
  return m;
}();

// pshufb controls: loaded from shift_control + 16 - s, bytes j >= s take byte j - s and the rest zero.
alignas(16) constexpr uint8_t shift_control[32] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                                   0x80, 0x80, 0x80, 0x80, 0x80, 0,    1,    2,    3,    4,    5,
                                                   6,    7,    8,    9,    10,   11,   12,   13,   14,   15};

UROCE_LANE_FOLD_TARGET inline __m128i masked_lane(const uint8_t* packet, const OrMask& mask, size_t at) {
  return _mm_or_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packet + at)),
                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(mask.bytes + at)));
}

UROCE_LANE_FOLD_TARGET inline __m128i register_share(size_t at) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(lrh_register_image.bytes + at));
}

// 40 <= n <= max_copied_packet.
UROCE_LANE_FOLD_TARGET uint32_t icrc_lane_folded(const uint8_t* packet, size_t n, const OrMask& mask) {
  const size_t lanes = (n + 15) / 16;
  const size_t first = n - 16 * (lanes - 1);  // bytes in the first lane, 1 to 16
  __m128i lane0 = _mm_xor_si128(masked_lane(packet, mask, 0), register_share(0));
  if (first < 16) {
    lane0 = _mm_shuffle_epi8(lane0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(shift_control + first)));
  }
  // A first lane of fewer than four bytes leaves the rest of the register's bytes to the second.
  const __m128i lane1 = _mm_xor_si128(masked_lane(packet, mask, first), register_share(first));
  __m128i acc = masked_lane(packet, mask, n - 16);  // n >= 40: three lanes at least
  acc = fold::fold(lane0, lane_distances[lanes - 1], acc);
  acc = fold::fold(lane1, lane_distances[lanes - 2], acc);
  for (size_t k = 2; k + 1 < lanes; ++k) {
    acc = fold::fold(masked_lane(packet, mask, first + 16 * (k - 1)), lane_distances[lanes - 1 - k], acc);
  }
  return ~fold::reduce_lane(acc);
}

const bool cpu_folds_lanes = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") != 0 && __builtin_cpu_supports("ssse3") != 0;
}();
#endif

// Where neither folding can run: a masked copy, CRC'd in one call. n <= max_copied_packet.
uint32_t icrc_copied(const uint8_t* packet, size_t n, const OrMask& mask) {
  uint8_t copy[max_copied_packet];
  copy_masked(copy, packet, n, mask);
  return crc32_update(crc_of_lrh_ones, copy, n);
}

}  // namespace

std::vector<detail::ShortIcrcKernel> detail::short_icrc_kernels() {
  std::vector<ShortIcrcKernel> k;
#if defined(__x86_64__)
  if (fold::available()) {
    k.push_back({"AVX-512 registers", [](std::span<const uint8_t> p, IpVersion v, size_t ihl) {
                   return icrc_folded(p.data(), p.size(), fold_images[header_layout(v, ihl)]);
                 }});
  }
  if (cpu_folds_lanes) {
    k.push_back({"16-byte lanes", [](std::span<const uint8_t> p, IpVersion v, size_t ihl) {
                   return icrc_lane_folded(p.data(), p.size(), or_mask_for(v, ihl));
                 }});
  }
#endif
  k.push_back({"masked copy", [](std::span<const uint8_t> p, IpVersion v, size_t ihl) {
                 return icrc_copied(p.data(), p.size(), or_mask_for(v, ihl));
               }});
  return k;
}

uint32_t compute_icrc(std::span<const uint8_t> packet, IpVersion version, size_t ip_header_length) {
  if (packet.size() <= max_copied_packet) {
#if defined(__x86_64__)
    if (packet.size() >= 40 && fold::available()) {
      return icrc_folded(packet.data(), packet.size(), fold_images[header_layout(version, ip_header_length)]);
    }
    if (packet.size() >= 40 && cpu_folds_lanes) {
      return icrc_lane_folded(packet.data(), packet.size(), or_mask_for(version, ip_header_length));
    }
#endif
    return icrc_copied(packet.data(), packet.size(), or_mask_for(version, ip_header_length));
  }
  // Mask a copy of the variant fields; the payload is CRC'd in place, so the copy is at most 80 bytes.
  const size_t prefix = ip_header_length + 8 + 12;
  uint8_t masked[max_masked_prefix];
  copy_masked(masked, packet.data(), prefix, or_mask_for(version, ip_header_length));
  const uint32_t crc = crc32_update(crc_of_lrh_ones, masked, prefix);
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
