// The engine's side of the shared queues: it reads what clients posted (send, receive and SRQ rings) into
// the transport, and writes the transport's completions and events back (completion rings, completion
// channels, async event pipes). No DPDK: it works on a transport::Device and shared memory only, so it is
// tested without a port.
//
// Everything a client wrote is validated before the transport sees it (the client can scribble on the
// rings at any time): opcodes, SGE counts, inline lengths. A work request that fails validation completes
// with an error, as a real NIC reports a malformed WQE, instead of reaching the transport.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "emulator/protocol/queue_entries.hpp"
#include "emulator/protocol/ring.hpp"
#include "emulator/protocol/shared_region.hpp"
#include "transport/device.hpp"

namespace uroce::emulator::engine {

using SessionId = uint64_t;

struct QpQueues {
  protocol::SharedRegion send_region;
  protocol::SharedRegion recv_region;  // empty when the QP uses an SRQ
  uint32_t max_send_sge = 0;
  uint32_t max_inline = 0;
  uint32_t max_recv_sge = 0;
  uint32_t send_cq = 0;  // where the engine's own error completions for malformed work requests go
};

struct CqQueue {
  protocol::SharedRegion region;
  int channel_fd = -1;  // write end of the completion channel's pipe, -1 without a channel (not owned)
};

struct SrqQueue {
  protocol::SharedRegion region;
  uint32_t max_sge = 0;
};

struct QueueCounters {
  uint64_t send_posted = 0;
  uint64_t recv_posted = 0;
  uint64_t malformed_wr = 0;     // rejected before reaching the transport
  uint64_t completions = 0;
  uint64_t cq_overflows = 0;
  uint64_t events_sent = 0;
  uint64_t events_lost = 0;      // a client's event pipe was full
};

class QueueService {
 public:
  explicit QueueService(transport::Device& device) : device_(device) {}

  void attach_qp(SessionId session, uint32_t qpn, QpQueues queues);
  void attach_cq(SessionId session, uint32_t cqn, CqQueue queue);
  void attach_srq(SessionId session, uint32_t srqn, SrqQueue queue);
  void detach_qp(uint32_t qpn);
  void detach_cq(uint32_t cqn);
  void detach_srq(uint32_t srqn);
  // Address handles are numbered device-wide, and a UD send names one: the engine refuses a send that
  // names another session's address handle, as it would any other object of another session.
  void attach_ah(SessionId session, uint32_t ahn) { ahs_.insert_or_assign(ahn, session); }
  void detach_ah(uint32_t ahn) { ahs_.erase(ahn); }
  // The pipe (write end, not owned) where a session's async events go; -1 to forget it.
  void set_event_pipe(SessionId session, int fd);
  void set_channel(uint32_t cqn, int fd);

  // Moves posted work requests into the transport; returns how many.
  unsigned drain_work(transport::Nanos now);
  // Moves completions from the transport to the rings (and signals armed CQs); returns how many.
  unsigned deliver_completions();
  // Routes the transport's async events to their sessions' pipes.
  void deliver_events();
  // True when a client posted something not yet taken (checked before the engine sleeps).
  bool work_waiting() const;

  const QueueCounters& counters() const { return counters_; }

 private:
  struct QpBinding {
    SessionId session;
    QpQueues queues;
    protocol::RingView send, recv;
    uint32_t send_consumer = 0, recv_consumer = 0;
    // A work request the transport could not take yet (its send queue is full): retried first.
    bool send_stalled = false;
  };
  struct CqBinding {
    SessionId session;
    CqQueue queue;
    protocol::RingView ring;
    uint32_t producer = 0;
  };
  struct SrqBinding {
    SessionId session;
    SrqQueue queue;
    protocol::RingView ring;
    uint32_t consumer = 0;
  };

  unsigned drain_send(uint32_t qpn, QpBinding& b, transport::Nanos now);
  unsigned drain_recv(uint32_t qpn, QpBinding& b);
  unsigned drain_srq(uint32_t srqn, SrqBinding& b);
  unsigned deliver_to(uint32_t cqn, CqBinding& b);
  void signal(CqBinding& b, uint32_t cqn, bool solicited_or_error);
  bool decode_send(const QpBinding& b, const uint8_t* slot, verbs::SendWr& wr) const;
  bool foreign_ah(const QpBinding& b, uint32_t ahn) const;
  void reject_send(uint32_t qpn, const verbs::SendWr& wr, verbs::WcStatus status);
  void send_event(SessionId session, const protocol::AsyncEventRecord& r);

  transport::Device& device_;
  std::unordered_map<uint32_t, QpBinding> qps_;
  std::unordered_map<uint32_t, CqBinding> cqs_;
  std::unordered_map<uint32_t, SrqBinding> srqs_;
  std::unordered_map<uint32_t, SessionId> ahs_;  // owner of each address handle
  std::unordered_map<SessionId, int> event_pipes_;
  std::vector<verbs::WorkCompletion> scratch_;
  // Completions the engine made itself (malformed work requests), by CQ, ahead of the transport's.
  std::unordered_map<uint32_t, std::vector<verbs::WorkCompletion>> own_completions_;
  QueueCounters counters_;
};

}  // namespace uroce::emulator::engine
