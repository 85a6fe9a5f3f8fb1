// ibv_post_send / ibv_post_recv / ibv_post_srq_recv: each work request of the chain becomes one ring
// entry (stores into shared memory); the doorbell is rung once per chain, and only makes a system call
// when the engine sleeps.
#include <arpa/inet.h>

#include <cstring>
#include <span>

#include "shim.hpp"

namespace uroce::shim {
namespace {

using emulator::protocol::SendEntry;
using emulator::protocol::WireSge;
static_assert(sizeof(ibv_sge) == sizeof(WireSge) && offsetof(ibv_sge, lkey) == offsetof(WireSge, lkey));

std::span<const WireSge> sges(const ibv_sge* list, int n) {
  return {reinterpret_cast<const WireSge*>(list), size_t(n)};
}

// Inline data is copied now: the application may reuse its buffers as soon as the post returns.
int gather_inline(const ibv_send_wr& wr, uint8_t* out, size_t room, size_t& length) {
  length = 0;
  for (int i = 0; i < wr.num_sge; ++i) {
    const ibv_sge& s = wr.sg_list[i];
    if (length + s.length > room) return EINVAL;
    std::memcpy(out + length, reinterpret_cast<const void*>(uintptr_t(s.addr)), s.length);
    length += s.length;
  }
  return 0;
}

// An atomic needs an 8-byte aligned remote address and 8 bytes of local buffer, and cannot be inline.
// The transport refuses other atomics (transport/device.cpp post_send), but by then the request is in the
// ring and ibv_post_send has returned success: refuse them here, as rdma-core's rxe provider does.
bool valid_atomic(const ibv_send_wr& wr) {
  if (wr.opcode == IBV_WR_ATOMIC_WRITE) return (wr.wr.rdma.remote_addr & 7) == 0;
  if (wr.opcode != IBV_WR_ATOMIC_CMP_AND_SWP && wr.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD) return true;
  uint64_t length = 0;
  for (int i = 0; i < wr.num_sge; ++i) length += wr.sg_list[i].length;
  return (wr.wr.atomic.remote_addr & 7) == 0 && length >= 8 && !(wr.send_flags & IBV_SEND_INLINE);
}

int post_one(Qp& q, const ibv_send_wr& wr) {
  if (wr.num_sge < 0 || !valid_atomic(wr)) return EINVAL;
  // An opcode the QP type cannot carry (a READ on UC, a WRITE on UD) is refused here, as the kernel's
  // software providers do (rdmavt, rxe), instead of completing in error later.
  if (!(send_opcodes_of(q.qp.qp_type) & send_opcode_bit(wr.opcode))) return EINVAL;
  SendEntry e{};
  e.wr_id = wr.wr_id;
  e.opcode = uint32_t(wr.opcode);
  e.send_flags = wr.send_flags;
  switch (wr.opcode) {
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      e.imm_data = ntohl(wr.imm_data);  // ibv_send_wr holds it in network order; the ring, the wire value
      break;
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_LOCAL_INV:  // verbs.h's invalidate_rkey names the key for both
      e.invalidate_rkey = wr.invalidate_rkey;
      break;
    default:
      break;
  }
  // A bind takes no data: its SGEs and inline flag, if any, are not the bind's business.
  if (wr.opcode == IBV_WR_BIND_MW) {
    if (int rc = bind_entry(e, wr.bind_mw.mw, wr.bind_mw.rkey, wr.bind_mw.bind_info)) return rc;
    e.send_flags &= ~unsigned(IBV_SEND_INLINE);
    return q.impl->send.post(e, {}, {});
  }
  switch (wr.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
      e.remote_addr = wr.wr.rdma.remote_addr;
      e.rkey = wr.wr.rdma.rkey;
      break;
    case IBV_WR_ATOMIC_WRITE: {
      // ibv_send_wr has no field for its 8 bytes: they are what the gather list holds (exactly 8), taken
      // now, as inline data is. ibv_wr_atomic_write passes them by pointer instead.
      uint8_t bytes[8];
      size_t length = 0;
      if (gather_inline(wr, bytes, sizeof bytes, length) != 0 || length != 8) return EINVAL;
      e.remote_addr = wr.wr.rdma.remote_addr;
      e.rkey = wr.wr.rdma.rkey;
      std::memcpy(&e.compare_add, bytes, 8);
      e.send_flags &= ~unsigned(IBV_SEND_INLINE);
      return q.impl->send.post(e, {}, {});
    }
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      e.remote_addr = wr.wr.atomic.remote_addr;
      e.compare_add = wr.wr.atomic.compare_add;
      e.swap = wr.wr.atomic.swap;
      e.rkey = wr.wr.atomic.rkey;
      break;
    default:
      break;
  }
  if (q.qp.qp_type == IBV_QPT_XRC_SEND) e.remote_srqn = wr.qp_type.xrc.remote_srqn;
  if (q.qp.qp_type == IBV_QPT_UD) {
    if (!wr.wr.ud.ah) return EINVAL;
    e.ah = wr.wr.ud.ah->handle;
    e.remote_qpn = wr.wr.ud.remote_qpn;
    e.remote_qkey = wr.wr.ud.remote_qkey;
  }
  if (wr.send_flags & IBV_SEND_INLINE) {
    uint8_t data[1024];
    const size_t room = std::min<size_t>(sizeof data, q.impl->cap.max_inline_data);
    size_t length = 0;
    if (int rc = gather_inline(wr, data, room, length)) return rc;
    e.num_sge = 0;
    e.inline_length = uint32_t(length);
    return q.impl->send.post(e, {}, {data, length});
  }
  e.num_sge = uint16_t(wr.num_sge);
  return q.impl->send.post(e, sges(wr.sg_list, wr.num_sge), {});
}

}  // namespace

uint64_t send_opcodes_of(ibv_qp_type type) {
  const uint64_t ud = send_opcode_bit(IBV_WR_SEND) | send_opcode_bit(IBV_WR_SEND_WITH_IMM);
  const uint64_t uc = ud | send_opcode_bit(IBV_WR_RDMA_WRITE) | send_opcode_bit(IBV_WR_RDMA_WRITE_WITH_IMM) |
                      send_opcode_bit(IBV_WR_LOCAL_INV) | send_opcode_bit(IBV_WR_BIND_MW);
  const uint64_t xrc = uc | send_opcode_bit(IBV_WR_RDMA_READ) | send_opcode_bit(IBV_WR_ATOMIC_CMP_AND_SWP) |
                       send_opcode_bit(IBV_WR_ATOMIC_FETCH_AND_ADD) | send_opcode_bit(IBV_WR_SEND_WITH_INV);
  switch (type) {
    case IBV_QPT_RC: return xrc | send_opcode_bit(IBV_WR_ATOMIC_WRITE);  // IBTA 1.5: RC alone has it
    case IBV_QPT_XRC_SEND: return xrc;
    case IBV_QPT_UC: return uc;
    case IBV_QPT_UD: return ud;
    case IBV_QPT_RAW_PACKET: return send_opcode_bit(IBV_WR_SEND);  // the frame as posted
    default: return 0;
  }
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* q = to_shim(qp);
  if (qp->state == IBV_QPS_RESET) {  // a QP in RESET takes no work (IBA 10.3.1; rdma-core's test_qpex)
    *bad_wr = wr;
    return EINVAL;
  }
  int rc = 0;
  bool posted = false;
  {
    std::lock_guard g(q->send_lock);
    for (; wr; wr = wr->next) {
      if ((rc = post_one(*q, *wr))) {
        *bad_wr = wr;
        break;
      }
      posted = true;
    }
  }
  if (posted) to_shim(qp->context)->impl->ring_doorbell();
  return rc;
}

int post_receive_chain(client::RecvRing& ring, std::mutex& lock, ibv_context* context, ibv_recv_wr* wr,
                       ibv_recv_wr** bad_wr) {
  int rc = 0;
  bool posted = false;
  {
    std::lock_guard g(lock);
    for (; wr; wr = wr->next) {
      if (wr->num_sge < 0 || (rc = ring.post(wr->wr_id, sges(wr->sg_list, wr->num_sge)))) {
        if (!rc) rc = EINVAL;
        *bad_wr = wr;
        break;
      }
      posted = true;
    }
  }
  if (posted) to_shim(context)->impl->ring_doorbell();
  return rc;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* q = to_shim(qp);
  if (!q->impl->recv || qp->state == IBV_QPS_RESET) {  // the QP receives through its SRQ, or is in RESET
    *bad_wr = wr;
    return EINVAL;
  }
  return post_receive_chain(*q->impl->recv, q->recv_lock, qp->context, wr, bad_wr);
}

int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* s = to_shim(srq);
  return post_receive_chain(s->impl->ring, s->lock, srq->context, wr, bad_wr);
}

}  // namespace uroce::shim
