// The clock every part of emulator/net is driven by. Nothing here reads a clock: the engine passes the time
// in, so tests move it by hand and a test run takes no real time.
#pragma once

#include <cstdint>

namespace uroce::emulator::net {

using Nanos = uint64_t;  // nanoseconds on the engine's monotonic clock (same unit as transport::Nanos)
inline constexpr Nanos never = ~Nanos(0);

constexpr Nanos milliseconds(uint64_t n) { return n * 1'000'000; }
constexpr Nanos seconds(uint64_t n) { return n * 1'000'000'000; }

// When a lifetime in seconds as neighbour discovery carries it (RFC 4861 §4.6.2: all ones is forever), begun
// at `now`, ends.
inline constexpr uint32_t infinite_lifetime = 0xffffffff;
constexpr Nanos lifetime_end(Nanos now, uint32_t lifetime_seconds) {
  return lifetime_seconds == infinite_lifetime ? never : now + seconds(lifetime_seconds);
}

}  // namespace uroce::emulator::net
