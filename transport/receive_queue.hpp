// Receive work requests waiting for SENDs (and RDMA WRITE with immediate): a QP's own receive queue, or
// a shared receive queue (SRQ) that several QPs draw from, with its limit event.
#pragma once

#include <cstdint>

#include "transport/ring_queue.hpp"
#include "transport/verbs/work.hpp"

namespace uroce::transport {

struct ReceiveQueue {
  uint32_t pd = 0;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  RingQueue<verbs::RecvWr> wrs;
  // SRQ limit: when armed and the queue drops below it, IBV_EVENT_SRQ_LIMIT_REACHED fires once.
  uint32_t limit = 0;
  bool limit_armed = false;
};

}  // namespace uroce::transport
