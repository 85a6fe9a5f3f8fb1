// Copy bytes and continue a CRC-32 over them in one pass: what building a frame does with its payload.
//
// The frame builder used to copy a payload into the frame and then CRC the frame: two passes over every
// payload byte, and for a 4 KiB RDMA WRITE packet the copy cost as much as the CRC (docs/icrc.md, "Copying
// and CRC-ing in one pass"). No CRC library offers a fused copy, so on CPUs with AVX-512 and VPCLMULQDQ the
// bulk of the payload is folded by a loop of our own that stores each 64-byte block to the destination as
// it folds it (crc32_fold.hpp), and reduces the folded state to the CRC; ISA-L (crc32.hpp) does the tail.
// Elsewhere, and for short runs, it is memcpy followed by crc32_update.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::wire {

// Copies `len` bytes from `src` to `dst` (which must not overlap) and returns
// crc32_update(crc, src, len). Any alignment, any length.
uint32_t crc32_copy(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len);

namespace detail {
// Whether crc32_copy uses the folding loop on this CPU (AVX-512F, VPCLMULQDQ and the OS saving ZMM state).
bool crc32_copy_folds();
// The folding loop itself, for tests; only when crc32_copy_folds().
uint32_t crc32_copy_folded(uint32_t crc, uint8_t* dst, const uint8_t* src, size_t len);
}  // namespace detail

}  // namespace uroce::wire
