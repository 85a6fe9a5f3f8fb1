#include "emulator/engine/queue_service.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace uroce::emulator::engine {

using namespace uroce::verbs;
using protocol::CompletionEntry;
using protocol::RecvEntry;
using protocol::SendEntry;
using protocol::WireSge;

namespace {

constexpr unsigned burst = 32;  // work requests taken from one ring per turn, so that no client starves another

protocol::RingView ring_of(protocol::SharedRegion& r) {
  if (r.data() == nullptr) return {};
  const auto* h = reinterpret_cast<const protocol::RingHeader*>(r.data());
  return protocol::RingView(r.data(), h->capacity, h->entry_size);
}

bool valid_opcode(uint32_t op) {
  return op <= uint32_t(WrOpcode::send_with_inv) || op == uint32_t(WrOpcode::atomic_write);  // (10-14: TSO, ...)
}

void prefetch_slot(const uint8_t* slot, uint32_t size) {
  for (uint32_t at = 0; at < size; at += 64) __builtin_prefetch(slot + at);
}

bool write_record(int fd, const void* record, size_t size) {
  // Pipes take records of <= PIPE_BUF bytes atomically; a full pipe means the client is not reading.
  return fd >= 0 && ::write(fd, record, size) == ssize_t(size);
}

}  // namespace

// Written field by field straight into the ring slot. An entry built on the stack and then copied in is
// read back with wide loads that overlap its narrow stores: the loads wait until those stores, and every
// older one, reached the cache, including the previous slot's store, which misses (the client read that
// line last). That wait was most of the cost of delivering a completion.
void write_completion_entry(uint8_t* slot, const WorkCompletion& wc) {
  auto* e = reinterpret_cast<CompletionEntry*>(slot);  // slots are 8-byte aligned (entry size 64)
  e->wr_id = wc.wr_id;
  e->status = uint32_t(wc.status);
  e->opcode = uint32_t(wc.opcode);
  e->vendor_err = wc.vendor_err;
  e->byte_len = wc.byte_len;
  e->imm_data = wc.imm_data;
  e->qp_num = wc.qp_num;
  e->src_qp = wc.src_qp;
  e->wc_flags = wc.wc_flags;
  e->pkey_index = wc.pkey_index;
  e->sl = wc.sl;
  e->reserved = 0;
  e->tm_priv = wc.tm_priv;
  e->timestamp = wc.timestamp;
  e->tm_tag = wc.tm_tag;
}

// The daemon formatted these rings itself before handing them out, so their geometry is read once here,
// from memory the client could not yet have touched; from then on the RingView's copy is used.
void QueueService::attach_qp(SessionId session, uint32_t qpn, QpQueues queues) {
  detach_qp(qpn);  // numbers are not reused while attached; if one were, its old rings go first
  QpBinding b{session, std::move(queues), {}, {}};
  b.send = ring_of(b.queues.send_region);
  b.recv = ring_of(b.queues.recv_region);
  QpBinding& in = qps_.emplace(qpn, std::move(b)).first->second;
  // No drain is due yet: the client gets the rings only after this, and rings the doorbell when it posts.
  sessions_[session].qps.emplace_back(qpn, &in);
}

void QueueService::attach_cq(SessionId session, uint32_t cqn, CqQueue queue) {
  CqBinding b{session, std::move(queue), {}};
  b.ring = ring_of(b.queue.region);
  cqs_.insert_or_assign(cqn, std::move(b));
}

void QueueService::attach_srq(SessionId session, uint32_t srqn, SrqQueue queue) {
  detach_srq(srqn);
  SrqBinding b{session, std::move(queue), {}};
  b.ring = ring_of(b.queue.region);
  SrqBinding& in = srqs_.emplace(srqn, std::move(b)).first->second;
  sessions_[session].srqs.emplace_back(srqn, &in);
}

void QueueService::attach_doorbell(SessionId session, protocol::SharedRegion page) {
  SessionRings& rings = sessions_[session];
  rings.doorbell = std::move(page);
  auto* d = reinterpret_cast<protocol::SessionDoorbell*>(rings.doorbell.data());
  rings.seen = protocol::doorbell_word(*d).load(std::memory_order_acquire);
  rings.again = true;
}

// Normally every ring of the session is gone by now; any left is scanned every turn again.
void QueueService::detach_session(SessionId session) {
  const auto it = sessions_.find(session);
  if (it == sessions_.end()) return;
  if (it->second.qps.empty() && it->second.srqs.empty()) {
    sessions_.erase(it);
  } else {
    it->second.doorbell = {};
    it->second.again = true;
  }
}

// The client does not poll meanwhile (the verbs shim holds the CQ's lock across ibv_resize_cq, and this
// runs on the engine thread, the only producer), so the ring's consumer index is final here: nothing is
// polled twice or skipped. Completions the transport made since the last turn are delivered first, so that
// the check sees every completion outstanding; whatever did not fit the old ring (the client let it
// overrun) stays in the transport's CQ and is delivered to the new ring at the end.
int QueueService::resize_cq(uint32_t cqn, protocol::SharedRegion region) {
  const auto it = cqs_.find(cqn);
  if (it == cqs_.end()) return EINVAL;
  CqBinding& b = it->second;
  deliver_to(cqn, b);
  const protocol::RingView fresh = ring_of(region);
  const uint32_t consumer = b.ring.load_consumer();
  const uint32_t unpolled = b.producer - consumer;
  // A consumer index beyond what was produced is the client's scribble: refuse rather than copy garbage.
  if (unpolled > b.ring.capacity() || unpolled > fresh.capacity()) return EINVAL;
  if (int e = device_.resize_cq(cqn, fresh.capacity())) return e;
  for (uint32_t i = 0; i < unpolled; ++i) {
    std::memcpy(fresh.entry(i), b.ring.entry(consumer + i), protocol::completion_entry_size());
  }
  fresh.publish_producer(unpolled);
  fresh.arm().store(b.ring.arm().load(std::memory_order_acquire), std::memory_order_release);
  fresh.overflowed().store(b.ring.overflowed().load(std::memory_order_relaxed), std::memory_order_relaxed);
  b.queue.region = std::move(region);
  b.ring = fresh;
  b.producer = unpolled;
  b.consumer_seen = 0;  // the new ring's consumer index
  deliver_to(cqn, b);
  return 0;
}

void QueueService::detach_qp(uint32_t qpn) {
  const auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  if (auto s = sessions_.find(it->second.session); s != sessions_.end()) {
    std::erase_if(s->second.qps, [&](const auto& q) { return q.first == qpn; });
  }
  qps_.erase(it);
  qp_holders_.erase(qpn);
}

void QueueService::reset_qp(uint32_t qpn) {
  const auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  QpBinding& b = it->second;
  if (b.send.valid()) {
    b.send_consumer = b.send.load_producer();
    b.send.publish_consumer(b.send_consumer);
  }
  if (b.recv.valid()) {
    b.recv_consumer = b.recv.load_producer();
    b.recv.publish_consumer(b.recv_consumer);
  }
  if (auto own = own_completions_.find(b.queues.send_cq); own != own_completions_.end()) {
    std::erase_if(own->second, [&](const WorkCompletion& wc) { return wc.qp_num == qpn; });
    if (own->second.empty()) own_completions_.erase(own);
  }
}

void QueueService::set_qp_holders(uint32_t qpn, std::vector<SessionId> holders) {
  const auto it = qps_.find(qpn);
  if (it == qps_.end() || holders.empty()) return;
  QpBinding& b = it->second;
  if (std::find(holders.begin(), holders.end(), b.session) == holders.end()) {
    // Its session let go: the binding moves, so that the session's rings can go with the session.
    if (auto s = sessions_.find(b.session); s != sessions_.end()) {
      std::erase_if(s->second.qps, [&](const auto& q) { return q.first == qpn; });
    }
    b.session = holders.front();
    sessions_[b.session].qps.emplace_back(qpn, &b);
  }
  if (holders.size() == 1) {
    qp_holders_.erase(qpn);
  } else {
    qp_holders_[qpn] = std::move(holders);
  }
}

// A CQ number left in backlog_cqs_ is harmless: it is looked up, and skipped, at the next turn.
void QueueService::detach_cq(uint32_t cqn) {
  cqs_.erase(cqn);
  own_completions_.erase(cqn);
}

void QueueService::detach_srq(uint32_t srqn) {
  const auto it = srqs_.find(srqn);
  if (it == srqs_.end()) return;
  if (auto s = sessions_.find(it->second.session); s != sessions_.end()) {
    std::erase_if(s->second.srqs, [&](const auto& q) { return q.first == srqn; });
  }
  srqs_.erase(it);
}

void QueueService::set_event_pipe(SessionId session, int fd) {
  if (fd < 0) {
    event_pipes_.erase(session);
  } else {
    event_pipes_[session] = fd;
  }
}

void QueueService::set_channel(uint32_t cqn, int fd) {
  const auto it = cqs_.find(cqn);
  if (it != cqs_.end()) it->second.queue.channel_fd = fd;
}

namespace {

uint32_t rung(const protocol::SharedRegion& doorbell) {
  auto* d = reinterpret_cast<protocol::SessionDoorbell*>(doorbell.data());
  return protocol::doorbell_word(*d).load(std::memory_order_acquire);
}

}  // namespace

// Called with the engine's sleeping flag set (and a fence): a doorbell that moved, or a ring with work
// left, keeps it awake. The client bumps its doorbell before it looks at the flag (Doorbell::ring).
bool QueueService::work_waiting() const {
  for (const auto& [id, s] : sessions_) {
    if (s.again) return true;
    if (s.doorbell.data() != nullptr) {
      if (rung(s.doorbell) != s.seen) return true;
      continue;
    }
    for (const auto& [qpn, b] : s.qps) {
      if (b->send.valid() && b->send.readable(b->send_consumer) != 0) return true;
      if (b->recv.valid() && b->recv.readable(b->recv_consumer) != 0) return true;
    }
    for (const auto& [srqn, b] : s.srqs) {
      if (b->ring.readable(b->consumer) != 0) return true;
    }
  }
  return false;
}

// The doorbell is read before the rings: a post whose bump comes after this read is seen next turn.
unsigned QueueService::drain_work(transport::Nanos now) {
  unsigned n = 0;
  for (auto& [id, s] : sessions_) {
    bool go = s.again || s.doorbell.data() == nullptr;
    if (s.doorbell.data() != nullptr) {
      const uint32_t r = rung(s.doorbell);
      if (r != s.seen) {
        s.seen = r;
        go = true;
      }
    }
    if (go) n += drain_session(s, now);
  }
  return n;
}

// Receives go into the transport before sends, and a send only once every receive its client posted
// before it is in, on any of the session's receive rings: the answer to a SEND can arrive before the next
// turn, and a receive the application posted first (a NIC has it from its doorbell) must not be missing
// then, or the answer is RNR-NAKed. So the sends a turn may take are counted first, the receive rings are
// read after that count, and when a send is waiting they are taken whole, not a burst at a time. That
// costs no fairness worth keeping: a receive ring holds at most its queue's depth, refilled only as
// messages use receives up. (Holding the sends back instead while receives wait would starve the sends
// of a client that reposts more than a burst a turn.)
unsigned QueueService::drain_session(SessionRings& s, transport::Nanos now) {
  unsigned n = 0;
  bool more = false, sends_waiting = false;
  for (auto& [qpn, b] : s.qps) {
    b->send_ready = b->send.valid() ? b->send.readable(b->send_consumer) : 0;  // an XRC target has no send queue
    sends_waiting |= b->send_ready != 0;
  }
  const uint32_t receive_burst = sends_waiting ? UINT32_MAX : burst;
  for (auto& [qpn, b] : s.qps) {
    if (b->recv.valid()) n += drain_recv(qpn, *b, receive_burst, more);
  }
  for (auto& [srqn, b] : s.srqs) n += drain_srq(srqn, *b, receive_burst, more);
  for (auto& [qpn, b] : s.qps) {
    if (b->send_ready != 0) n += drain_send(qpn, *b, now, more);
  }
  s.again = more;
  return n;
}

// Copies a send slot into a work request. The slot is read field by field from shared memory into local
// variables once, so that a client rewriting it meanwhile cannot make a checked length differ from a used
// one.
bool QueueService::decode_send(const QpBinding& b, const uint8_t* slot, SendWr& wr) const {
  SendEntry e;
  std::memcpy(&e, slot, sizeof e);
  wr.wr_id = e.wr_id;
  if (!valid_opcode(e.opcode)) return false;
  wr.opcode = WrOpcode(e.opcode);
  wr.send_flags = e.send_flags;
  wr.imm_data = e.imm_data;
  wr.invalidate_rkey = e.invalidate_rkey;
  wr.remote_addr = e.remote_addr;
  wr.rkey = e.rkey;
  wr.compare_add = e.compare_add;
  wr.swap = e.swap;
  wr.ah = e.ah;
  wr.remote_qpn = e.remote_qpn;
  wr.remote_qkey = e.remote_qkey;
  wr.remote_srqn = e.remote_srqn;
  if (wr.opcode == WrOpcode::bind_mw) {
    wr.bind = {e.bind_mw, e.rkey, e.bind_mr_lkey, e.bind_addr, e.bind_length, e.bind_access};
  } else {
    wr.bind = {};
  }
  wr.sg_list.clear();
  wr.inline_data.clear();
  const uint8_t* tail = slot + sizeof(SendEntry);
  if (e.send_flags & send_inline) {
    if (e.inline_length > b.queues.max_inline) return false;
    wr.inline_data.assign(tail, tail + e.inline_length);
    return true;
  }
  if (e.num_sge > b.queues.max_send_sge) return false;
  for (unsigned i = 0; i < e.num_sge; ++i) {
    WireSge s;
    std::memcpy(&s, tail + i * sizeof(WireSge), sizeof s);
    wr.sg_list.push_back({s.addr, s.length, s.lkey});
  }
  return true;
}

// Only handles the service knows are judged here (every one the verbs service creates); an unknown
// number is left to the transport, which refuses it on a UD QP and ignores it on the others.
bool QueueService::foreign_ah(const QpBinding& b, uint32_t ahn) const {
  const auto it = ahs_.find(ahn);
  return it != ahs_.end() && it->second != b.session;
}

// A BIND_MW may name only the posting session's window and, unless it unbinds (length 0), its region.
// Unlike an address handle, a window or region the service does not know is refused too: every one is
// attached when the verbs service creates it.
bool QueueService::bind_allowed(const QpBinding& b, const MwBind& bind) const {
  const auto mw = mws_.find(bind.mw);
  if (mw == mws_.end() || mw->second != b.session) return false;
  if (bind.length == 0) return true;
  const auto mr = mrs_.find(bind.mr_lkey);
  return mr != mrs_.end() && mr->second == b.session;
}

void QueueService::reject_send(uint32_t qpn, const SendWr& wr, WcStatus status) {
  ++counters_.malformed_wr;
  WorkCompletion wc;
  wc.wr_id = wr.wr_id;
  wc.status = status;
  wc.qp_num = qpn;
  const auto it = qps_.find(qpn);
  if (it == qps_.end()) return;
  const uint32_t cqn = it->second.queues.send_cq;
  own_completions_[cqn].push_back(wc);
  if (auto cq = cqs_.find(cqn); cq != cqs_.end()) mark_backlog(cqn, cq->second);
}

unsigned QueueService::drain_send(uint32_t qpn, QpBinding& b, transport::Nanos now, bool& more) {
  unsigned taken = 0;
  SendWr wr;
  const uint32_t avail = b.send_ready;
  for (; taken < avail && taken < burst; ++taken) {
    const uint8_t* slot = b.send.entry(b.send_consumer);
    // The client just wrote these lines, so reading a slot misses the cache: ask for the next one early.
    if (taken + 1 < avail) prefetch_slot(b.send.entry(b.send_consumer + 1), b.send.entry_size());
    if (!decode_send(b, slot, wr) || foreign_ah(b, wr.ah)) {
      spdlog::debug("qp {:#x}: malformed send work request {} rejected", qpn, wr.wr_id);
      reject_send(qpn, wr, WcStatus::loc_qp_op_err);
    } else {
      if (wr.opcode == WrOpcode::bind_mw && !bind_allowed(b, wr.bind)) {
        // Another session's window or region: the bind fails as one with a foreign lkey's does, in the
        // transport, which completes it in send-queue order with an error (MW_BIND_ERR here) and moves
        // the QP to the error state, as it does any bind it refuses. A post cannot be refused with
        // EINVAL: the client wrote its ring, and ibv_post_send has already returned. Window number 0
        // is never a window (key slot 0 is unused), so the transport refuses the bind without looking
        // further; the client never learns whether the number it named exists.
        spdlog::debug("qp {:#x}: bind {} names another session's window or region", qpn, wr.wr_id);
        wr.bind.mw = 0;
      }
      const int rc = device_.post_send(qpn, wr, now);
      if (rc == ENOMEM) break;  // the transport's send queue is full: the request waits in the ring
      if (rc != 0) {
        spdlog::debug("qp {:#x}: send work request {} refused by the transport ({})", qpn, wr.wr_id, rc);
        reject_send(qpn, wr, WcStatus::loc_qp_op_err);
      } else {
        ++counters_.send_posted;
      }
    }
    ++b.send_consumer;
  }
  if (taken != 0) b.send.publish_consumer(b.send_consumer);  // once per drain: the client reads this line to post
  more |= taken < avail;
  return taken;
}

namespace {

// A receive slot as a work request; false if its SGE count is beyond what the queue was created with.
bool decode_recv(const uint8_t* slot, uint32_t max_sge, RecvWr& wr) {
  RecvEntry e;
  std::memcpy(&e, slot, sizeof e);
  wr.wr_id = e.wr_id;
  wr.sg_list.clear();
  if (e.num_sge > max_sge) return false;
  for (unsigned i = 0; i < e.num_sge; ++i) {
    WireSge s;
    std::memcpy(&s, slot + sizeof(RecvEntry) + i * sizeof(WireSge), sizeof s);
    wr.sg_list.push_back({s.addr, s.length, s.lkey});
  }
  return true;
}

}  // namespace

unsigned QueueService::drain_recv(uint32_t qpn, QpBinding& b, uint32_t limit, bool& more) {
  unsigned taken = 0;
  RecvWr wr;
  const uint32_t avail = b.recv.readable(b.recv_consumer);
  for (; taken < avail && taken < limit; ++taken) {
    if (taken + 1 < avail) prefetch_slot(b.recv.entry(b.recv_consumer + 1), b.recv.entry_size());
    if (!decode_recv(b.recv.entry(b.recv_consumer), b.queues.max_recv_sge, wr)) {
      ++counters_.malformed_wr;
      spdlog::debug("qp {:#x}: malformed receive work request {} dropped", qpn, wr.wr_id);
    } else {
      const int rc = device_.post_recv(qpn, wr);
      if (rc == ENOMEM) break;
      if (rc == 0) {
        ++counters_.recv_posted;
      } else {
        // The verbs shim refuses these before they reach the ring (a QP in RESET); a client writing the
        // ring directly loses the request, as a NIC drops a WQE it cannot execute.
        ++counters_.malformed_wr;
        spdlog::debug("qp {:#x}: receive work request {} refused by the transport ({})", qpn, wr.wr_id, rc);
      }
    }
    ++b.recv_consumer;
  }
  if (taken != 0) publish_recv_room(qpn, b);  // once per drain: the client reads this line to post
  more |= taken < avail;
  return taken;
}

void QueueService::publish_recv_room(uint32_t qpn, QpBinding& b) {
  b.recv.publish_consumer(b.recv_consumer - device_.receive_queue_size(qpn));
}

void QueueService::publish_srq_room(uint32_t srqn, SrqBinding& b) {
  b.ring.publish_consumer(b.consumer - device_.srq_size(srqn));
}

unsigned QueueService::drain_srq(uint32_t srqn, SrqBinding& b, uint32_t limit, bool& more) {
  unsigned taken = 0;
  RecvWr wr;
  const uint32_t avail = b.ring.readable(b.consumer);
  for (; taken < avail && taken < limit; ++taken) {
    if (!decode_recv(b.ring.entry(b.consumer), b.queue.max_sge, wr)) {
      ++counters_.malformed_wr;
    } else {
      const int rc = device_.post_srq_recv(srqn, wr);
      if (rc == ENOMEM) break;
      if (rc == 0) {
        ++counters_.recv_posted;
      } else {
        ++counters_.malformed_wr;
      }
    }
    ++b.consumer;
  }
  if (taken != 0) publish_srq_room(srqn, b);
  more |= taken < avail;
  return taken;
}

unsigned QueueService::deliver_completions() {
  unsigned n = 0;
  // First the CQs in the order they got completions, so that their events reach a shared completion
  // channel in completion order (transport::Device::take_active_cqs); then every CQ, for completions that
  // waited for room in a ring and the service's own.
  device_.take_retired_receives(retired_receives_);
  for (const uint32_t qpn : retired_receives_) {
    if (auto it = qps_.find(qpn); it != qps_.end() && it->second.recv.valid()) publish_recv_room(qpn, it->second);
  }
  device_.take_retired_srq_receives(retired_receives_);
  for (const uint32_t srqn : retired_receives_) {
    if (auto it = srqs_.find(srqn); it != srqs_.end()) publish_srq_room(srqn, it->second);
  }
  device_.take_active_cqs(active_cqs_);
  for (const uint32_t cqn : active_cqs_) {
    if (auto it = cqs_.find(cqn); it != cqs_.end()) n += deliver_to(cqn, it->second);
  }
  // Only the CQs that held something back, not every CQ: deliver_to marks them again if they still do.
  if (!backlog_cqs_.empty()) {
    backlog_turn_.swap(backlog_cqs_);
    for (const uint32_t cqn : backlog_turn_) {
      if (auto it = cqs_.find(cqn); it != cqs_.end()) {
        it->second.backlog = false;
        n += deliver_to(cqn, it->second);
      }
    }
    backlog_turn_.clear();
  }
  return n;
}

void QueueService::mark_backlog(uint32_t cqn, CqBinding& b) {
  if (b.backlog) return;
  b.backlog = true;
  backlog_cqs_.push_back(cqn);
}

// Completions move only while the ring has room: what does not fit stays in the transport's CQ (whose
// capacity is the same), so a slow poller delays completions rather than losing them; the transport
// reports an overflow if even that fills, as a NIC's CQ does. A CQ that ran out of room is marked, and
// retried every turn until the client made room.
unsigned QueueService::deliver_to(uint32_t cqn, CqBinding& b) {
  // The room the consumer index seen last leaves; the index is read again only when that room is short
  // of a poll batch. A scribbled index (beyond the producer) reads as a full ring.
  const uint32_t capacity = b.ring.capacity();
  uint32_t used = b.producer - b.consumer_seen;
  if (used > capacity || capacity - used < std::min<uint32_t>(capacity, 64)) {
    b.consumer_seen = b.ring.load_consumer();
    used = b.producer - b.consumer_seen;
  }
  uint32_t room = used > capacity ? 0 : capacity - used;
  unsigned moved = 0;
  bool wakes_solicited = false;  // a solicited receive or an error: what a solicited-only arm waits for
  const auto note = [&](const WorkCompletion& wc) {
    wakes_solicited |= wc.solicited || wc.status != WcStatus::success;
  };
  if (auto own = own_completions_.find(cqn); own != own_completions_.end()) {
    auto& v = own->second;
    size_t i = 0;
    for (; i < v.size() && room > 0; ++i, --room, ++moved) {
      note(v[i]);
      write_completion_entry(b.ring.entry(b.producer++), v[i]);
    }
    v.erase(v.begin(), v.begin() + long(i));
    if (v.empty()) {
      own_completions_.erase(own);
    } else {
      mark_backlog(cqn, b);
    }
  }
  while (room > 0) {
    scratch_.resize(std::min<uint32_t>(room, 64));
    const int got = device_.poll_cq(cqn, scratch_);
    if (got <= 0) break;
    for (int i = 0; i < got; ++i) {
      note(scratch_[size_t(i)]);
      write_completion_entry(b.ring.entry(b.producer++), scratch_[size_t(i)]);
    }
    room -= uint32_t(got);
    moved += unsigned(got);
  }
  if (room == 0) mark_backlog(cqn, b);  // the transport may hold more than fitted
  if (moved != 0) {
    b.ring.publish_producer(b.producer);
    counters_.completions += moved;
    signal(b, cqn, wakes_solicited);
  }
  return moved;
}

// An armed CQ gets one event per arming, as ibv_req_notify_cq promises: on any new completion, or, armed
// solicited-only, on a solicited receive or an error completion. The arm word is exchanged, not just
// read, so that a client re-arming concurrently is never lost nor double-counted.
void QueueService::signal(CqBinding& b, uint32_t cqn, bool solicited_or_error) {
  // Pairs with the client's seq_cst store of the arm word: either we see the arm, or its next poll sees
  // the completions we just published.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint32_t arm = b.ring.arm().load(std::memory_order_acquire);
  if (arm == uint32_t(protocol::CqArm::none)) return;
  if (arm == uint32_t(protocol::CqArm::solicited) && !solicited_or_error) return;
  if (b.ring.arm().exchange(uint32_t(protocol::CqArm::none), std::memory_order_acq_rel) == 0) return;
  const protocol::CompletionEventRecord r{cqn, 0};
  if (write_record(b.queue.channel_fd, &r, sizeof r)) {
    ++counters_.events_sent;
  } else {
    ++counters_.events_lost;
  }
}

void QueueService::send_event(SessionId session, const protocol::AsyncEventRecord& r) {
  const auto it = event_pipes_.find(session);
  if (it != event_pipes_.end() && write_record(it->second, &r, sizeof r)) {
    ++counters_.events_sent;
  } else {
    ++counters_.events_lost;
  }
}

void QueueService::broadcast_port_event(verbs::EventType type, uint32_t port_num) {
  for (const auto& [session, fd] : event_pipes_) send_event(session, {uint32_t(type), port_num});
}

void QueueService::deliver_events() {
  for (const transport::AsyncEvent& ev : device_.take_events()) {
    SessionId owner = 0;
    bool found = false;
    switch (ev.type) {
      case EventType::cq_err:
        if (auto it = cqs_.find(ev.object); it != cqs_.end()) owner = it->second.session, found = true;
        break;
      case EventType::srq_err:
      case EventType::srq_limit_reached:
        if (auto it = srqs_.find(ev.object); it != srqs_.end()) owner = it->second.session, found = true;
        break;
      default:
        if (auto h = qp_holders_.find(ev.object); h != qp_holders_.end()) {
          for (SessionId holder : h->second) send_event(holder, {uint32_t(ev.type), ev.object});
          continue;  // every handle of a shared QP hears of it, as the kernel's open QPs do
        }
        if (auto it = qps_.find(ev.object); it != qps_.end()) owner = it->second.session, found = true;
        break;
    }
    if (found) send_event(owner, {uint32_t(ev.type), ev.object});
  }
}

}  // namespace uroce::emulator::engine
