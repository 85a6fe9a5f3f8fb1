// Where compute_icrc's time goes, by measuring alternatives to its structure. compute_icrc used to make three
// chained CRC-32 calls (8 bytes of 0xFF; the IP/UDP/BTH headers, masked in a stack copy; the rest in place);
// it now starts from the constant CRC of the 8 bytes (idea 1 below) and makes two.
// Two effects dominate on small frames: each call starts from the previous call's result, so the calls'
// latencies add up instead of overlapping across frames; and the CRC kernel's wide loads of the masked
// copy wait for the byte stores that just wrote it (a store-to-load forwarding stall). The alternatives
// are measured only: transport/ is not changed by the benchmark. ISA-L is called through
// wire::crc32_update, as compute_icrc calls it, so that every idea gets its vzeroupper (crc32.cpp).
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "bench/crc_dpdk.hpp"
#include "bench/sections.hpp"
#include "transport/wire/crc32.hpp"
#include "transport/wire/icrc.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::bench {

namespace wire = uroce::wire;

namespace {

// Offsets in an IPv4 (20-byte header) RoCEv2 packet of the fields the ICRC masks.
constexpr size_t ip_tos = 1, ip_ttl = 8, ip_csum = 10, udp_csum = 20 + 6, bth_fecn = 20 + 8 + 4;
constexpr size_t masked_prefix = 20 + 8 + 12;

// The CRC after the 8 bytes of 0xFF (zlib convention, i.e. finalised): a constant.
const uint32_t lrh_state =
    uint32_t(crc32_z(0, reinterpret_cast<const Bytef*>("\xff\xff\xff\xff\xff\xff\xff\xff"), 8));

void mask(uint8_t* ip) {
  ip[ip_tos] = ip[ip_ttl] = ip[ip_csum] = ip[ip_csum + 1] = ip[udp_csum] = ip[udp_csum + 1] = ip[bth_fecn] =
      0xff;
}

constexpr size_t burst = 32;  // a typical DPDK rx burst

struct Saved {
  uint8_t lrh[8];
  uint8_t v[7];
};

void save_and_mask(uint8_t* ip, Saved& s) {
  s.v[0] = ip[ip_tos], s.v[1] = ip[ip_ttl], s.v[2] = ip[ip_csum], s.v[3] = ip[ip_csum + 1];
  s.v[4] = ip[udp_csum], s.v[5] = ip[udp_csum + 1], s.v[6] = ip[bth_fecn];
  mask(ip);
}

void restore(uint8_t* ip, const Saved& s) {
  ip[ip_tos] = s.v[0], ip[ip_ttl] = s.v[1], ip[ip_csum] = s.v[2], ip[ip_csum + 1] = s.v[3];
  ip[udp_csum] = s.v[4], ip[udp_csum + 1] = s.v[5], ip[bth_fecn] = s.v[6];
}

// Idea 1, per frame: the LRH state as a constant (no 8-byte call) and a fixed-size copy of the 40 masked
// bytes: two chained calls instead of three.
uint32_t icrc_two_calls(const uint8_t* ip, size_t len) {
  uint8_t m[masked_prefix];
  std::memcpy(m, ip, masked_prefix);
  mask(m);
  const uint32_t crc = wire::crc32_update(lrh_state, m, masked_prefix);
  return wire::crc32_update(crc, ip + masked_prefix, len - masked_prefix);
}

// The pool in bursts: `per_burst(ips, n, len, crcs)` computes the ICRCs of up to `burst` frames.
template <class F>
uint64_t count_ok_bursts(const FramePool& pool, F per_burst) {
  const size_t n = pool.frame_size, count = pool.count;
  const size_t len = n - 14 - wire::icrc_size;  // IP header .. pad
  uint64_t ok = 0;
  for (size_t i0 = 0; i0 < count; i0 += burst) {
    const size_t k = std::min(burst, count - i0);
    uint8_t* ips[burst];
    uint32_t crcs[burst];
    for (size_t j = 0; j < k; ++j) ips[j] = pool.writable_frame(i0 + j) + 14;
    per_burst(ips, k, len, crcs);
    for (size_t j = 0; j < k; ++j) ok += crcs[j] == wire::load_icrc(ips[j] + len);
  }
  return ok;
}

// Idea 2: a burst's masked header copies are written first and CRC'd afterwards, so the CRC's wide loads
// no longer wait on the byte stores that just wrote them (store-to-load forwarding).
void burst_copies(uint8_t* const* ips, size_t k, size_t len, uint32_t* crcs) {
  alignas(64) uint8_t scratch[burst][64];
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(scratch[j], ips[j], masked_prefix);
    mask(scratch[j]);
  }
  for (size_t j = 0; j < k; ++j) {
    const uint32_t crc = wire::crc32_update(lrh_state, scratch[j], masked_prefix);
    crcs[j] = wire::crc32_update(crc, ips[j] + masked_prefix, len - masked_prefix);
  }
}

// Idea 3: mask the 7 variant bytes in the receive buffers of a burst, then one call per frame from the LRH
// state, then restore the bytes.
void burst_in_place(uint8_t* const* ips, size_t k, size_t len, uint32_t* crcs) {
  Saved saved[burst];
  for (size_t j = 0; j < k; ++j) save_and_mask(ips[j], saved[j]);
  for (size_t j = 0; j < k; ++j) crcs[j] = wire::crc32_update(lrh_state, ips[j], len);
  for (size_t j = 0; j < k; ++j) restore(ips[j], saved[j]);
}

// Idea 4: as idea 3, with the 8 bytes of 0xFF written over the end of the Ethernet header, so that a CRC
// function without a seed argument (DPDK's) computes the whole ICRC in one call.
void burst_in_place_dpdk(uint8_t* const* ips, size_t k, size_t len, uint32_t* crcs) {
  Saved saved[burst];
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(saved[j].lrh, ips[j] - 8, 8);
    std::memset(ips[j] - 8, 0xff, 8);
    save_and_mask(ips[j], saved[j]);
  }
  for (size_t j = 0; j < k; ++j) crcs[j] = dpdk::crc32_eth(ips[j] - 8, len + 8);
  for (size_t j = 0; j < k; ++j) {
    restore(ips[j], saved[j]);
    std::memcpy(ips[j] - 8, saved[j].lrh, 8);
  }
}

const std::string row_two_calls = "idea 1: LRH state as a constant (2 chained calls, masked copy)";
const std::string row_burst_copies = "idea 2: idea 1 per burst of 32, masked copies made first";
const std::string row_burst_in_place = "idea 3: burst of 32, masked in place, 1 ISA-L call each";
const std::string row_burst_dpdk = "idea 4: idea 3 + 0xFF x 8 over Ethernet, 1 DPDK AVX512 call each";

// One pass: count the frames whose recomputed ICRC equals the one on the wire.
template <class F>
uint64_t count_ok(const FramePool& pool, F icrc) {
  const size_t n = pool.frame_size, count = pool.count;
  const size_t len = n - 14 - wire::icrc_size;  // IP header .. pad
  uint64_t ok = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* frame = pool.frame(i);
    ok += icrc(frame + 14, len) == wire::load_icrc(frame + n - wire::icrc_size);
  }
  return ok;
}

}  // namespace

std::vector<std::string> icrc_idea_row_names() {
  return {row_two_calls, row_burst_copies, row_burst_in_place, row_burst_dpdk};
}

void add_icrc_idea_measurements(Group& g) {
  const FramePool& pool = *g.pool;
  auto add = [&](const std::string& name, auto pass) -> Measurement& {
    Measurement& m = g.add(name);
    m.expected = pool.count;
    m.pass = pass;
    return m;
  };
  add(row_two_calls, [&pool] { return count_ok(pool, icrc_two_calls); });
  add(row_burst_copies, [&pool] { return count_ok_bursts(pool, burst_copies); });
  add(row_burst_in_place, [&pool] { return count_ok_bursts(pool, burst_in_place); });
  Measurement& m = add(row_burst_dpdk, [&pool] { return count_ok_bursts(pool, burst_in_place_dpdk); });
  m.prepare = [] { dpdk::select(dpdk::Alg::avx512); };
}

}  // namespace uroce::bench
