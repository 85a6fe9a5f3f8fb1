#include "bench/crc_dpdk.hpp"

#include <rte_log.h>
#include <rte_net_crc.h>
#include <rte_version.h>

// DPDK 22.11's <rte_vect.h> declares these without extern "C" (and pulls in the x86 intrinsics headers):
// declare the two exported EAL functions here instead. They are "experimental" in 22.11 and documented as
// callable before rte_eal_init().
extern "C" uint16_t rte_vect_get_max_simd_bitwidth(void);
extern "C" int rte_vect_set_max_simd_bitwidth(uint16_t bitwidth);

namespace uroce::bench::dpdk {

void quiet_logs() { rte_log_set_global_level(RTE_LOG_NOTICE); }

uint16_t max_simd_bitwidth() { return rte_vect_get_max_simd_bitwidth(); }

int set_max_simd_bitwidth(uint16_t bits) { return rte_vect_set_max_simd_bitwidth(bits); }

void select(Alg alg) {
  switch (alg) {
    case Alg::scalar: rte_net_crc_set_alg(RTE_NET_CRC_SCALAR); break;
    case Alg::sse42: rte_net_crc_set_alg(RTE_NET_CRC_SSE42); break;
    case Alg::avx512: rte_net_crc_set_alg(RTE_NET_CRC_AVX512); break;
  }
}

uint32_t crc32_eth(const uint8_t* data, size_t len) {
  return rte_net_crc_calc(data, uint32_t(len), RTE_NET_CRC32_ETH);
}

uint64_t crc_pass(const uint8_t* base, size_t stride, size_t count, size_t size) {
  uint64_t sum = 0;
  for (size_t i = 0; i < count; ++i)
    sum += rte_net_crc_calc(base + i * stride, uint32_t(size), RTE_NET_CRC32_ETH);
  return sum;
}

std::string version() { return rte_version(); }

}  // namespace uroce::bench::dpdk
