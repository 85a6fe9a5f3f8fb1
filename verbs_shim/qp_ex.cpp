// The ibv_qp_ex work-request API (ibv_wr_start ... ibv_wr_complete). An op call (ibv_wr_send, ...) opens a
// work request with the QP's wr_id and wr_flags of that moment, the setters that follow fill it, and the
// next op (or wr_complete) writes it into the send ring's next slot without publishing it. wr_complete
// publishes the whole batch with one store and rings the doorbell once, as ibv_post_send does for a
// chain; wr_abort forgets it. Any error on the way (an operation uroce cannot do, a setter without an op,
// too many SGEs, too much inline data, a full ring) is kept and returned by wr_complete, which then posts
// nothing: a batch is all or nothing, as with rdma-core's providers, and never a silent success.
#include <cstddef>
#include <cstring>
#include <vector>

#include "shim.hpp"

namespace uroce::shim {

using emulator::protocol::SendEntry;
using emulator::protocol::WireSge;

struct WrBuilder {
  SendEntry wr{};
  bool open = false;         // an op started a request that is not staged yet
  bool is_inline = false;    // its data is inline_data, not sges
  bool has_ud_addr = false;
  std::vector<WireSge> sges;
  std::vector<uint8_t> inline_data;
  unsigned staged = 0;       // requests of this batch in the ring, unpublished
  int error = 0;             // the batch's first error
};

void WrBuilderDeleter::operator()(WrBuilder* b) const { delete b; }

namespace {

// The send flags a work request may carry; IBV_SEND_INLINE is decided by the setter used (as providers
// do: wr_set_inline_data makes a request inline), IBV_SEND_IP_CSUM is an offload uroce does not have.
constexpr unsigned allowed_flags = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

Qp& qp_of(ibv_qp_ex* x) { return *to_shim(x); }
WrBuilder& builder(ibv_qp_ex* x) { return *qp_of(x).wr; }

void fail(WrBuilder& b, int error) {
  if (b.error == 0) b.error = error;
}

// An atomic needs an 8-byte aligned remote address and 8 bytes of local buffer, not inline data (as
// ibv_post_send checks in post.cpp): refused at wr_complete rather than completed in error later. An
// ATOMIC WRITE carries its 8 bytes in the request: only its address is checked.
bool atomic_ok(const WrBuilder& b) {
  if (b.wr.opcode == IBV_WR_ATOMIC_WRITE) return (b.wr.remote_addr & 7) == 0;
  if (b.wr.opcode != IBV_WR_ATOMIC_CMP_AND_SWP && b.wr.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) return true;
  uint64_t length = 0;
  for (const WireSge& s : b.sges) length += s.length;
  return (b.wr.remote_addr & 7) == 0 && length >= 8 && !b.is_inline;
}

// Writes the open request into the ring (unpublished).
void stage_open(Qp& q) {
  WrBuilder& b = *q.wr;
  if (!b.open) return;
  b.open = false;
  if (q.qp.qp_type == IBV_QPT_UD && !b.has_ud_addr) return fail(b, EINVAL);  // a datagram needs its address
  if (!atomic_ok(b)) return fail(b, EINVAL);
  if (b.error) return;
  SendEntry e = b.wr;
  if (b.wr.opcode == IBV_WR_ATOMIC_WRITE) {  // its bytes are in the request; a data setter's are not its
    b.is_inline = false;
    b.sges.clear();
  }
  if (b.is_inline) e.send_flags |= IBV_SEND_INLINE;
  const int rc = b.is_inline ? q.impl->send.stage(e, {}, b.inline_data) : q.impl->send.stage(e, b.sges, {});
  if (rc) return fail(b, rc);
  ++b.staged;
}

// Every op: the previous request is done; a new one starts from the QP's wr_id and wr_flags.
SendEntry& begin(ibv_qp_ex* x, ibv_wr_opcode op) {
  Qp& q = qp_of(x);
  stage_open(q);
  WrBuilder& b = *q.wr;
  b.wr = SendEntry{};
  b.wr.wr_id = x->wr_id;
  b.wr.opcode = uint32_t(op);
  b.wr.send_flags = x->wr_flags & ~unsigned(IBV_SEND_INLINE);
  b.is_inline = b.has_ud_addr = false;
  b.sges.clear();
  b.inline_data.clear();
  b.open = true;
  if (x->wr_flags & ~allowed_flags) fail(b, (x->wr_flags & IBV_SEND_IP_CSUM) ? EOPNOTSUPP : EINVAL);
  if (!(send_opcodes_of(q.qp.qp_type) & send_opcode_bit(op))) fail(b, EOPNOTSUPP);  // e.g. an RDMA WRITE on a UD QP
  return b.wr;
}

void remote(SendEntry& e, uint32_t rkey, uint64_t remote_addr) {
  e.rkey = rkey;
  e.remote_addr = remote_addr;
}

void wr_send(ibv_qp_ex* x) { begin(x, IBV_WR_SEND); }
// ibv_wr_* take the immediate in network order; the ring holds the value on the wire.
void wr_send_imm(ibv_qp_ex* x, __be32 imm) { begin(x, IBV_WR_SEND_WITH_IMM).imm_data = ntohl(imm); }
void wr_send_inv(ibv_qp_ex* x, uint32_t rkey) { begin(x, IBV_WR_SEND_WITH_INV).invalidate_rkey = rkey; }
void wr_local_inv(ibv_qp_ex* x, uint32_t rkey) { begin(x, IBV_WR_LOCAL_INV).invalidate_rkey = rkey; }

void wr_rdma_write(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) { remote(begin(x, IBV_WR_RDMA_WRITE), rkey, addr); }

void wr_rdma_write_imm(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, __be32 imm) {
  SendEntry& e = begin(x, IBV_WR_RDMA_WRITE_WITH_IMM);
  remote(e, rkey, addr);
  e.imm_data = ntohl(imm);
}

void wr_rdma_read(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) { remote(begin(x, IBV_WR_RDMA_READ), rkey, addr); }

void wr_atomic_cmp_swp(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  SendEntry& e = begin(x, IBV_WR_ATOMIC_CMP_AND_SWP);
  remote(e, rkey, addr);
  e.compare_add = compare;
  e.swap = swap;
}

void wr_atomic_fetch_add(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t add) {
  SendEntry& e = begin(x, IBV_WR_ATOMIC_FETCH_AND_ADD);
  remote(e, rkey, addr);
  e.compare_add = add;
}

// As rxe's: the window keeps its rkey field; the application sets it from `rkey` (ibv_post_send's
// BIND_MW does not change it either, only ibv_bind_mw does).
void wr_bind_mw(ibv_qp_ex* x, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  SendEntry& e = begin(x, IBV_WR_BIND_MW);
  if (!info || bind_entry(e, mw, rkey, *info) != 0) fail(builder(x), EINVAL);
}

// The 8 bytes are taken now: the application may reuse `atomic_wr` as soon as the call returns.
void wr_atomic_write(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, const void* atomic_wr) {
  SendEntry& e = begin(x, IBV_WR_ATOMIC_WRITE);
  remote(e, rkey, addr);
  if (atomic_wr == nullptr) return fail(builder(x), EINVAL);
  std::memcpy(&e.compare_add, atomic_wr, 8);
}

// Operations uroce cannot do: the batch fails with EOPNOTSUPP at wr_complete.
void unsupported_op(ibv_qp_ex* x) {
  Qp& q = qp_of(x);
  stage_open(q);
  fail(*q.wr, EOPNOTSUPP);
}
void wr_send_tso(ibv_qp_ex* x, void*, uint16_t, uint16_t) { unsupported_op(x); }

// A setter belongs to the request the last op opened; without one it is an error.
WrBuilder* open_request(ibv_qp_ex* x) {
  WrBuilder& b = builder(x);
  if (b.open) return &b;
  fail(b, EINVAL);
  return nullptr;
}

void wr_set_sge_list(ibv_qp_ex* x, size_t num_sge, const ibv_sge* list) {
  WrBuilder* b = open_request(x);
  if (!b) return;
  b->is_inline = false;
  b->inline_data.clear();
  if (num_sge > qp_of(x).impl->cap.max_send_sge) return fail(*b, EINVAL);
  static_assert(sizeof(ibv_sge) == sizeof(WireSge) && offsetof(ibv_sge, lkey) == offsetof(WireSge, lkey));
  const auto* first = reinterpret_cast<const WireSge*>(list);
  b->sges.assign(first, first + num_sge);
}

void wr_set_sge(ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge s{addr, length, lkey};
  wr_set_sge_list(x, 1, &s);
}

// Inline data is copied now: the application may reuse its buffers as soon as the setter returns.
void wr_set_inline_data_list(ibv_qp_ex* x, size_t num_buf, const ibv_data_buf* bufs) {
  WrBuilder* b = open_request(x);
  if (!b) return;
  b->is_inline = true;
  b->sges.clear();
  b->inline_data.clear();
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += bufs[i].length;
  if (total > qp_of(x).impl->cap.max_inline_data) return fail(*b, EINVAL);
  for (size_t i = 0; i < num_buf; ++i) {
    const auto* p = static_cast<const uint8_t*>(bufs[i].addr);
    b->inline_data.insert(b->inline_data.end(), p, p + bufs[i].length);
  }
}

void wr_set_inline_data(ibv_qp_ex* x, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(x, 1, &buf);
}

void wr_set_ud_addr(ibv_qp_ex* x, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  WrBuilder* b = open_request(x);
  if (!b) return;
  if (qp_of(x).qp.qp_type != IBV_QPT_UD || !ah) return fail(*b, EINVAL);
  b->wr.ah = ah->handle;
  b->wr.remote_qpn = remote_qpn;
  b->wr.remote_qkey = remote_qkey;
  b->has_ud_addr = true;
}

// The XRC SRQ at the target that takes the request: on an XRC initiator only.
void wr_set_xrc_srqn(ibv_qp_ex* x, uint32_t remote_srqn) {
  WrBuilder* b = open_request(x);
  if (!b) return;
  if (qp_of(x).qp.qp_type != IBV_QPT_XRC_SEND) return fail(*b, EOPNOTSUPP);
  b->wr.remote_srqn = remote_srqn;
}

// The send queue stays locked from wr_start to wr_complete / wr_abort: the batch is built in its slots.
void wr_start(ibv_qp_ex* x) {
  Qp& q = qp_of(x);
  q.send_lock.lock();
  WrBuilder& b = *q.wr;
  b.open = false;
  b.staged = 0;
  b.error = q.qp.state == IBV_QPS_RESET ? EINVAL : 0;  // as ibv_post_send: a QP in RESET takes no work
}

int wr_complete(ibv_qp_ex* x) {
  Qp& q = qp_of(x);
  stage_open(q);
  WrBuilder& b = *q.wr;
  const int error = b.error;
  const bool posted = error == 0 && b.staged != 0;
  if (error) {
    q.impl->send.discard();
  } else {
    q.impl->send.publish();
  }
  q.send_lock.unlock();
  if (posted) to_shim(q.qp.context)->impl->ring_doorbell();
  return error;
}

void wr_abort(ibv_qp_ex* x) {
  Qp& q = qp_of(x);
  q.impl->send.discard();
  q.wr->open = false;
  q.send_lock.unlock();
}

}  // namespace

int check_send_ops(ibv_qp_type type, uint64_t send_ops_flags) {
  // IBV_QP_EX_WITH_<op> is bit IBV_WR_<op> up to TSO (10); ATOMIC WRITE breaks the pattern (bit 12 for
  // opcode 15), so it is translated.
  uint64_t allowed = send_opcodes_of(type) & ((uint64_t(1) << 11) - 1);
  if (send_opcodes_of(type) & send_opcode_bit(IBV_WR_ATOMIC_WRITE)) allowed |= IBV_QP_EX_WITH_ATOMIC_WRITE;
  return (send_ops_flags & ~allowed) ? EOPNOTSUPP : 0;
}

int enable_wr_api(Qp& q) {
  // Room for the largest request now, so that building one never allocates.
  try {
    q.wr.reset(new WrBuilder{});
    q.wr->sges.reserve(q.impl->cap.max_send_sge);
    q.wr->inline_data.reserve(q.impl->cap.max_inline_data);
  } catch (const std::bad_alloc&) {
    q.wr.reset();
    return ENOMEM;
  }
  ibv_qp_ex& x = q.qp_ex;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_send_tso = wr_send_tso;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_atomic_write = wr_atomic_write;
  return 0;
}

}  // namespace uroce::shim

using namespace uroce::shim;

// Only QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS have the API, as with rdma-core (NULL otherwise).
SHIM_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  Qp* q = to_shim(qp);
  if (!q->wr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return &q->qp_ex;
}
