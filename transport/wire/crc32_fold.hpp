// CRC-32 (the reflected 0x04C11DB7 of Ethernet, zlib and the ICRC) by carry-less multiplication on
// AVX-512 registers, or on AVX2 registers where the CPU has VPCLMULQDQ without AVX-512: the building
// blocks crc32_copy.cpp and icrc.cpp share. Internal to transport/wire.
//
// How the folding works. A 16-byte lane loaded little-endian holds in bit i (8 x byte + bit) the term
// x^(127 - i) of the message polynomial, counted from the lane's end: the reflected CRC takes each byte's
// bit 0 first. Moving a lane n bits further along the message multiplies it by x^n, and only its residue
// modulo the CRC polynomial P matters, so a lane with 64-bit halves H (first, worth x^64) and L can be
// replaced by H * (x^(n+64) mod P) + L * (x^n mod P), at most 96 bits, XORed into the lane n bits on. A
// carry-less multiply of two reflected 64-bit values numbers its result one place short of a lane (its
// terms reach bit 126 only), hence one power fewer in each constant. The constants are computed here,
// not copied from a table; the tests compare every result with ISA-L's and zlib's CRCs.
//
// Leading zero bytes do not change a message's residue, and a CRC register R before a message is the
// same as XORing R into its first four bytes and starting from zero. So a message can be padded in front
// to whole registers, every lane folded straight to the last one in parallel (one multiply deep, instead
// of a chain of folds whose latencies add up), and the last lane reduced to the 32-bit register
// (reduce_lane: two folds, then Barrett's reduction).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace uroce::wire::fold {

// x^n mod P, P = x^32 + 0x04C11DB7 (CRC-32), with bit i holding the term x^i.
constexpr uint32_t x_pow_mod_p(unsigned n) {
  uint64_t r = 1;
  for (unsigned i = 0; i < n; ++i) {
    r <<= 1;
    if (r & (uint64_t(1) << 32)) r ^= 0x104C11DB7ull;
  }
  return uint32_t(r);
}

constexpr uint64_t reflect(uint64_t v, int bits) {
  uint64_t r = 0;
  for (int i = 0; i < bits; ++i) r |= ((v >> i) & 1) << (bits - 1 - i);
  return r;
}

constexpr uint64_t reflect64(uint64_t v) { return reflect(v, 64); }

// floor(x^64 / P): Barrett's constant (33 bits), by long division.
constexpr uint64_t x64_div_p() {
  uint64_t q = 0, r = 0;
  for (int i = 64; i >= 0; --i) {
    r = (r << 1) | (i == 64 ? 1 : 0);
    q <<= 1;
    if (r & (uint64_t(1) << 32)) {
      r ^= 0x104C11DB7ull;
      q |= 1;
    }
  }
  return q;
}

struct FoldConstant {
  uint64_t for_first_half;   // multiplies a lane's first 8 bytes
  uint64_t for_second_half;  // multiplies its last 8 bytes
};

constexpr FoldConstant fold_forward(unsigned bits) {
  return {reflect64(x_pow_mod_p(bits + 63)), reflect64(x_pow_mod_p(bits - 1))};
}

#if defined(__x86_64__)

#define UROCE_FOLD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,vpclmulqdq,pclmul")))
// The same folding on 32-byte registers, for CPUs with VPCLMULQDQ but no AVX-512: AMD Zen 3 (EPYC 7003),
// Intel's client cores from Alder Lake on.
#define UROCE_FOLD256_TARGET __attribute__((target("avx2,vpclmulqdq,pclmul")))
// Only what reduce_lane and the 16-byte fold need: callable (and inlined) from both of the above.
#define UROCE_REDUCE_TARGET __attribute__((target("pclmul")))

// Whether this CPU has what the folding needs (AVX-512 F/BW/VL and VPCLMULQDQ, with the OS saving ZMM
// state: GCC's and clang's checks include XCR0).
bool available();

// Whether it has what the 32-byte folding needs (AVX2 and VPCLMULQDQ, with the OS saving YMM state).
bool available_256();

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

// The four lanes of a register folded into its last one.
UROCE_FOLD_TARGET inline __m128i fold_to_last_lane(__m512i x) {
  constexpr FoldConstant by3 = fold_forward(384), by2 = fold_forward(256), by1 = fold_forward(128);
  const __m512i k = _mm512_set_epi64(0, 0, int64_t(by1.for_second_half), int64_t(by1.for_first_half),
                                     int64_t(by2.for_second_half), int64_t(by2.for_first_half),
                                     int64_t(by3.for_second_half), int64_t(by3.for_first_half));
  // Lane 3's constant is zero: its products vanish and it is added as it is.
  const __m512i t = fold(x, k, _mm512_setzero_si512());
  // (Masked extracts, even for lane 0: GCC 12's unmasked ones warn about an uninitialised operand.)
  const __m128i a =
      _mm_xor_si128(_mm512_maskz_extracti32x4_epi32(0xF, t, 0), _mm512_maskz_extracti32x4_epi32(0xF, t, 1));
  return _mm_ternarylogic_epi64(a, _mm512_maskz_extracti32x4_epi32(0xF, t, 2),
                                _mm512_maskz_extracti32x4_epi32(0xF, x, 3), 0x96);
}

UROCE_FOLD256_TARGET inline __m256i broadcast256(FoldConstant k) {
  return _mm256_set_epi64x(int64_t(k.for_second_half), int64_t(k.for_first_half), int64_t(k.for_second_half),
                           int64_t(k.for_first_half));
}

UROCE_FOLD256_TARGET inline __m256i fold(__m256i lanes, __m256i k, __m256i there) {
  return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(lanes, k, 0x00),
                                           _mm256_clmulepi64_epi128(lanes, k, 0x11)),
                          there);
}

// One 16-byte lane moved forward by the distance `k` was made for, XORed into `there` (PCLMULQDQ only).
UROCE_REDUCE_TARGET inline __m128i fold(__m128i lane, FoldConstant k, __m128i there) {
  const __m128i kk = _mm_set_epi64x(int64_t(k.for_second_half), int64_t(k.for_first_half));
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(lane, kk, 0x00), _mm_clmulepi64_si128(lane, kk, 0x11)),
                       there);
}

// The two lanes of a register folded into its last one.
UROCE_FOLD256_TARGET inline __m128i fold_to_last_lane(__m256i x) {
  return fold(_mm256_castsi256_si128(x), fold_forward(128), _mm256_extracti128_si256(x, 1));
}

// The CRC register (reflected, zlib's value before its final inversion) after the 16 bytes of `lane`
// from a register of zero: lane * x^32 mod P.
UROCE_REDUCE_TARGET inline uint32_t reduce_lane(__m128i lane) {
  // lane = H x^64 + L. First H x^96 + L x^32, which has the same residue and at most 96 bits ...
  constexpr uint64_t x95 = reflect64(x_pow_mod_p(95));
  const __m128i s = _mm_xor_si128(_mm_clmulepi64_si128(lane, _mm_set_epi64x(0, int64_t(x95)), 0x00),
                                  _mm_slli_si128(_mm_srli_si128(lane, 8), 4));
  // ... then its top 32 bits (lane bits 32-63) folded onto the lower 64: T, in the high half.
  constexpr uint64_t x63 = reflect64(x_pow_mod_p(63));
  const __m128i top = _mm_and_si128(s, _mm_set_epi64x(0, int64_t(0xFFFFFFFF00000000ull)));
  const __m128i t = _mm_xor_si128(s, _mm_clmulepi64_si128(top, _mm_set_epi64x(0, int64_t(x63)), 0x00));
  // Barrett: q = floor(T_hi * mu / x^32), T mod P = T_lo + (q P mod x^32); in reflected order the high
  // powers come first, so T_hi is the low half of T's word and q the low half of the product.
  constexpr uint64_t mu = reflect(x64_div_p(), 33);
  constexpr uint64_t p = reflect(0x104C11DB7ull, 33);
  const __m128i th = _mm_srli_si128(t, 8);  // T in the low 64 bits
  const __m128i q = _mm_clmulepi64_si128(_mm_and_si128(th, _mm_set_epi64x(0, 0xFFFFFFFF)),
                                         _mm_set_epi64x(0, int64_t(mu)), 0x00);
  const __m128i qp = _mm_clmulepi64_si128(_mm_and_si128(q, _mm_set_epi64x(0, 0xFFFFFFFF)),
                                          _mm_set_epi64x(0, int64_t(p)), 0x00);
  return uint32_t(uint64_t(_mm_cvtsi128_si64(_mm_xor_si128(th, qp))) >> 32);
}

#endif

}  // namespace uroce::wire::fold
