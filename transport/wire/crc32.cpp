#include "transport/wire/crc32.hpp"

#include <immintrin.h>
#include <isa-l/crc.h>

#include "transport/wire/crc32_copy.hpp"
#include "transport/wire/crc32_fold.hpp"

namespace uroce::wire {

namespace {

// ISA-L's AVX-512 CRC kernel returns with the upper halves of the vector registers still in use (it does
// not end with vzeroupper). On Intel cores every legacy-SSE instruction after that pays for the mixed
// register state, and all of our code, built for the x86-64 baseline, is legacy SSE: on a Xeon (family 6
// model 207) compute_icrc's 16-byte masked copy made a 4 KiB packet's ICRC take 265 ns instead of 90
// (docs/icrc.md, "The vzeroupper after each call"). Zen cores have no such penalty. vzeroupper needs AVX,
// which every CPU that runs a kernel leaving the state dirty has.
__attribute__((target("avx"))) void clear_upper_vector_state() { _mm256_zeroupper(); }

const bool cpu_has_avx = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") != 0;
}();

#if defined(__x86_64__)
// ISA-L 2.30 has no kernel for 32-byte VPCLMULQDQ: without AVX-512 it folds 16 bytes at a time, at half
// the speed of our AVX2 loop on a Zen 3 (4 KiB: 390 ns against 200; docs/icrc.md). From one of its
// blocks on, that loop takes over on such CPUs.
const bool fold_256_instead = !fold::available() && fold::available_256();
constexpr size_t fold_256_from = 256;
#endif

}  // namespace

uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t len) {
#if defined(__x86_64__)
  if (len >= fold_256_from && fold_256_instead) return detail::crc32_fold_256(crc, data, len);
#endif
  // crc32_gzip_refl has zlib's calling convention (it inverts on entry and exit), so CRCs chain the same.
  const uint32_t result = crc32_gzip_refl(crc, data, len);
  if (cpu_has_avx) clear_upper_vector_state();
  return result;
}

}  // namespace uroce::wire
