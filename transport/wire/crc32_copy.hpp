// Copy bytes and continue a CRC-32 over them in one pass: what building a frame does with its payload.
//
// The frame builder used to copy a payload into the frame and then CRC the frame: two passes over every
// payload byte, and for a 4 KiB RDMA WRITE packet the copy cost as much as the CRC (docs/icrc.md, "Copying
// and CRC-ing in one pass"). No CRC library offers a fused copy, so on CPUs with VPCLMULQDQ the bulk of
// the payload is folded by a loop of our own that stores each register to the destination as it folds it
// (crc32_fold.hpp: 64-byte registers with AVX-512, 32-byte ones with AVX2), and reduces the folded state
// to the CRC; crc32_update (crc32.hpp) does the tail. Elsewhere, and for short runs, it is memcpy
// followed by crc32_update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uroce::wire {

// Copies `len` bytes from `src` to `dst` (which must not overlap) and returns
// crc32_update(crc, src, len). Any alignment, any length.
uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len);

namespace detail {
// The folding loops this CPU can run (AVX-512, AVX2), each taking any length, for tests and benchmarks.
struct CopyKernel {
  const char* name;
  uint32_t (*fn)(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len);
};
std::vector<CopyKernel> crc32_copy_kernels();
// crc32_update by the AVX2 folding loop without the copy; only where fold::available_256() (crc32.cpp).
uint32_t crc32_fold_256(uint32_t crc, const uint8_t* src, size_t len);
}  // namespace detail

}  // namespace uroce::wire
