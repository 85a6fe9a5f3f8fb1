// Receive work requests waiting for SENDs (and RDMA WRITE with immediate): a QP's own receive queue, or
// a shared receive queue (SRQ) that several QPs draw from, with its limit event.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/ring_queue.hpp"
#include "transport/verbs/work.hpp"

namespace uroce::transport {

// A tag matching SRQ's list of tagged buffers and its count of unexpected messages (qp/tag_matching.cpp).
struct TaggedBuffer {
  uint32_t handle = 0;
  uint64_t tag = 0;
  uint64_t mask = 0;
  uint64_t recv_wr_id = 0;
  verbs::SgeList sg_list;
  // Added while software and the device agreed on the unexpected count: only such entries match. One added
  // out of step waits for a TAG_SYNC that brings them back in step (software may not yet have matched it
  // against the unexpected messages it has not seen).
  bool active = false;
};

struct TagMatching {
  uint32_t max_tags = 0;
  std::vector<TaggedBuffer> list;  // in the order they were added: the first that matches is taken
  uint32_t next_handle = 1;
  uint32_t unexpected = 0;     // unexpected messages the device delivered
  uint32_t handled = 0;        // as software last reported it (IBV_OPS_TM_SYNC)
  bool in_step() const { return unexpected == handled; }
};

struct ReceiveQueue {
  uint32_t pd = 0;
  // An XRC SRQ: its domain, and the CQ its receives complete to (an XRC target QP, which has neither,
  // takes both from the SRQ a message names). A tag matching SRQ has a CQ too: its list operations and
  // the receives of every QP on it complete there.
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
  // A tag matching SRQ (Device::create_tm_srq); none for every other queue.
  std::unique_ptr<TagMatching> tm;
};

// enum ibv_wq_state.
enum class WqState : uint8_t { reset = 0, ready = 1, error = 2 };

// A queue counts as running low when it falls to half of a peak of at least this many receives: an
// application that keeps one or a few receives posted (a ping-pong) is never reported.
inline constexpr uint32_t low_receive_queue_min_peak = 16;

}  // namespace uroce::transport
