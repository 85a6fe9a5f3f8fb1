// Receive work requests waiting for SENDs (and RDMA WRITE with immediate): a QP's own receive queue, or
// a shared receive queue (SRQ) that several QPs draw from, with its limit event.
#pragma once

#include <cstdint>

#include "transport/ring_queue.hpp"
#include "transport/verbs/work.hpp"

namespace uroce::transport {

struct ReceiveQueue {
  uint32_t pd = 0;
  // An XRC SRQ: its domain, and the CQ its receives complete to (an XRC target QP, which has neither,
  // takes both from the SRQ a message names).
  uint32_t xrcd = 0;
  uint32_t cq = 0;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  RingQueue<verbs::RecvWr> wrs;
  // SRQ limit: when armed and the queue drops below it, IBV_EVENT_SRQ_LIMIT_REACHED fires once.
  uint32_t limit = 0;
  bool limit_armed = false;
  // The most receives the queue held since it last ran low (Device::take_low_receive_queues): a queue
  // that falls to half of it means its application stopped reposting, usually because it is not running.
  uint32_t peak = 0;
  // In the device's list of queues that gave up requests (Device::take_retired_receives for a QP's own,
  // take_retired_srq_receives for an SRQ).
  bool retired_listed = false;
  // A receive work queue (ibv_create_wq), kept with the SRQs: a queue with a CQ of its own that RSS QPs
  // fill through an indirection table. Its state (ibv_wq_state: RESET, RDY, ERR) and how many tables hold it.
  bool work_queue = false;
  uint8_t wq_state = 0;
  uint32_t tables = 0;
};

// enum ibv_wq_state.
enum class WqState : uint8_t { reset = 0, ready = 1, error = 2 };

// A queue counts as running low when it falls to half of a peak of at least this many receives: an
// application that keeps one or a few receives posted (a ping-pong) is never reported.
inline constexpr uint32_t low_receive_queue_min_peak = 16;

}  // namespace uroce::transport
