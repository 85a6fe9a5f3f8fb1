// DPDK's rte_net_crc, behind a plain interface so that only crc_dpdk.cpp sees DPDK's headers and
// compile flags (pkg-config libdpdk adds -march=corei7 and -include rte_config.h).
//
// No EAL: rte_net_crc needs none (rte_net_crc_set_alg only picks a function table), but it reads the
// "max SIMD bitwidth", which is 0 until rte_eal_init() or rte_vect_set_max_simd_bitwidth() sets it; at 0
// every SIMD path is refused and the scalar table is used. EAL's own default is 256, which also refuses
// the AVX-512 path unless --force-max-simd-bitwidth=512 is given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace uroce::bench::dpdk {

enum class Alg { scalar, sse42, avx512 };

// rte_net_crc_set_alg logs "Requirements not met" at INFO level when it falls back; the probe reports
// the fallback itself, so the benchmark keeps DPDK's log at NOTICE.
void quiet_logs();
uint16_t max_simd_bitwidth();
int set_max_simd_bitwidth(uint16_t bits);             // rte_vect_set_max_simd_bitwidth: 0 or -errno
void select(Alg alg);                                 // rte_net_crc_set_alg
uint32_t crc32_eth(const uint8_t* data, size_t len);  // rte_net_crc_calc(..., RTE_NET_CRC32_ETH)

// One benchmark pass: the sum of the CRCs of `count` buffers of `size` bytes placed `stride` apart.
uint64_t crc_pass(const uint8_t* base, size_t stride, size_t count, size_t size);

std::string version();  // rte_version()

}  // namespace uroce::bench::dpdk
