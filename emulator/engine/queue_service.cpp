#include "emulator/engine/queue_service.hpp"

#include <unistd.h>

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

bool valid_opcode(uint32_t op) { return op <= uint32_t(WrOpcode::send_with_inv); }

CompletionEntry to_entry(const WorkCompletion& wc) {
  CompletionEntry e{};
  e.wr_id = wc.wr_id;
  e.status = uint32_t(wc.status);
  e.opcode = uint32_t(wc.opcode);
  e.vendor_err = wc.vendor_err;
  e.byte_len = wc.byte_len;
  e.imm_data = wc.imm_data;
  e.qp_num = wc.qp_num;
  e.src_qp = wc.src_qp;
  e.wc_flags = wc.wc_flags;
  e.pkey_index = wc.pkey_index;
  e.sl = wc.sl;
  return e;
}

bool write_record(int fd, const void* record, size_t size) {
  // Pipes take records of <= PIPE_BUF bytes atomically; a full pipe means the client is not reading.
  return fd >= 0 && ::write(fd, record, size) == ssize_t(size);
}

}  // namespace

// The daemon formatted these rings itself before handing them out, so their geometry is read once here,
// from memory the client could not yet have touched; from then on the RingView's copy is used.
void QueueService::attach_qp(SessionId session, uint32_t qpn, QpQueues queues) {
  QpBinding b{session, std::move(queues), {}, {}};
  b.send = ring_of(b.queues.send_region);
  b.recv = ring_of(b.queues.recv_region);
  qps_.insert_or_assign(qpn, std::move(b));
}

void QueueService::attach_cq(SessionId session, uint32_t cqn, CqQueue queue) {
  CqBinding b{session, std::move(queue), {}};
  b.ring = ring_of(b.queue.region);
  cqs_.insert_or_assign(cqn, std::move(b));
}

void QueueService::attach_srq(SessionId session, uint32_t srqn, SrqQueue queue) {
  SrqBinding b{session, std::move(queue), {}};
  b.ring = ring_of(b.queue.region);
  srqs_.insert_or_assign(srqn, std::move(b));
}

void QueueService::detach_qp(uint32_t qpn) { qps_.erase(qpn); }
void QueueService::detach_cq(uint32_t cqn) {
  cqs_.erase(cqn);
  own_completions_.erase(cqn);
}
void QueueService::detach_srq(uint32_t srqn) { srqs_.erase(srqn); }

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

bool QueueService::work_waiting() const {
  for (const auto& [qpn, b] : qps_) {
    if (b.send.readable(b.send_consumer) != 0) return true;
    if (b.recv.valid() && b.recv.readable(b.recv_consumer) != 0) return true;
  }
  for (const auto& [srqn, b] : srqs_) {
    if (b.ring.readable(b.consumer) != 0) return true;
  }
  return false;
}

unsigned QueueService::drain_work(transport::Nanos now) {
  unsigned n = 0;
  for (auto& [qpn, b] : qps_) {
    if (b.recv.valid()) n += drain_recv(qpn, b);
    n += drain_send(qpn, b, now);
  }
  for (auto& [srqn, b] : srqs_) n += drain_srq(srqn, b);
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

void QueueService::reject_send(uint32_t qpn, const SendWr& wr, WcStatus status) {
  ++counters_.malformed_wr;
  WorkCompletion wc;
  wc.wr_id = wr.wr_id;
  wc.status = status;
  wc.qp_num = qpn;
  const auto it = qps_.find(qpn);
  if (it != qps_.end()) own_completions_[it->second.queues.send_cq].push_back(wc);
}

unsigned QueueService::drain_send(uint32_t qpn, QpBinding& b, transport::Nanos now) {
  unsigned taken = 0;
  SendWr wr;
  for (uint32_t avail = b.send.readable(b.send_consumer); taken < avail && taken < burst; ++taken) {
    const uint8_t* slot = b.send.entry(b.send_consumer);
    if (!decode_send(b, slot, wr) || foreign_ah(b, wr.ah)) {
      spdlog::debug("qp {:#x}: malformed send work request {} rejected", qpn, wr.wr_id);
      reject_send(qpn, wr, WcStatus::loc_qp_op_err);
    } else {
      const int rc = device_.post_send(qpn, wr, now);
      if (rc == ENOMEM) break;  // the transport's send queue is full: the request waits in the ring
      if (rc != 0) {
        spdlog::debug("qp {:#x}: send work request {} refused by the transport ({})", qpn, wr.wr_id, rc);
        reject_send(qpn, wr, WcStatus::loc_qp_op_err);
      } else {
        ++counters_.send_posted;
      }
    }
    b.send.publish_consumer(++b.send_consumer);
  }
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

unsigned QueueService::drain_recv(uint32_t qpn, QpBinding& b) {
  unsigned taken = 0;
  RecvWr wr;
  for (uint32_t avail = b.recv.readable(b.recv_consumer); taken < avail && taken < burst; ++taken) {
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
    b.recv.publish_consumer(++b.recv_consumer);
  }
  return taken;
}

unsigned QueueService::drain_srq(uint32_t srqn, SrqBinding& b) {
  unsigned taken = 0;
  RecvWr wr;
  for (uint32_t avail = b.ring.readable(b.consumer); taken < avail && taken < burst; ++taken) {
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
    b.ring.publish_consumer(++b.consumer);
  }
  return taken;
}

unsigned QueueService::deliver_completions() {
  unsigned n = 0;
  for (auto& [cqn, b] : cqs_) n += deliver_to(cqn, b);
  return n;
}

// Completions move only while the ring has room: what does not fit stays in the transport's CQ (whose
// capacity is the same), so a slow poller delays completions rather than losing them; the transport
// reports an overflow if even that fills, as a NIC's CQ does.
unsigned QueueService::deliver_to(uint32_t cqn, CqBinding& b) {
  uint32_t room = b.ring.writable(b.producer);
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
      const CompletionEntry e = to_entry(v[i]);
      std::memcpy(b.ring.entry(b.producer++), &e, sizeof e);
    }
    v.erase(v.begin(), v.begin() + long(i));
    if (v.empty()) own_completions_.erase(own);
  }
  while (room > 0) {
    scratch_.resize(std::min<uint32_t>(room, 64));
    const int got = device_.poll_cq(cqn, scratch_);
    if (got <= 0) break;
    for (int i = 0; i < got; ++i) {
      note(scratch_[size_t(i)]);
      const CompletionEntry e = to_entry(scratch_[size_t(i)]);
      std::memcpy(b.ring.entry(b.producer++), &e, sizeof e);
    }
    room -= uint32_t(got);
    moved += unsigned(got);
  }
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
        if (auto it = qps_.find(ev.object); it != qps_.end()) owner = it->second.session, found = true;
        break;
    }
    if (found) send_event(owner, {uint32_t(ev.type), ev.object});
  }
}

}  // namespace uroce::emulator::engine
