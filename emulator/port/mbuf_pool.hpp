// Mbuf pools and rings owned by shared_ptr, so a pool outlives every port and ring whose mbufs it holds.
#pragma once

#include <cstdint>
#include <memory>

struct rte_mempool;
struct rte_ring;

namespace uroce::emulator::port {

// A pool of `count` mbufs whose single segment holds `max_frame` bytes after the headroom.
// Throws PortError (from dpdk_port.hpp) with DPDK's reason, e.g. out of EAL memory (raise EalOptions::memory_mb).
std::shared_ptr<rte_mempool> make_frame_pool(uint32_t count, uint32_t max_frame, int socket);
// A single-producer single-consumer ring of `size` (a power of two) slots; on destruction the mbufs still
// in it are freed first. `keep` (the pool of those mbufs) is held until then.
std::shared_ptr<rte_ring> make_frame_ring(uint32_t size, int socket, std::shared_ptr<rte_mempool> keep);

}  // namespace uroce::emulator::port
