// CRC-32 (IEEE 802.3 / zlib: reflected 0xEDB88320, init and final xor 0xFFFFFFFF).
//
// Provided by a library, never by a hand-written table. The implementation behind it was chosen by
// measurement (bench: "crc32 candidates"; docs/icrc.md): ISA-L's crc32_gzip_refl folds with PCLMULQDQ
// and is several times faster than zlib's crc32 on 4 KiB packets. The exceptions, each measured against it
// (docs/icrc.md): crc32_copy.hpp, a copy fused with the CRC, which no library offers, and the ICRC of
// packets up to 256 bytes (icrc.cpp), where ISA-L's one-lane-at-a-time folding and the call cost three
// times what folding every register at once does. Both use the carry-less folding of crc32_fold.hpp.
// And on CPUs with VPCLMULQDQ but no AVX-512 (AMD Zen 3, Intel's client cores), for which ISA-L 2.30 has
// only a 16-byte kernel, crc32_update itself takes that folding on 32-byte registers from 256 bytes on:
// twice ISA-L's speed there (crc32.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::wire {

// Continues a CRC: crc32_update(crc32_update(0, a), b) == crc32 of a followed by b. Start with 0.
uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t len);

}  // namespace uroce::wire
