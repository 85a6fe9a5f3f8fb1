// CRC-32 candidates: the same frames through zlib, ISA-L and DPDK, one CRC call per whole frame.
#include <isa-l/crc.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <ostream>
#include <vector>

#include "bench/crc_dpdk.hpp"
#include "bench/sections.hpp"
#include "transport/wire/crc32.hpp"
#include "transport/wire/crc32_copy.hpp"
#include "transport/wire/crc32_fold.hpp"

// Two of the kernels ISA-L's crc32_gzip_refl dispatches to (exported by libisal.so.2, not declared in
// <isa-l/crc.h>): measured separately to show which one the dispatcher picks on this CPU.
extern "C" uint32_t crc32_gzip_refl_by16_10(uint32_t init_crc, const unsigned char* buf, uint64_t len);
extern "C" uint32_t crc32_gzip_refl_by8_02(uint32_t init_crc, const unsigned char* buf, uint64_t len);

namespace uroce::bench {

namespace {

bool has_avx512_vpclmul() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("vpclmulqdq");
}
bool has_avx_pclmul() { return __builtin_cpu_supports("avx") && __builtin_cpu_supports("pclmul"); }

const std::string row_zlib = "zlib crc32_z";
const std::string row_isal = "ISA-L crc32_gzip_refl";
const std::string row_isal_by16 = "ISA-L crc32_gzip_refl_by16_10 (AVX-512 kernel)";
const std::string row_isal_by8 = "ISA-L crc32_gzip_refl_by8_02 (AVX kernel)";
const std::string row_fold_256 = "uroce fold, AVX2 + VPCLMULQDQ (crc32_fold_256)";
const std::string row_crc32_update = "uroce crc32_update (what the ICRC uses here)";
const std::string row_dpdk_avx512 = "DPDK rte_net_crc_calc, RTE_NET_CRC_AVX512";
const std::string row_dpdk_sse42 = "DPDK rte_net_crc_calc, RTE_NET_CRC_SSE42";
const std::string row_dpdk_scalar = "DPDK rte_net_crc_calc, RTE_NET_CRC_SCALAR";

// How build_frame treats a payload: from registered memory (aligned, here the start of each frame of the
// pool) to its place in a frame, after Ethernet, IPv4, UDP and BTH (54 bytes in: not 64-byte aligned).
constexpr size_t payload_offset = 14 + 20 + 8 + 12;
size_t payload_length(const FramePool& pool) { return pool.frame_size - payload_offset - 4; }

template <class F>
uint64_t copy_crc_pass(const FramePool& pool, uint8_t* dst, F copy_crc) {
  const uint8_t* base = pool.storage.get();
  const size_t n = payload_length(pool), stride = pool.stride, count = pool.count;
  uint64_t sum = 0;
  for (size_t i = 0; i < count; ++i) sum += copy_crc(dst + i * stride + payload_offset, base + i * stride, n);
  return sum;
}

template <class F>
uint64_t crc_pass(const FramePool& pool, F crc) {
  const uint8_t* base = pool.storage.get();
  const size_t n = pool.frame_size, stride = pool.stride, count = pool.count;
  uint64_t sum = 0;
  for (size_t i = 0; i < count; ++i) sum += crc(base + i * stride, n);
  return sum;
}

uint64_t zlib_pass(const FramePool& pool) {
  return crc_pass(pool, [](const uint8_t* p, size_t n) { return uint32_t(crc32_z(0, p, n)); });
}

double dpdk_gbps(const FramePool& pool, double seconds) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  uint64_t passes = 0;
  uint64_t sum = 0;
  while (Clock::now() - t0 < std::chrono::duration<double>(seconds)) {
    sum += dpdk::crc_pass(pool.storage.get(), pool.stride, pool.count, pool.frame_size);
    ++passes;
  }
  keep(sum);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return double(passes * pool.count * pool.frame_size) / s / 1e9;
}

}  // namespace

std::vector<std::string> crc_row_names() {
  return {row_zlib,         row_isal,        row_isal_by16,  row_isal_by8,   row_fold_256,
          row_crc32_update, row_dpdk_avx512, row_dpdk_sse42, row_dpdk_scalar};
}

void add_copy_crc_measurements(Group& g, uint8_t* dst) {
  const FramePool& pool = *g.pool;
  const size_t n = payload_length(pool);
  const uint64_t expected =
      crc_pass(pool, [n](const uint8_t* p, size_t) { return uint32_t(crc32_z(0, p, n)); });
  const auto verify = [&pool, dst, n]() -> std::string {
    for (size_t i = 0; i < pool.count; ++i) {
      if (std::memcmp(dst + i * pool.stride + payload_offset, pool.frame(i), n) != 0) return "copy differs";
    }
    return "";
  };

  Measurement& two = g.add(row_copy_then_crc);
  two.frame_size = n;  // GB/s of payload bytes
  two.expected = expected;
  two.pass = [&pool, dst] {
    return copy_crc_pass(pool, dst, [](uint8_t* to, const uint8_t* from, size_t len) {
      std::memcpy(to, from, len);
      return wire::crc32_update(0, to, len);
    });
  };
  two.verify_after = verify;
  Measurement& one = g.add(row_crc32_copy);
  one.frame_size = n;
  one.expected = expected;
  one.pass = [&pool, dst] {
    return copy_crc_pass(pool, dst, [](uint8_t* to, const uint8_t* from, size_t len) {
      return wire::crc32_copy(0, to, from, len);
    });
  };
  one.verify_after = verify;
}

DpdkProbe probe_dpdk(const FramePool& pool) {
  DpdkProbe p;
  dpdk::quiet_logs();
  p.bitwidth_before = dpdk::max_simd_bitwidth();
  dpdk::select(dpdk::Alg::avx512);
  p.gbps_before = dpdk_gbps(pool, 0.05);
  dpdk::select(dpdk::Alg::scalar);
  p.gbps_scalar = dpdk_gbps(pool, 0.05);
  p.set_result = dpdk::set_max_simd_bitwidth(512);
  dpdk::select(dpdk::Alg::avx512);
  p.gbps_after = dpdk_gbps(pool, 0.05);
  return p;
}

bool check_crc_agreement(std::ostream& log) {
  std::vector<size_t> lengths = {0,   1,    2,    3,    4,    7,    8,    15,   16,   17,   31,   32,   33,
                                 44,  48,   62,   63,   64,   65,   127,  128,  129,  255,  256,  257,  511,
                                 512, 1023, 1024, 2047, 2048, 4095, 4096, 4097, 4136, 4154, 8191, 8192, 9000};
  uint64_t s = 0x9e3779b97f4a7c15ULL;
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  for (int i = 0; i < 300; ++i) lengths.push_back(size_t(next() % 9001));
  std::vector<uint8_t> buf(9000 + 64);
  for (auto& b : buf) b = uint8_t(next());

  const bool by16 = has_avx512_vpclmul(), by8 = has_avx_pclmul();
  size_t cases = 0;
  for (size_t len : lengths) {
    const size_t offset = size_t(next() % 64);
    const uint8_t* p = buf.data() + offset;
    const uint32_t ref = uint32_t(crc32_z(0, p, len));
    auto fail = [&](const char* who, uint32_t got) {
      log << "CRC MISMATCH: " << who << " length " << len << " offset " << offset << ": 0x" << std::hex << got
          << ", zlib 0x" << ref << std::dec << "\n";
      return false;
    };
    if (uint32_t v = crc32_gzip_refl(0, p, len); v != ref) return fail("ISA-L crc32_gzip_refl", v);
    if (by16) {
      if (uint32_t v = crc32_gzip_refl_by16_10(0, p, len); v != ref) return fail("ISA-L by16_10", v);
    }
    if (by8) {
      if (uint32_t v = crc32_gzip_refl_by8_02(0, p, len); v != ref) return fail("ISA-L by8_02", v);
    }
    for (auto [alg, who] :
         {std::pair{dpdk::Alg::scalar, "DPDK scalar"}, std::pair{dpdk::Alg::sse42, "DPDK SSE42"},
          std::pair{dpdk::Alg::avx512, "DPDK AVX512"}}) {
      dpdk::select(alg);
      if (uint32_t v = dpdk::crc32_eth(p, len); v != ref) return fail(who, v);
    }
    // Chaining (what compute_icrc relies on): crc(crc(0, a), b) == crc(0, a b), for ISA-L and zlib.
    const size_t split = len ? size_t(next() % (len + 1)) : 0;
    if (uint32_t v = crc32_gzip_refl(crc32_gzip_refl(0, p, split), p + split, len - split); v != ref) {
      return fail("ISA-L chained", v);
    }
    if (uint32_t v = uint32_t(crc32_z(crc32_z(0, p, split), p + split, len - split)); v != ref) {
      return fail("zlib chained", v);
    }
    ++cases;
  }
  log << "- CRC-32 agreement: zlib `crc32_z(0, ...)`, ISA-L `crc32_gzip_refl(0, ...)`"
      << (by16 ? " and its by16_10" : "") << (by8 ? " and by8_02 kernels" : "")
      << ", DPDK `rte_net_crc_calc(..., RTE_NET_CRC32_ETH)` with SCALAR, SSE42 and AVX512 give the same "
         "value on "
      << cases
      << " buffers (lengths 0-9000, offsets 0-63), and chained ISA-L/zlib calls equal one call: "
         "the three libraries use the same convention (reflected 0xEDB88320, init and final xor 0xFFFFFFFF). "
         "DPDK's API has no seed argument, so it cannot chain.\n";
  return true;
}

void add_crc_measurements(Group& g, bool all) {
  const FramePool& pool = *g.pool;
  const uint64_t expected = zlib_pass(pool);  // every candidate must produce zlib's CRCs, every pass

  auto add = [&](const std::string& name, auto pass) -> Measurement& {
    Measurement& m = g.add(name);
    m.expected = expected;
    m.pass = pass;
    return m;
  };
  if (all) add(row_zlib, [&pool] { return zlib_pass(pool); });
  add(row_isal, [&pool] {
    return crc_pass(pool, [](const uint8_t* p, size_t n) { return crc32_gzip_refl(0, p, n); });
  });
  if (all && has_avx512_vpclmul()) {
    add(row_isal_by16, [&pool] {
      return crc_pass(pool, [](const uint8_t* p, size_t n) { return crc32_gzip_refl_by16_10(0, p, n); });
    });
  }
  if (all && has_avx_pclmul()) {
    add(row_isal_by8, [&pool] {
      return crc_pass(pool, [](const uint8_t* p, size_t n) { return crc32_gzip_refl_by8_02(0, p, n); });
    });
  }
  if (all && wire::fold::available_256()) {
    add(row_fold_256, [&pool] {
      return crc_pass(pool, [](const uint8_t* p, size_t n) { return wire::detail::crc32_fold_256(0, p, n); });
    });
  }
  add(row_crc32_update, [&pool] {
    return crc_pass(pool, [](const uint8_t* p, size_t n) { return wire::crc32_update(0, p, n); });
  });
  const std::pair<dpdk::Alg, const std::string*> algs[] = {{dpdk::Alg::avx512, &row_dpdk_avx512},
                                                           {dpdk::Alg::sse42, &row_dpdk_sse42},
                                                           {dpdk::Alg::scalar, &row_dpdk_scalar}};
  for (auto [alg, name] : algs) {
    if (!all && alg != dpdk::Alg::avx512) continue;
    Measurement& m = add(*name, [&pool] {
      return dpdk::crc_pass(pool.storage.get(), pool.stride, pool.count, pool.frame_size);
    });
    m.prepare = [alg = alg] { dpdk::select(alg); };
  }
}

}  // namespace uroce::bench
