// uroce_bench: the "Speed" benchmark. Prints Markdown: correctness anchors, the codec table (parse and
// ICRC verify against memcpy of the same bytes) and the CRC-32 candidates table. Exit status 1 if anything
// does not verify (a frame, a CRC library); a missed speed target is reported, not an error.
//
//   uroce_bench [--rounds N] [--sample-ms MS] [--cpu N] [--dram-mib MIB] [--quick] [--samples]
//               [--inject-bad-frame]
#include <isa-l.h>
#include <sys/resource.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/crc_dpdk.hpp"
#include "bench/sections.hpp"
#include "transport/wire/frame.hpp"

namespace {

using namespace uroce::bench;
namespace wire = uroce::wire;

// A CNP captured from a ConnectX-4 Lx (shared/notes/rocev2.md): the independent anchor of the ICRC.
constexpr const char* golden_cnp =
    "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
    "0a001101"
    "0a001201"
    "000012b7"
    "00280000"
    "8100ffff"
    "40000118"
    "00000000"
    "00000000000000000000000000000000"
    "82fd002a";
constexpr uint32_t golden_icrc = 0x2a00fd82;  // bytes 82 fd 00 2a, least-significant first

std::vector<uint8_t> from_hex(const char* hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; hex[i] && hex[i + 1]; i += 2)
    out.push_back(uint8_t(std::stoi(std::string(hex + i, 2), nullptr, 16)));
  return out;
}

struct Options {
  RunConfig run;
  int cpu = -1;
  size_t dram_mib = 64;           // out-of-cache pools: frame bytes 2 x this machine's L3
  bool samples = false;           // also print every sample of every row
  bool inject_bad_frame = false;  // shows the failure path: one payload byte flipped after the checks
  bool transport_only = false;    // only the transport section (for profiling it)
  std::string transport_case;     // only one case of it, for a profiler
};

bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](double& out) {
      if (i + 1 >= argc) return false;
      out = std::atof(argv[++i]);
      return true;
    };
    double v = 0;
    if (a == "--rounds" && value(v) && v >= 1) {
      o.run.rounds = int(v);
    } else if (a == "--sample-ms" && value(v) && v > 0) {
      o.run.sample_seconds = v / 1000;
    } else if (a == "--cpu" && value(v)) {
      o.cpu = int(v);
    } else if (a == "--dram-mib" && value(v) && v >= 1) {
      o.dram_mib = size_t(v);
    } else if (a == "--samples") {
      o.samples = true;
    } else if (a == "--transport-only") {
      o.transport_only = true;
    } else if (a == "--transport-case" && i + 1 < argc) {
      o.transport_case = argv[++i];
    } else if (a == "--inject-bad-frame") {
      o.inject_bad_frame = true;
    } else if (a == "--quick") {
      o.run.rounds = 3;
      o.run.sample_seconds = 0.03;
      o.run.warmup_seconds = 0.01;
    } else {
      std::cerr << "usage: uroce_bench [--rounds N] [--sample-ms MS] [--cpu N] [--dram-mib MIB] [--quick] [--transport-only] "
                   "[--transport-case send|write] [--samples] [--inject-bad-frame]\n";
      return false;
    }
  }
  return true;
}

std::string frame_label(const FramePool& p) {
  return p.shape == Shape::small ? "62 B" : "4154 B (4096 B payload)";
}

// A table whose rows are measurements of a group, each with its ratio to the group's memcpy reference
// (same pool, same rounds): GB/s over the reference's GB/s.
struct Report {
  Table table;

  // target_kind: 0 none, 1 >= 20 Mpps, 2 >= 50% of memcpy.
  void row(Group& g, const std::string& name, const std::string& target, int target_kind) {
    Measurement* m = g.find(name);
    Measurement* ref = g.find(row_memcpy);
    if (m == nullptr || ref == nullptr) return;
    if (!m->error.empty() || !ref->error.empty()) {
      table.add({m->name, frame_label(*g.pool), g.pool->describe(), "FAILED", "", "", "", target, "", ""});
      return;
    }
    const double mpps = m->median_pps() / 1e6, gbps = m->median_gbps(), ref_gbps = ref->median_gbps();
    const double ratio = gbps / ref_gbps;
    std::string met = "—";
    if (target_kind == 1) met = mpps >= 20 ? "yes" : "no";
    if (target_kind == 2) met = ratio >= 0.5 ? "yes" : "no";
    table.add({m->name, frame_label(*g.pool), g.pool->describe(), fixed(mpps, mpps < 10 ? 2 : 1),
               fixed(gbps, 2), fixed(ref_gbps, 2), fixed(ratio, 2), target, met,
               fixed(100 * m->spread(), 0) + "%"});
  }
};

std::string error_of(std::vector<Group*> groups) {
  std::string e;
  for (Group* g : groups) {
    for (Measurement& m : g->rows) {
      if (!m.error.empty()) e += "- FAILED: " + m.name + " on " + g->pool->name + ": " + m.error + "\n";
    }
  }
  return e;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_options(argc, argv, opt)) return 2;
  const int cpu = pin_to_cpu(opt.cpu);
  if (!opt.transport_case.empty()) {
    try {
      std::cout << opt.transport_case << ": " << transport_profile(opt.transport_case, 3.0) / 1e6 << " M/s\n";
      return 0;
    } catch (const std::exception& e) {
      std::cout << "transport benchmark FAILED: " << e.what() << "\n";
      return 1;
    }
  }
  if (opt.transport_only) {
    try {
      std::cout << transport_section(1.0);
      return 0;
    } catch (const std::exception& e) {
      std::cout << "transport benchmark FAILED: " << e.what() << "\n";
      return 1;
    }
  }
  bool ok = true;
  std::ostringstream checks;

  std::cout << "# uroce_bench: codec and CRC-32 speed on one core\n\n";
  std::cout << "- machine: " << machine_description() << "\n";
  std::cout << "- libraries: zlib " << zlibVersion() << ", ISA-L " << ISAL_MAJOR_VERSION << "."
            << ISAL_MINOR_VERSION << "." << ISAL_PATCH_VERSION << ", " << dpdk::version()
            << " (rte_net_crc without EAL)\n";
  std::cout << "- method: pinned to CPU " << cpu << "; per measurement one warm-up sample, then "
            << opt.run.rounds << " samples of " << fixed(opt.run.sample_seconds * 1000, 0)
            << " ms (whole passes over the pool, std::chrono::steady_clock), rounds interleaved across the "
               "rows of a pool; median reported, spread = (max - min) / median\n";
  std::cout << "- load average before: " << load_average() << "\n" << std::flush;

  // 1. The golden vector, through the codec and through the independent zlib recipe.
  {
    const std::vector<uint8_t> cnp = from_hex(golden_cnp);
    wire::Frame f;
    const bool parsed = wire::parse_frame(cnp, f) == wire::ParseError::none && f.is_roce();
    const bool codec = parsed && wire::icrc_ok(f) && wire::compute_icrc(f) == golden_icrc;
    const bool reference = reference_icrc(cnp) == golden_icrc;
    checks << "- golden ConnectX-4 Lx CNP (ICRC bytes 82 fd 00 2a): transport/wire "
           << (codec ? "OK" : "WRONG") << ", independent zlib recipe " << (reference ? "OK" : "WRONG")
           << "\n";
    ok = ok && codec && reference;
  }

  // 2. Frame pools, built with the real builder; every frame must verify.
  FramePool small = make_pool(Shape::small, 4096, 1, "L2");
  FramePool large = make_pool(Shape::large, 32, 2, "L2");
  // Out of cache, two layouts: frames back to back (the prefetcher streams across frame boundaries, a best
  // case) and frames 8256 B apart, like packets in separate mbufs (every frame starts a new stream).
  const size_t dram_frames = (opt.dram_mib << 20) / 4160;
  FramePool dram = make_pool(Shape::large, dram_frames, 3, "DRAM");
  FramePool scattered = make_pool(Shape::large, dram_frames, 4, "DRAM", 8256);
  for (const FramePool* p : {&small, &large, &dram, &scattered}) {
    const std::string e = verify_pool(*p);
    if (!e.empty()) {
      checks << "- POOL DOES NOT VERIFY: " << e << "\n";
      ok = false;
    }
  }
  if (ok) {
    checks
        << "- pools: all " << small.count + large.count + dram.count + scattered.count
        << " frames parse as RoCEv2, pass icrc_ok and carry the ICRC the independent zlib recipe computes\n";
  }

  Buffer dst_small = allocate(small.footprint()), dst_large = allocate(large.footprint()),
         dst_dram = allocate(dram.footprint()), dst_scattered = allocate(scattered.footprint()),
         hot = allocate(8192);
  // The copy + CRC rows write into pools of their own: the memcpy reference checks its destination whole.
  Buffer copy_large = allocate(large.footprint()), copy_dram = allocate(dram.footprint()),
         copy_scattered = allocate(scattered.footprint());
  checks << "- memory: pools and copy destinations in transparent huge pages: "
         << format_bytes(anon_huge_bytes()) << " (madvise(MADV_HUGEPAGE), best effort)\n";

  // 3. rte_net_crc without EAL (before anything else selects an algorithm), then CRC agreement.
  const DpdkProbe probe = probe_dpdk(large);
  checks << "- DPDK without rte_eal_init: rte_vect_get_max_simd_bitwidth() = " << probe.bitwidth_before
         << "; rte_net_crc_set_alg(RTE_NET_CRC_AVX512) then runs at " << fixed(probe.gbps_before, 2)
         << " GB/s (SCALAR: " << fixed(probe.gbps_scalar, 2)
         << " GB/s, i.e. the scalar fallback); after rte_vect_set_max_simd_bitwidth(512) (returned "
         << probe.set_result << "): " << fixed(probe.gbps_after, 2) << " GB/s (4154 B frames, L2)\n";
  ok = check_crc_agreement(checks) && ok;
  std::cout << "\n## Correctness checks\n\n" << checks.str() << std::flush;
  if (!ok) {
    std::cout << "\nFAILED: correctness checks\n";
    return 1;
  }

  if (opt.inject_bad_frame) large.writable_frame(7)[100] ^= 1;  // every ICRC row of that pool must now fail

  // 4. Measure.
  Group gs{&small, {}}, gl{&large, {}}, gd{&dram, {}}, gx{&scattered, {}};
  const std::vector<Group*> groups = {&gs, &gl, &gd, &gx};
  add_codec_measurements(gs, dst_small.get(), nullptr);
  add_codec_measurements(gl, dst_large.get(), hot.get());
  add_codec_measurements(gd, dst_dram.get(), hot.get());
  add_codec_measurements(gx, dst_scattered.get(), hot.get());
  add_crc_measurements(gs, true);
  add_crc_measurements(gl, true);
  add_crc_measurements(gd, false);
  add_crc_measurements(gx, false);
  add_copy_crc_measurements(gl, copy_large.get());  // 4 KiB payloads; the builder copies none under 256 B
  add_copy_crc_measurements(gd, copy_dram.get());
  add_copy_crc_measurements(gx, copy_scattered.get());
  for (Group* g : groups) add_icrc_idea_measurements(*g);
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  const auto wall0 = std::chrono::steady_clock::now();
  for (Group* g : groups) {
    std::vector<Measurement*> rows;
    for (Measurement& m : g->rows) rows.push_back(&m);
    run_group(rows, opt.run);
  }

  getrusage(RUSAGE_THREAD, &after);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  const double cpu_seconds =
      seconds(after.ru_utime) + seconds(after.ru_stime) - seconds(before.ru_utime) - seconds(before.ru_stime);
  const double cpu_share = cpu_seconds / wall;  // below 1: other processes ran on the measured core
  const long preempted = after.ru_nivcsw - before.ru_nivcsw;

  // 5. Report.
  const std::vector<std::string> header = {
      "measurement", "frame size", "pool", "Mpps",  "GB/s", "reference (memcpy GB/s)",
      "ratio",       "target",     "met",  "spread"};
  Report codec{Table(header)};
  for (Group* g : groups) {
    const bool big = g->pool->shape == Shape::large;
    codec.row(*g, row_memcpy, "—", 0);
    codec.row(*g, row_parse, ">= 20 Mpps", 1);
    codec.row(*g, row_parse_icrc, big ? ">= 50% of memcpy" : "—", big ? 2 : 0);
    codec.row(*g, row_icrc, "—", 0);
    codec.row(*g, row_memcpy_hot, "—", 0);
  }
  std::vector<std::string> crc_header = header;
  crc_header[0] = "CRC-32 function (one call per frame)";
  Report crc{Table(crc_header)};
  for (Group* g : groups) {
    const bool big = g->pool->shape == Shape::large;
    crc.row(*g, row_memcpy, "—", 0);
    for (const std::string& name : crc_row_names())
      crc.row(*g, name, big ? ">= 50% of memcpy" : "—", big ? 2 : 0);
    crc.row(*g, row_copy_then_crc, "—", 0);
    crc.row(*g, row_crc32_copy, "—", 0);
  }

  std::vector<std::string> ideas_header = header;
  ideas_header[0] = "ICRC variant";
  Report ideas{Table(ideas_header)};
  for (Group* g : groups) {
    ideas.row(*g, row_memcpy, "—", 0);
    ideas.row(*g, row_icrc, "—", 0);
    for (const std::string& name : icrc_idea_row_names()) ideas.row(*g, name, "—", 0);
    ideas.row(*g, "ISA-L crc32_gzip_refl", "—", 0);
    ideas.row(*g, "DPDK rte_net_crc_calc, RTE_NET_CRC_AVX512", "—", 0);
  }

  std::cout << "\n## Codec: parse and ICRC verify (transport/wire, CRC-32 by ISA-L)\n\n"
            << codec.table.render();
  std::cout
      << "\nFrames: Ethernet + IPv4 + UDP + BTH + ICRC, no VLAN, sizes without FCS, built by "
         "uroce::wire::build_frame. 62 B: a random mix of RC ACK, SEND_ONLY (4 B payload), SEND_ONLY_IMM, "
         "SEND_LAST (4 B payload). 4154 B: a random mix of SEND_MIDDLE, RDMA_WRITE_MIDDLE, "
         "RDMA_READ_RESPONSE_MIDDLE with 4096 B payload (IB MTU 4096). QPs, PSNs, addresses, ECN/FECN/BECN "
         "and payload bytes vary. Frames start 64-byte-aligned (as in an mbuf). Pools: L2 = frames back to "
         "back, pool and copy destination together fit the 1 MiB L2; DRAM = 2 x L3 of frame bytes, either "
         "back to back (the hardware prefetcher streams across frames: a best case) or 8256 B apart like "
         "packets in separate mbufs (every frame is a new stream). GB/s counts frame bytes. "
         "memcpy (reference) copies each frame into the same place in a second pool of the same layout; "
         "the L1-resident row copies every frame into one buffer (reads only from the pool's level). "
         "compute_icrc alone skips parse_frame (known layout). Every pass of every row is checked: the sum "
         "of opcodes plus the count of frames that parse / verify must equal the value known in advance.\n";
  std::cout << "\n## CRC-32 candidates: CRC of each whole frame, same pools and same rounds as above\n\n"
            << crc.table.render();
  std::cout
      << "\nEvery pass of every CRC row must give the same sum of per-frame CRCs as zlib. The ISA-L kernel "
         "rows "
         "call two of the functions its dispatcher chooses between directly, to show which one it picks. "
         "The two copy + CRC rows are the frame builder's payload path before and after it fused the two "
         "(docs/icrc.md): each frame's first 4096 B (64-byte aligned, as registered memory) copied to offset "
         "54 of the same frame of a pool of their own (after Ethernet, IPv4, UDP, BTH) and CRC'd; checked after "
         "each run; GB/s of payload bytes.\n";

  std::cout << "\n## ICRC cost breakdown: compute_icrc and measured alternatives\n\n"
            << ideas.table.render();
  std::cout
      << "\ncompute_icrc makes two chained CRC calls: the IP/UDP/BTH headers, masked in a stack copy, "
         "continuing from the constant CRC of the 8 x 0xFF (idea 1, adopted), then the rest in place. The ideas keep the same result (every pass checks every frame's ICRC) with fewer "
         "calls; the last two rows are one plain CRC call over the whole frame, a lower bound. Ideas 3 and 4 "
         "write to the receive buffer and restore it; the DPDK call goes through one extra non-inlined "
         "wrapper call.\n";

  // The transport over an in-memory wire (issue 3's speed targets).
  bool transport_failed = false;
  try {
    std::cout << transport_section(opt.run.rounds >= 7 ? 1.0 : 0.3);
  } catch (const std::exception& e) {
    std::cout << "\ntransport benchmark FAILED: " << e.what() << "\n";
    transport_failed = true;
  }

  // Verdict: the fastest library entry point (not ISA-L's internal kernels) per in-cache pool.
  std::cout << "\n## Verdict\n\n";
  for (Group* g : {&gs, &gl}) {
    const Measurement* best = nullptr;
    for (const std::string& name : {std::string("zlib crc32_z"), std::string("ISA-L crc32_gzip_refl"),
                                    std::string("DPDK rte_net_crc_calc, RTE_NET_CRC_AVX512"),
                                    std::string("DPDK rte_net_crc_calc, RTE_NET_CRC_SSE42")}) {
      const Measurement* m = g->find(name);
      if (m != nullptr && m->error.empty() && (best == nullptr || m->median_gbps() > best->median_gbps()))
        best = m;
    }
    if (best != nullptr) {
      std::cout << "- fastest CRC-32 library call on " << frame_label(*g->pool) << " frames ("
                << g->pool->residency << "): " << best->name << ", " << fixed(best->median_gbps(), 2)
                << " GB/s\n";
    }
  }
  for (Group* g : {&gl, &gd, &gx}) {
    const Measurement* m = g->find(row_parse_icrc);
    const Measurement* ref = g->find(row_memcpy);
    const Measurement* l1 = g->find(row_memcpy_hot);
    if (m && ref && l1 && m->error.empty() && ref->error.empty() && l1->error.empty()) {
      const double r1 = m->median_gbps() / ref->median_gbps(), r2 = m->median_gbps() / l1->median_gbps();
      std::cout << "- ICRC target (parse_frame + icrc_ok on 4154 B frames >= 50% of memcpy), pool "
                << g->pool->describe() << ": " << fixed(r1, 2) << " x memcpy into a second pool ("
                << (r1 >= 0.5 ? "met" : "NOT met") << "), " << fixed(r2, 2)
                << " x memcpy into one L1-resident buffer (" << (r2 >= 0.5 ? "met" : "NOT met") << ")\n";
    }
  }
  std::cout << "- load average after: " << load_average() << "; while measuring, the thread had its core "
            << fixed(100 * cpu_share, 1) << "% of the time and was preempted " << preempted << " times\n";
  if (cpu_share < 0.97) {
    std::cout << "- WARNING: the machine was busy: other processes shared the measured core and evicted its "
                 "caches. memcpy rows suffer most (CRC rows are compute-bound); ratios against memcpy are "
                 "optimistic then. Re-run on an idle machine for the reference numbers.\n";
  }

  if (opt.samples) {
    std::cout << "\n## Samples (GB/s, in the order measured)\n\n";
    for (Group* g : groups) {
      for (const Measurement& m : g->rows) {
        std::cout << "- " << m.name << ", " << g->pool->describe() << ":";
        for (double pps : m.pps) std::cout << " " << fixed(pps * double(m.frame_size) / 1e9, 2);
        std::cout << "\n";
      }
    }
  }

  const std::string errors = error_of(groups);
  if (transport_failed) return 1;
  if (!errors.empty()) {
    std::cout << "\n" << errors << "\nFAILED: a measurement did not verify\n";
    return 1;
  }
  return 0;
}
