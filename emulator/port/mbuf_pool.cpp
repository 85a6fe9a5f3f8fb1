#include "emulator/port/mbuf_pool.hpp"

#include "emulator/port/dpdk_port.hpp"

#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <algorithm>
#include <atomic>
#include <string>

namespace uroce::emulator::port {
namespace {
// DPDK names pools and rings process-wide (memzones); a counter keeps ours unique and short.
std::atomic<unsigned> next_id{0};
}  // namespace

std::shared_ptr<rte_mempool> make_frame_pool(uint32_t count, uint32_t max_frame, int socket) {
  std::string name = "uroce_pool" + std::to_string(next_id++);
  uint32_t data_room = max_frame + RTE_PKTMBUF_HEADROOM;
  if (data_room > UINT16_MAX) throw PortError("max_frame " + std::to_string(max_frame) + " is too large");
  // Per-lcore cache: DPDK requires cache <= count / 1.5; 256 amortises the pool's ring for bursts of 32.
  unsigned cache = std::min<uint32_t>(256, count * 2 / 3);
  rte_mempool* pool = rte_pktmbuf_pool_create(name.c_str(), count, cache, 0, static_cast<uint16_t>(data_room),
                                              socket);
  if (!pool)
    throw PortError("cannot create a pool of " + std::to_string(count) + " mbufs of " +
                    std::to_string(data_room) + " bytes: " + rte_strerror(rte_errno));
  return {pool, rte_mempool_free};
}

std::shared_ptr<rte_ring> make_frame_ring(uint32_t size, int socket, std::shared_ptr<rte_mempool> keep) {
  std::string name = "uroce_ring" + std::to_string(next_id++);
  rte_ring* ring = rte_ring_create(name.c_str(), size, socket, RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (!ring) throw PortError("cannot create ring " + name + ": " + rte_strerror(rte_errno));
  return {ring, [keep = std::move(keep)](rte_ring* r) {
            void* items[64];
            unsigned n;
            while ((n = rte_ring_dequeue_burst(r, items, 64, nullptr)) > 0)
              rte_pktmbuf_free_bulk(reinterpret_cast<rte_mbuf**>(items), n);
            rte_ring_free(r);
          }};
}

}  // namespace uroce::emulator::port
