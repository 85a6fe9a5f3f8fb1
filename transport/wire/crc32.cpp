#include "transport/wire/crc32.hpp"

#include <immintrin.h>
#include <isa-l/crc.h>

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

}  // namespace

uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t len) {
  // crc32_gzip_refl has zlib's calling convention (it inverts on entry and exit), so CRCs chain the same.
  const uint32_t result = crc32_gzip_refl(crc, data, len);
  if (cpu_has_avx) clear_upper_vector_state();
  return result;
}

}  // namespace uroce::wire
