// The benchmark's sections: each adds its measurements to a group (one frame pool), so that all rows of a
// pool, the memcpy reference included, run interleaved in the same rounds.
#pragma once

#include <cstdint>
#include <deque>
#include <iosfwd>
#include <string>
#include <vector>

#include "bench/frames.hpp"
#include "bench/harness.hpp"

namespace uroce::bench {

struct Group {
  const FramePool* pool = nullptr;
  std::deque<Measurement> rows;  // stable addresses

  Measurement& add(std::string name);
  Measurement* find(const std::string& name);
};

// Row names shared between the sections and the report.
inline const std::string row_memcpy = "memcpy (reference)";
inline const std::string row_memcpy_hot = "memcpy into one L1-resident buffer";
inline const std::string row_parse = "parse_frame";
inline const std::string row_parse_icrc = "parse_frame + icrc_ok";
inline const std::string row_icrc = "compute_icrc alone (no parse)";

// bench_codec.cpp: memcpy references, parse_frame, parse_frame + icrc_ok, compute_icrc alone.
// `dst` is a destination pool of the same size and layout as the group's pool.
void add_codec_measurements(Group& g, uint8_t* dst, uint8_t* hot_dst);

// Checks every frame of a pool: parses as RoCEv2, icrc_ok, and the ICRC equals reference_icrc().
// Returns an error description or "".
std::string verify_pool(const FramePool& pool);

// bench_crc_candidates.cpp.

// What rte_net_crc does without EAL; must run before anything else touches rte_net_crc's state.
struct DpdkProbe {
  uint16_t bitwidth_before = 0;  // rte_vect_get_max_simd_bitwidth() with no EAL
  double gbps_before = 0;        // rte_net_crc_set_alg(AVX512) at that bitwidth
  double gbps_scalar = 0;        // rte_net_crc_set_alg(SCALAR), for comparison
  int set_result = 0;            // rte_vect_set_max_simd_bitwidth(512)
  double gbps_after = 0;         // rte_net_crc_set_alg(AVX512) after it
};
DpdkProbe probe_dpdk(const FramePool& pool);

// zlib, ISA-L (dispatcher and two of its kernels) and DPDK (three algorithms) against each other on random
// buffers of many lengths and alignments. Writes a summary line to `log`; returns false on disagreement.
bool check_crc_agreement(std::ostream& log);

// One row per CRC-32 function: a CRC of every whole frame of the pool. `all` = also the slow ones.
void add_crc_measurements(Group& g, bool all);

// Copy + CRC of a payload into a frame as build_frame does it: each frame's first bytes (all but 58) copied
// to offset 54 of the same frame of `dst` (a pool of the same layout, used by nothing else), by memcpy then
// ISA-L (two passes) and
// by wire::crc32_copy (one pass). Checked like the CRC rows, plus the copy.
inline const std::string row_copy_then_crc = "copy + CRC: memcpy, then ISA-L";
inline const std::string row_crc32_copy = "copy + CRC: wire::crc32_copy (one pass)";
void add_copy_crc_measurements(Group& g, uint8_t* dst);

// The candidate rows, in report order.
std::vector<std::string> crc_row_names();

// bench_icrc_ideas.cpp: alternative ICRC structures, measured on IPv4 frames without options (not used by
// transport/; evidence for the ICRC's cost breakdown). Each pass counts frames whose ICRC matches the wire.
void add_icrc_idea_measurements(Group& g);
std::vector<std::string> icrc_idea_row_names();

// bench_transport.cpp: two Devices through an in-memory wire; returns its Markdown section.
std::string transport_section(double seconds_per_row);
// One case of it alone, for a profiler: "send" (64-byte SENDs, returns messages/s) or "write" (64-KiB RDMA
// WRITEs, returns bytes/s).
double transport_profile(const std::string& which, double seconds);

}  // namespace uroce::bench
