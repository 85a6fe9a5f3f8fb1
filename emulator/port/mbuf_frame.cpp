#include "emulator/port/mbuf_frame.hpp"

#include <rte_mbuf.h>

#include <cstring>

namespace uroce::emulator::port {

std::span<uint8_t> frame_of(rte_mbuf* mbuf) {
  if (mbuf->nb_segs != 1) return {};
  return {rte_pktmbuf_mtod(mbuf, uint8_t*), mbuf->data_len};
}

std::span<const uint8_t> frame_of(const rte_mbuf* mbuf, std::span<uint8_t> scratch) {
  if (mbuf->nb_segs == 1) return {rte_pktmbuf_mtod(mbuf, const uint8_t*), mbuf->data_len};
  if (mbuf->pkt_len > scratch.size()) return {};
  // rte_pktmbuf_read returns the data in place when contiguous, otherwise gathers it into scratch.
  auto* data = static_cast<const uint8_t*>(rte_pktmbuf_read(mbuf, 0, mbuf->pkt_len, scratch.data()));
  if (!data) return {};
  return {data, mbuf->pkt_len};
}

bool copy_frame_into_mbuf(rte_mbuf* mbuf, std::span<const uint8_t> frame) {
  if (mbuf->next) {  // reset would forget the chain, not free it
    rte_pktmbuf_free(mbuf->next);
    mbuf->next = nullptr;
  }
  rte_pktmbuf_reset(mbuf);
  if (frame.size() > rte_pktmbuf_tailroom(mbuf)) return false;
  auto* data = rte_pktmbuf_append(mbuf, static_cast<uint16_t>(frame.size()));
  if (!data) return false;
  std::memcpy(data, frame.data(), frame.size());
  return true;
}

rte_mbuf* copy_frame_into_mbuf(rte_mempool* pool, std::span<const uint8_t> frame) {
  rte_mbuf* mbuf = rte_pktmbuf_alloc(pool);
  if (!mbuf) return nullptr;
  if (!copy_frame_into_mbuf(mbuf, frame)) {
    rte_pktmbuf_free(mbuf);
    return nullptr;
  }
  return mbuf;
}

}  // namespace uroce::emulator::port
