#include "transport/wire/crc32.hpp"

#include <isa-l/crc.h>

namespace uroce::wire {

uint32_t crc32_update(uint32_t crc, const uint8_t* data, size_t len) {
  // crc32_gzip_refl has zlib's calling convention (it inverts on entry and exit), so CRCs chain the same.
  return crc32_gzip_refl(crc, data, len);
}

}  // namespace uroce::wire
