// The engine's side of the shared queues: it reads what clients posted (send, receive and SRQ rings) into
// the transport, and writes the transport's completions and events back (completion rings, completion
// channels, async event pipes). No DPDK: it works on a transport::Device and shared memory only, so it is
// tested without a port.
//
// Everything a client wrote is validated before the transport sees it (the client can scribble on the
// rings at any time): opcodes, SGE counts, inline lengths. A work request that fails validation completes
// with an error, as a real NIC reports a malformed WQE, instead of reaching the transport.
//
// What a turn looks at (docs/daemon.md, small messages): a session whose client rings its doorbell word
// (protocol/doorbell.hpp) has its rings drained only when the word moved or a ring still held work; a
// session without one (an older client) is drained every turn. Completions are delivered only to the CQs
// the transport says got some (Device::take_active_cqs) and to those that still hold some back.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emulator/protocol/doorbell.hpp"
#include "emulator/protocol/queue_entries.hpp"
#include "emulator/protocol/ring.hpp"
#include "emulator/protocol/shared_region.hpp"
#include "transport/device.hpp"

namespace uroce::emulator::engine {

using SessionId = uint64_t;

struct QpQueues {
  protocol::SharedRegion send_region;  // empty for an XRC target
  protocol::SharedRegion recv_region;  // empty when the QP uses an SRQ, and for XRC QPs
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

// A transport completion as the ring's entry, written into `slot` (a completion ring's, 8-byte aligned).
void write_completion_entry(uint8_t* slot, const verbs::WorkCompletion& wc);

class QueueService {
 public:
  explicit QueueService(transport::Device& device) : device_(device) {}

  void attach_qp(SessionId session, uint32_t qpn, QpQueues queues);
  void attach_cq(SessionId session, uint32_t cqn, CqQueue queue);
  void attach_srq(SessionId session, uint32_t srqn, SrqQueue queue);
  // ibv_resize_cq: the CQ moves onto `region`, a fresh ring of the new capacity. Completions the client
  // has not polled are copied to its start in order, the arm word and overflow flag carried over, and
  // the transport's CQ resized alike. EINVAL, with nothing changed, when they would not fit.
  int resize_cq(uint32_t cqn, protocol::SharedRegion region);
  void detach_qp(uint32_t qpn);
  // The QP went to RESET, which drops its outstanding work without completions: the requests the client
  // published that the engine has not taken yet are skipped, and the service's own completions for it
  // (refused requests waiting for room in a ring) dropped, as the transport drops its own.
  void reset_qp(uint32_t qpn);
  // The sessions that hold a QP shared between them (an XRC target QP, ibv_open_qp): its async events go
  // to each of them, and its binding moves to the first when the session it was attached for lets go.
  void set_qp_holders(uint32_t qpn, std::vector<SessionId> holders);
  void detach_cq(uint32_t cqn);
  void detach_srq(uint32_t srqn);
  // Address handles are numbered device-wide, and a UD send names one: the engine refuses a send that
  // names another session's address handle, as it would any other object of another session.
  void attach_ah(SessionId session, uint32_t ahn) { ahs_.insert_or_assign(ahn, session); }
  void detach_ah(uint32_t ahn) { ahs_.erase(ahn); }
  // Memory regions (by lkey) and windows (by number) are device-wide too, and a BIND_MW request names one
  // of each: the engine binds only a window and a region of the posting session (bind_allowed).
  void attach_mr(SessionId session, uint32_t lkey) { mrs_.insert_or_assign(lkey, session); }
  void detach_mr(uint32_t lkey) { mrs_.erase(lkey); }
  void attach_mw(SessionId session, uint32_t mw) { mws_.insert_or_assign(mw, session); }
  void detach_mw(uint32_t mw) { mws_.erase(mw); }
  // The session's doorbell page (protocol::SessionDoorbell, formatted): from now on its rings are drained
  // only when its client rings. detach_session forgets the page when the session closes (its rings are
  // detached first).
  void attach_doorbell(SessionId session, protocol::SharedRegion page);
  void detach_session(SessionId session);
  // The pipe (write end, not owned) where a session's async events go; -1 to forget it.
  void set_event_pipe(SessionId session, int fd);
  void set_channel(uint32_t cqn, int fd);

  // Moves posted work requests into the transport; returns how many.
  unsigned drain_work(transport::Nanos now);
  // Moves completions from the transport to the rings (and signals armed CQs); returns how many.
  unsigned deliver_completions();
  // Routes the transport's async events to their sessions' pipes.
  void deliver_events();
  // A port event (port_active, port_err) to every session with an event pipe: every open device context
  // hears of its port, as the kernel queues a port event on every uverbs file of the device.
  void broadcast_port_event(verbs::EventType type, uint32_t port_num);
  // True when a client posted something not yet taken (checked before the engine sleeps).
  bool work_waiting() const;

  const QueueCounters& counters() const { return counters_; }

 private:
  struct QpBinding {
    SessionId session;
    QpQueues queues;
    protocol::RingView send, recv;
    uint32_t send_consumer = 0, recv_consumer = 0;
    uint32_t send_ready = 0;  // requests in the send ring when this turn began (drain_session)
  };
  struct CqBinding {
    SessionId session;
    CqQueue queue;
    protocol::RingView ring;
    uint32_t producer = 0;
    // The client's consumer index as last read: the room it leaves is used up before the index (a line the
    // client writes) is read again.
    uint32_t consumer_seen = 0;
    bool backlog = false;  // in backlog_cqs_: completions wait for room in the ring, or the service's own
  };
  struct SrqBinding {
    SessionId session;
    SrqQueue queue;
    protocol::RingView ring;
    uint32_t consumer = 0;
  };

  // A session's rings. `doorbell` empty: drained every turn. `again`: a ring held more than one turn
  // takes (a burst) or than the transport could take, so the next turn drains the session without a ring.
  struct SessionRings {
    protocol::SharedRegion doorbell;
    uint32_t seen = 0;
    bool again = false;
    std::vector<std::pair<uint32_t, QpBinding*>> qps;  // bindings live in qps_ (node-based: stable)
    std::vector<std::pair<uint32_t, SrqBinding*>> srqs;
  };

  unsigned drain_session(SessionRings& s, transport::Nanos now);
  unsigned drain_send(uint32_t qpn, QpBinding& b, transport::Nanos now, bool& more);
  // Receive rings: at most `limit` requests this turn (drain_session says how many).
  unsigned drain_recv(uint32_t qpn, QpBinding& b, uint32_t limit, bool& more);
  // Frees the receive ring's slots of the requests that left the transport's queue: the consumer index the
  // client sees trails what the engine took by what the transport still holds.
  void publish_recv_room(uint32_t qpn, QpBinding& b);
  void publish_srq_room(uint32_t srqn, SrqBinding& b);  // the same for an SRQ's ring
  unsigned drain_srq(uint32_t srqn, SrqBinding& b, uint32_t limit, bool& more);
  void mark_backlog(uint32_t cqn, CqBinding& b);
  unsigned deliver_to(uint32_t cqn, CqBinding& b);
  void signal(CqBinding& b, uint32_t cqn, bool solicited_or_error);
  bool decode_send(const QpBinding& b, const uint8_t* slot, verbs::SendWr& wr) const;
  bool foreign_ah(const QpBinding& b, uint32_t ahn) const;
  bool bind_allowed(const QpBinding& b, const verbs::MwBind& bind) const;
  void reject_send(uint32_t qpn, const verbs::SendWr& wr, verbs::WcStatus status);
  void send_event(SessionId session, const protocol::AsyncEventRecord& r);

  transport::Device& device_;
  std::unordered_map<uint32_t, QpBinding> qps_;
  std::unordered_map<uint32_t, std::vector<SessionId>> qp_holders_;  // shared QPs only (set_qp_holders)
  std::unordered_map<uint32_t, CqBinding> cqs_;
  std::vector<uint32_t> active_cqs_;  // deliver_completions' scratch: CQs in completion order
  std::vector<uint32_t> retired_receives_;  // its scratch: QPs whose receive queue shrank
  std::vector<uint32_t> backlog_cqs_, backlog_turn_;  // CQs with CqBinding::backlog set
  std::unordered_map<SessionId, SessionRings> sessions_;
  std::unordered_map<uint32_t, SrqBinding> srqs_;
  std::unordered_map<uint32_t, SessionId> ahs_;  // owner of each address handle
  std::unordered_map<uint32_t, SessionId> mrs_;  // owner of each memory region, by lkey
  std::unordered_map<uint32_t, SessionId> mws_;  // owner of each memory window, by number
  std::unordered_map<SessionId, int> event_pipes_;
  std::vector<verbs::WorkCompletion> scratch_;
  // Completions the engine made itself (malformed work requests), by CQ, ahead of the transport's.
  std::unordered_map<uint32_t, std::vector<verbs::WorkCompletion>> own_completions_;
  QueueCounters counters_;
};

}  // namespace uroce::emulator::engine
