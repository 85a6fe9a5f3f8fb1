#include "transport/wire/crc32_copy.hpp"

#include <cstring>

#include "transport/wire/crc32.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace uroce::wire {

namespace {

// Two passes: what crc32_copy does without the folding loop.
uint32_t copy_then_crc(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  if (len != 0) std::memcpy(dst, src, len);
  return crc32_update(crc, dst, len);
}

}  // namespace

#if defined(__x86_64__)
namespace {

// How the folding works. A 16-byte lane loaded little-endian holds in bit i (8 x byte + bit) the term
// x^(127 - i) of the message polynomial, counted from the lane's end: the reflected CRC takes each byte's
// bit 0 first. Moving a lane n bits further along the message multiplies it by x^n, and only its residue
// modulo the CRC polynomial P matters, so a lane with 64-bit halves H (first, worth x^64) and L can be
// replaced by H * (x^(n+64) mod P) + L * (x^n mod P), at most 96 bits, XORed into the lane n bits on. A
// carry-less multiply of two reflected 64-bit values numbers its result one place short of a lane (its
// terms reach bit 126 only), hence one power fewer in each constant. The constants are computed here,
// not copied from a table; the tests compare every result with ISA-L's CRC.

// x^n mod P, P = x^32 + 0x04C11DB7 (CRC-32), with bit i holding the term x^i.
constexpr uint32_t x_pow_mod_p(unsigned n) {
  uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (uint64_t(1) << 32)) r ^= 0x104C11DB7ull;
  }
  return uint32_t(r);
}

constexpr uint64_t reflect64(uint64_t v) {
  uint64_t r = 0;
  for (int i = 0; i < 64; ++i) r |= ((v >> i) & 1) << (63 - i);
  return r;
}

struct FoldConstant {
  uint64_t for_first_half;   // multiplies a lane's first 8 bytes
  uint64_t for_second_half;  // multiplies its last 8 bytes
};

constexpr FoldConstant fold_forward(unsigned bits) {
  return {reflect64(x_pow_mod_p(bits + 63)), reflect64(x_pow_mod_p(bits - 1))};
}

// A block is four ZMM registers, 16 lanes: four independent chains keep the multiplier busy while each
// waits for its last product (eight were no faster). The bench's "copy + CRC" rows measure this against
// memcpy then ISA-L (docs/icrc.md).
constexpr size_t block_size = 256;
constexpr FoldConstant fold_by_block = fold_forward(8 * block_size);
constexpr FoldConstant fold_by_three_registers = fold_forward(8 * 192);
constexpr FoldConstant fold_by_two_registers = fold_forward(8 * 128);
constexpr FoldConstant fold_by_one_register = fold_forward(8 * 64);

#define UROCE_FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq")))

UROCE_FOLD_TARGET inline __m512i broadcast(FoldConstant k) {
  return _mm512_set_epi64(int64_t(k.for_second_half), int64_t(k.for_first_half), int64_t(k.for_second_half),
                          int64_t(k.for_first_half), int64_t(k.for_second_half), int64_t(k.for_first_half),
                          int64_t(k.for_second_half), int64_t(k.for_first_half));
}

// Each lane of `lanes` moved forward by the distance `k` was made for, XORed into `there`.
UROCE_FOLD_TARGET inline __m512i fold(__m512i lanes, __m512i k, __m512i there) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(lanes, k, 0x00), _mm512_clmulepi64_epi128(lanes, k, 0x11),
                                   there, 0x96);  // a ^ b ^ c
}

UROCE_FOLD_TARGET inline __m512i copy_block_part(uint8_t* dst, const uint8_t* src) {
  const __m512i v = _mm512_loadu_si512(src);
  _mm512_storeu_si512(dst, v);
  return v;
}

// len >= block_size. Named registers, not an array: at -O2 GCC kept an array of accumulators in memory.
UROCE_FOLD_TARGET uint32_t fold_and_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  const __m512i by_block = broadcast(fold_by_block);
  __m512i x0 = copy_block_part(dst, src);
  __m512i x1 = copy_block_part(dst + 64, src + 64);
  __m512i x2 = copy_block_part(dst + 128, src + 128);
  __m512i x3 = copy_block_part(dst + 192, src + 192);
  // The CRC register (the inverse of a zlib-convention CRC) is XORed into the first four bytes, which is
  // what starting a CRC from it does.
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(int(~crc))));

  size_t done = block_size;
  for (; len - done >= block_size; done += block_size) {
    x0 = fold(x0, by_block, copy_block_part(dst + done, src + done));
    x1 = fold(x1, by_block, copy_block_part(dst + done + 64, src + done + 64));
    x2 = fold(x2, by_block, copy_block_part(dst + done + 128, src + done + 128));
    x3 = fold(x3, by_block, copy_block_part(dst + done + 192, src + done + 192));
  }
  x3 = fold(x0, broadcast(fold_by_three_registers), x3);
  x3 = fold(x1, broadcast(fold_by_two_registers), x3);
  x3 = fold(x2, broadcast(fold_by_one_register), x3);

  // These 64 bytes have the residue of everything consumed: their CRC from a zero register (zlib's
  // convention: starting value 0xFFFFFFFF) is the CRC so far. ISA-L reduces them.
  alignas(64) uint8_t residue[64];
  _mm512_store_si512(residue, x3);
  const uint32_t folded = crc32_update(0xFFFFFFFFu, residue, sizeof residue);

  return copy_then_crc(folded, dst + done, src + done, len - done);
}

const bool cpu_folds = [] {
  __builtin_cpu_init();
  // GCC's and clang's checks also require the OS to save the ZMM registers (XCR0).
  return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("vpclmulqdq") != 0;
}();

}  // namespace

bool detail::crc32_copy_folds() { return cpu_folds; }

uint32_t detail::crc32_copy_folded(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  return len < block_size ? copy_then_crc(crc, dst, src, len) : fold_and_copy(crc, dst, src, len);
}

uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  if (cpu_folds && len >= block_size) return fold_and_copy(crc, dst, src, len);
  return copy_then_crc(crc, dst, src, len);
}

#else  // not x86-64: copy, then CRC

bool detail::crc32_copy_folds() { return false; }

uint32_t detail::crc32_copy_folded(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  return copy_then_crc(crc, dst, src, len);
}

uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  return copy_then_crc(crc, dst, src, len);
}

#endif

}  // namespace uroce::wire
