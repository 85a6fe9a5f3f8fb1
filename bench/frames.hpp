// Frame pools for the benchmark: many distinct RoCEv2 frames made by the real builder
// (uroce::wire::build_frame), each at the start of a 64-byte-aligned slot as in a DPDK mbuf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace uroce::bench {

// Memory for pools: 2 MiB aligned and advised for transparent huge pages (DPDK keeps packets in huge
// pages too), pre-faulted.
struct FreeDeleter {
  void operator()(uint8_t* p) const;
};
using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;
Buffer allocate(size_t bytes);

// Two shapes, each a random mix of opcodes that give the same frame size (IPv4, no VLAN, Ethernet frame
// without FCS):
//   small: 62 B  - RC ACK, SEND_ONLY with 4 B payload, SEND_ONLY_IMM with 0 B payload, SEND_LAST with 4 B
//   large: 4154 B - SEND_MIDDLE, RDMA_WRITE_MIDDLE, RDMA_READ_RESPONSE_MIDDLE with 4096 B payload (IB MTU
//   4096)
// Addresses, QPs, PSNs, IP IDs, UDP source ports, ECN/FECN/BECN bits and payload bytes vary per frame.
enum class Shape { small, large };

struct FramePool {
  std::string name;       // "62 B x 4096"
  std::string residency;  // "L2", "DRAM"
  Shape shape = Shape::small;
  size_t frame_size = 0;
  size_t stride = 0;  // bytes between frame starts
  size_t count = 0;
  Buffer storage;           // count * stride bytes
  uint64_t opcode_sum = 0;  // sum of the BTH opcodes of all frames

  const uint8_t* frame(size_t i) const { return storage.get() + i * stride; }
  std::span<const uint8_t> bytes(size_t i) const { return {frame(i), frame_size}; }
  uint8_t* writable_frame(size_t i) const { return storage.get() + i * stride; }  // for in-place ICRC ideas
  size_t footprint() const { return count * stride; }
  std::string describe() const;  // "4096 frames, 256 KiB (L2)"
};

size_t frame_size_of(Shape shape);

// Builds `count` frames `stride` bytes apart (0: round_up(frame size, 64), frames back to back).
FramePool make_pool(Shape shape, size_t count, uint64_t seed, std::string residency, size_t stride = 0);

// The ICRC of an IPv4 Ethernet frame computed independently of transport/wire (zlib over a masked copy,
// following the recipe in docs/icrc.md). Used to check the builder and the golden vector.
uint32_t reference_icrc(std::span<const uint8_t> frame);

}  // namespace uroce::bench
