#include "transport/wire/crc32_copy.hpp"

#include <cstring>
#include <vector>

#include "transport/wire/crc32.hpp"
#include "transport/wire/crc32_fold.hpp"

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

using fold::FoldConstant;
using fold::fold_forward;

// A block is four ZMM registers, 16 lanes: four independent chains keep the multiplier busy while each
// waits for its last product (eight were no faster). The bench's "copy + CRC" rows measure this against
// memcpy then ISA-L (docs/icrc.md).
constexpr size_t block_size = 256;
constexpr FoldConstant fold_by_block = fold_forward(8 * block_size);
constexpr FoldConstant fold_by_three_registers = fold_forward(8 * 192);
constexpr FoldConstant fold_by_two_registers = fold_forward(8 * 128);
constexpr FoldConstant fold_by_one_register = fold_forward(8 * 64);

UROCE_FOLD_TARGET inline __m512i copy_block_part(uint8_t* dst, const uint8_t* src) {
  const __m512i v = _mm512_loadu_si512(src);
  _mm512_storeu_si512(dst, v);
  return v;
}

// len >= block_size. Named registers, not an array: at -O2 GCC kept an array of accumulators in memory.
UROCE_FOLD_TARGET uint32_t fold_and_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  const __m512i by_block = fold::broadcast(fold_by_block);
  __m512i x0 = copy_block_part(dst, src);
  __m512i x1 = copy_block_part(dst + 64, src + 64);
  __m512i x2 = copy_block_part(dst + 128, src + 128);
  __m512i x3 = copy_block_part(dst + 192, src + 192);
  // The CRC register (the inverse of a zlib-convention CRC) is XORed into the first four bytes, which is
  // what starting a CRC from it does.
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(int(~crc))));

  size_t done = block_size;
  for (; len - done >= block_size; done += block_size) {
    x0 = fold::fold(x0, by_block, copy_block_part(dst + done, src + done));
    x1 = fold::fold(x1, by_block, copy_block_part(dst + done + 64, src + done + 64));
    x2 = fold::fold(x2, by_block, copy_block_part(dst + done + 128, src + done + 128));
    x3 = fold::fold(x3, by_block, copy_block_part(dst + done + 192, src + done + 192));
  }
  x3 = fold::fold(x0, fold::broadcast(fold_by_three_registers), x3);
  x3 = fold::fold(x1, fold::broadcast(fold_by_two_registers), x3);
  x3 = fold::fold(x2, fold::broadcast(fold_by_one_register), x3);

  // These 64 bytes have the residue of everything consumed: the register their CRC leaves from a zero
  // register is the CRC so far (zlib's convention inverts it).
  const uint32_t folded = ~fold::reduce_lane(fold::fold_to_last_lane(x3));

  return copy_then_crc(folded, dst + done, src + done, len - done);
}

// The same loop on 32-byte registers, for CPUs without AVX-512: eight of them make the block, so that as
// many products are in flight as with four ZMM registers. With `copy` false it only folds (crc32_update's
// kernel on such CPUs, crc32.cpp) and `dst` is unused.
// (dst is null without the copy, so no offset is applied to it then.)
template <bool copy>
UROCE_FOLD256_TARGET inline __m256i take_256(uint8_t* dst, const uint8_t* src, size_t at) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + at));
  if constexpr (copy) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + at), v);
  return v;
}

template <bool copy>
UROCE_FOLD256_TARGET uint32_t fold_256(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  const __m256i by_block = fold::broadcast256(fold_by_block);
  __m256i x[8];
#pragma GCC unroll 8
  for (size_t i = 0; i < 8; ++i) x[i] = take_256<copy>(dst, src, 32 * i);
  x[0] = _mm256_xor_si256(x[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128(int(~crc))));
  size_t done = block_size;
  for (; len - done >= block_size; done += block_size) {
#pragma GCC unroll 8
    for (size_t i = 0; i < 8; ++i) {
      x[i] = fold::fold(x[i], by_block, take_256<copy>(dst, src, done + 32 * i));
    }
  }
  // Every register straight onto the last, each by its own distance: independent products.
  constexpr FoldConstant by_registers[7] = {fold_forward(8 * 224), fold_forward(8 * 192), fold_forward(8 * 160),
                                            fold_forward(8 * 128), fold_forward(8 * 96),  fold_forward(8 * 64),
                                            fold_forward(8 * 32)};
  __m256i last = x[7];
#pragma GCC unroll 7
  for (size_t i = 0; i < 7; ++i) last = fold::fold(x[i], fold::broadcast256(by_registers[i]), last);
  const uint32_t folded = ~fold::reduce_lane(fold::fold_to_last_lane(last));
  if constexpr (copy) return copy_then_crc(folded, dst + done, src + done, len - done);
  return crc32_update(folded, src + done, len - done);
}

const bool cpu_folds = fold::available();
const bool cpu_folds_256 = fold::available_256();

}  // namespace

bool fold::available() {
  static const bool yes = [] {
    __builtin_cpu_init();
    // GCC's and clang's checks also require the OS to save the ZMM registers (XCR0).
    return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0 &&
           __builtin_cpu_supports("avx512vl") != 0 && __builtin_cpu_supports("vpclmulqdq") != 0;
  }();
  return yes;
}

bool fold::available_256() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("vpclmulqdq") != 0;
  }();
  return yes;
}

std::vector<detail::CopyKernel> detail::crc32_copy_kernels() {
  std::vector<CopyKernel> k;
  // Any length: below a block, what crc32_copy does there.
  if (cpu_folds) {
    k.push_back({"AVX-512", [](uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
                   return len < block_size ? copy_then_crc(crc, dst, src, len) : fold_and_copy(crc, dst, src, len);
                 }});
  }
  if (cpu_folds_256) {
    k.push_back({"AVX2", [](uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
                   return len < block_size ? copy_then_crc(crc, dst, src, len) : fold_256<true>(crc, dst, src, len);
                 }});
  }
  return k;
}

uint32_t detail::crc32_fold_256(uint32_t crc, const uint8_t* src, size_t len) {
  return len < block_size ? crc32_update(crc, src, len) : fold_256<false>(crc, nullptr, src, len);
}

uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  if (len >= block_size) {
    if (cpu_folds) return fold_and_copy(crc, dst, src, len);
    if (cpu_folds_256) return fold_256<true>(crc, dst, src, len);
  }
  return copy_then_crc(crc, dst, src, len);
}

#else  // not x86-64: copy, then CRC

std::vector<detail::CopyKernel> detail::crc32_copy_kernels() { return {}; }

uint32_t detail::crc32_fold_256(uint32_t crc, const uint8_t* src, size_t len) { return crc32_update(crc, src, len); }

uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len) {
  return copy_then_crc(crc, dst, src, len);
}

#endif

}  // namespace uroce::wire
