// Frames in mbufs as byte spans: the engine parses and builds frames in place.
#pragma once

#include <cstdint>
#include <span>

struct rte_mbuf;
struct rte_mempool;

namespace uroce::emulator::port {

// The frame of a single-segment mbuf, in place (the port's pools hold a jumbo frame in one segment, so
// this is the normal case). Empty for a chained mbuf: use the overload with a scratch buffer.
std::span<uint8_t> frame_of(rte_mbuf* mbuf);
// The whole frame: in place when it is contiguous, otherwise copied into `scratch` (a span over it).
// Empty if a chained frame does not fit into `scratch`.
std::span<const uint8_t> frame_of(const rte_mbuf* mbuf, std::span<uint8_t> scratch);

// Resets `mbuf` and copies `frame` into it as its only segment; false if it does not fit.
bool copy_frame_into_mbuf(rte_mbuf* mbuf, std::span<const uint8_t> frame);
// An mbuf from `pool` holding a copy of `frame`; nullptr if the pool is empty or the frame too large.
rte_mbuf* copy_frame_into_mbuf(rte_mempool* pool, std::span<const uint8_t> frame);

}  // namespace uroce::emulator::port
