// Moving bytes: the credit protocol of librdmacm's rsockets, which uroce speaks so that it talks to the
// real library.
//
// The receiver owns a ring (rbuf) of two halves. It grants the sender one half at a time by writing an
// Sge into the sender's target SGL array (an RDMA WRITE WITH IMMEDIATE whose immediate is an Op::sgl
// message carrying the receiver's new message limit). The sender writes data into the granted half
// (WRITE WITH IMMEDIATE, Op::data and the length) and never has more messages in flight than the limit,
// so each one finds a posted receive for its immediate. rrecv copies out of the ring, and once half the
// ring is free again, or half the receives are used, grants again.
#include <arpa/inet.h>
#include <byteswap.h>
#include <poll.h>
#include <rdma/rsocket.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "verbs_shim/rdmacm/cma.hpp"
#include "verbs_shim/rsocket/rsocket.hpp"

using namespace uroce::rsocket;

namespace {

constexpr uint64_t kRecvFlag = uint64_t(1) << 63;

int posted(int rc) { return rc != 0 ? fail(rc) : 0; }

using Clock = std::chrono::steady_clock;
constexpr auto kCmCheckInterval = std::chrono::milliseconds(1);

int post_write(Rsocket* rs, ibv_sge* sgl, int nsge, uint32_t msg, int flags, uint64_t addr, uint32_t rkey,
               bool with_imm) {
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = msg;
  wr.sg_list = sgl;
  wr.num_sge = nsge;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = flags;
  wr.imm_data = htonl(msg);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  return posted(ibv_post_send(rs->cm_id->qp, &wr, &bad));
}

// A message with no data: a zero-length WRITE WITH IMMEDIATE (address and key are not checked).
int post_msg(Rsocket* rs, uint32_t msg) { return post_write(rs, nullptr, 0, msg, 0, 0, 0, true); }

Sge wire_sge(const Rsocket* rs, uint64_t addr, uint32_t key, uint32_t length) {
  if (!(rs->opts & kOptSwapSgl)) return {addr, key, length};
  return {bswap_64(addr), bswap_32(key), bswap_32(length)};
}

void send_credits(Rsocket* rs) {
  ++rs->ctrl_seqno;
  rs->rseq_comp = uint16_t(rs->rseq_no + (rs->rq_size >> 1));
  const uint32_t limit = message(Op::sgl, uint16_t(rs->rseq_no + rs->rq_size));
  const uint32_t half = rs->rbuf_size >> 1;
  if (rs->rbuf_bytes_avail < int(half)) {  // receives only: the ring has no free half yet
    post_msg(rs, limit);
    return;
  }
  Sge sge = wire_sge(rs, uintptr_t(&rs->rbuf[rs->rbuf_free_offset]), rs->rmr->rkey, half);
  ibv_sge ib{};
  int flags = 0;
  if (rs->sq_inline < sizeof sge) {  // from one of the control slots after the send ring
    auto* slot = rs->sbuf + rs->sbuf_size + sizeof(Sge) * (rs->ctrl_seqno & (kCtrlSlots - 1));
    std::memcpy(slot, &sge, sizeof sge);
    ib.addr = uintptr_t(slot);
    ib.lkey = rs->smr->lkey;
  } else {
    ib.addr = uintptr_t(&sge);
    flags = IBV_SEND_INLINE;
  }
  ib.length = sizeof sge;
  post_write(rs, &ib, 1, limit, flags, rs->remote_sgl.addr + uint64_t(rs->remote_sge) * sizeof(Sge),
             rs->remote_sgl.key, true);
  rs->rbuf_bytes_avail -= int(half);
  rs->rbuf_free_offset += int(half);
  if (rs->rbuf_free_offset >= int(rs->rbuf_size)) rs->rbuf_free_offset = 0;
  if (++rs->remote_sge == int(rs->remote_sgl.length)) rs->remote_sge = 0;
}

bool give_credits(const Rsocket* rs) {
  return (rs->rbuf_bytes_avail >= int(rs->rbuf_size >> 1) || int16_t(rs->rseq_no - rs->rseq_comp) >= 0) &&
         ctrl_avail(rs) && (rs->state & kConnected);
}

void update_credits(Rsocket* rs) {
  if (give_credits(rs)) send_credits(rs);
}

int post_recv(Rsocket* rs) {
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = kRecvFlag;
  return posted(ibv_post_recv(rs->cm_id->qp, &wr, &bad));
}

void take_receive(Rsocket* rs, uint32_t msg) {
  switch (op_of(msg)) {
    case Op::sgl:
      rs->sseq_comp = uint16_t(data_of(msg));
      break;
    case Op::iomap_sgl:  // the peer's iomap table changed: read when needed
    case Op::write:
      break;
    case Op::ctrl:
      if (Ctrl(data_of(msg)) == Ctrl::disconnect) {
        rs->state = kDisconnected;
      } else if (Ctrl(data_of(msg)) == Ctrl::shutdown) {
        if (rs->state & kWritable) {
          rs->state &= ~kReadable;
        } else {
          rs->state = kDisconnected;
        }
      }
      break;
    default: {
      // A broken or hostile peer ends the connection in error (EPROTO), where librdmacm trusts it:
      // - A peer can only have been granted half the ring at a time: reading a longer message would run
      //   past the ring.
      // - The credits granted never allow more unread messages than rq_size (the peer's limit is rq_size
      //   beyond the last message read), while receives are posted again as soon as they complete. One
      //   more would fill the last of rmsg's rq_size + 1 slots, which then reads as empty.
      const int next_tail = rs->rmsg_tail + 1 == rs->rq_size + 1 ? 0 : rs->rmsg_tail + 1;
      if (data_of(msg) > (rs->rbuf_size >> 1) || next_tail == rs->rmsg_head) {
        rs->state = kError;
        rs->err = EPROTO;
        break;
      }
      rs->rmsg[size_t(rs->rmsg_tail)] = {op_of(msg), data_of(msg)};
      rs->rmsg_tail = next_tail;
      break;
    }
  }
}

void take_send_completion(Rsocket* rs, const ibv_wc& wc) {
  const uint32_t msg = uint32_t(wc.wr_id);
  switch (op_of(msg)) {
    case Op::sgl:
      ++rs->ctrl_max_seqno;
      break;
    case Op::ctrl:
      ++rs->ctrl_max_seqno;
      if (Ctrl(data_of(msg)) == Ctrl::disconnect) rs->state = kDisconnected;
      break;
    case Op::iomap_sgl:
      ++rs->sqe_avail;
      rs->sbuf_bytes_avail += int(sizeof(IoMap));
      break;
    default:
      ++rs->sqe_avail;
      rs->sbuf_bytes_avail += int(data_of(msg));
      break;
  }
  if (wc.status != IBV_WC_SUCCESS && (rs->state & kConnected)) {
    rs->state = kError;
    rs->err = EIO;
  }
}

int poll_cq(Rsocket* rs) {
  ibv_wc wc[16];
  int n = 0, received = 0, rc = 0;
  while ((n = ibv_poll_cq(rs->cm_id->recv_cq, 16, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_id & kRecvFlag) {
        if (wc[i].status != IBV_WC_SUCCESS) continue;  // flushed
        ++received;
        if (wc[i].wc_flags & IBV_WC_WITH_IMM) take_receive(rs, ntohl(wc[i].imm_data));
        if (rs->state == kDisconnected) return 0;
      } else {
        take_send_completion(rs, wc[i]);
      }
    }
  }
  if (n < 0) rc = fail(EIO);
  if (rs->state & kConnected) {
    while (rc == 0 && received-- > 0) rc = post_recv(rs);
    if (rc != 0) {
      rs->state = kError;
      rs->err = errno;
    }
  }
  return rc;
}

void write_data_accounting(Rsocket* rs, uint32_t length, uint64_t& addr, uint32_t& rkey) {
  ++rs->sseq_no;
  --rs->sqe_avail;
  rs->sbuf_bytes_avail -= int(length);
  volatile Sge& target = rs->target_sgl[rs->target_sge];
  addr = target.addr;
  rkey = target.key;
  target.addr = target.addr + length;
  target.length = target.length - length;
  if (target.length == 0 && ++rs->target_sge == int(kTargetSglEntries)) rs->target_sge = 0;
}

// The target SGE is updated before the data is posted: the peer may grant the same entry again as soon
// as the write lands.
int write_data(Rsocket* rs, ibv_sge* sgl, int nsge, uint32_t length, int flags) {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  write_data_accounting(rs, length, addr, rkey);
  return post_write(rs, sgl, nsge, message(Op::data, length), flags, addr, rkey, true);
}

uint32_t sbuf_left(const Rsocket* rs) { return uint32_t(uintptr_t(rs->sbuf + rs->sbuf_size) - rs->ssgl[0].addr); }

// Puts `length` bytes (from `copy`, which fills a destination) into the send ring at its head, wrapping
// around into two SGEs when needed, and posts them with `post`.
template <class Copy, class Post>
int stage_and_post(Rsocket* rs, uint32_t length, Copy&& copy, Post&& post) {
  if (length <= sbuf_left(rs)) {
    copy(reinterpret_cast<uint8_t*>(rs->ssgl[0].addr), length);
    rs->ssgl[0].length = length;
    const int rc = post(rs->ssgl, 1);
    if (length < sbuf_left(rs)) {
      rs->ssgl[0].addr += length;
    } else {
      rs->ssgl[0].addr = uintptr_t(rs->sbuf);
    }
    return rc;
  }
  rs->ssgl[0].length = sbuf_left(rs);
  copy(reinterpret_cast<uint8_t*>(rs->ssgl[0].addr), rs->ssgl[0].length);
  rs->ssgl[1].length = length - rs->ssgl[0].length;
  copy(rs->sbuf, rs->ssgl[1].length);
  const int rc = post(rs->ssgl, 2);
  rs->ssgl[0].addr = uintptr_t(rs->sbuf) + rs->ssgl[1].length;
  return rc;
}

bool conn_can_send(Rsocket* rs) { return can_send(rs) || !(rs->state & kWritable); }

// Waits (unless non-blocking: EWOULDBLOCK) until a message may be sent. Once it never can: the
// connection's error if it ended in one (EIO, EPROTO), else ECONNRESET.
int wait_to_send(Rsocket* rs, int flags) {
  if (can_send(rs)) return 0;
  if (get_comp(rs, nonblocking(rs, flags), conn_can_send) != 0) return -1;
  return (rs->state & kWritable) ? 0 : fail(connection_error(rs, ECONNRESET));
}

// The size of the next piece of a large send: small first, doubling up to kMaxTransfer, so that the wire
// starts while the rest is still being copied; never more than the send ring has room for.
uint32_t next_piece(const Rsocket* rs, uint32_t& overlap, size_t left) {
  uint32_t xfer = uint32_t(left);
  if (overlap < left) {
    xfer = overlap;
    if (overlap < kMaxTransfer) overlap <<= 1;
  }
  return std::min<uint32_t>(xfer, uint32_t(rs->sbuf_bytes_avail));
}

int send_iomaps(Rsocket* rs, int flags) {
  std::lock_guard g(rs->map_lock);
  int rc = 0;
  while (!rs->iomap_queue.empty()) {
    if ((rc = wait_to_send(rs, flags)) != 0) break;
    IoMapMr* m = rs->iomap_queue.front();
    IoMap iom{};
    const Sge s = wire_sge(rs, uintptr_t(m->mr->addr), m->mr->rkey, uint32_t(m->mr->length));
    iom.offset = (rs->opts & kOptSwapSgl) ? bswap_64(m->offset) : m->offset;
    iom.sge = s;
    ++rs->sseq_no;
    --rs->sqe_avail;
    rs->sbuf_bytes_avail -= int(sizeof iom);
    const uint64_t addr = rs->remote_iomap.addr + uint64_t(m->index) * sizeof(IoMap);
    const uint32_t msg = message(Op::iomap_sgl, uint32_t(m->index));
    if (rs->sq_inline >= sizeof iom) {
      ibv_sge sge{uintptr_t(&iom), sizeof iom, 0};
      rc = post_write(rs, &sge, 1, msg, IBV_SEND_INLINE, addr, rs->remote_iomap.key, true);
    } else {
      rc = stage_and_post(
          rs, sizeof iom,
          [&, done = size_t(0)](uint8_t* dst, size_t n) mutable {
            std::memcpy(dst, reinterpret_cast<const uint8_t*>(&iom) + done, n);
            done += n;
          },
          [&](ibv_sge* sgl, int nsge) {
            return post_write(rs, sgl, nsge, msg, 0, addr, rs->remote_iomap.key, true);
          });
    }
    rs->iomap_queue.pop_front();
    rs->iomap_list.push_back(m);
    if (rc != 0) break;
  }
  rs->iomap_pending = !rs->iomap_queue.empty();
  return rc;
}

Rsocket* stream(int socket) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) errno = EBADF;
  return rs;
}

// A connect or accept still under way is advanced first; one that would block says EAGAIN.
int finish_opening(Rsocket* rs) {
  if (!(rs->state & kOpening)) return 0;
  const int rc = do_connect(rs);
  if (rc != 0 && errno == EINPROGRESS) errno = EAGAIN;
  return rc;
}

// Sends `len` bytes gathered by `copy(dst, n)` (which advances through the caller's buffers); librdmacm's
// rsend and rsendv. The first pieces are small and grow, so the wire starts while the rest is copied.
template <class Copy>
ssize_t send_stream(Rsocket* rs, size_t len, int flags, const uint8_t* direct, Copy&& copy) {
  if (finish_opening(rs) != 0) return -1;
  std::lock_guard g(rs->slock);
  int rc = 0;
  size_t left = len;
  uint32_t overlap = kOverlapStart;
  if (rs->iomap_pending) rc = send_iomaps(rs, flags);
  while (rc == 0 && left > 0) {
    if ((rc = wait_to_send(rs, flags)) != 0) break;
    uint32_t xfer = next_piece(rs, overlap, left);
    xfer = std::min<uint32_t>(xfer, uint32_t(rs->target_sgl[rs->target_sge].length));
    if (direct != nullptr && xfer <= rs->sq_inline) {  // straight from the caller's buffer
      ibv_sge sge{uintptr_t(direct + (len - left)), xfer, 0};
      rc = write_data(rs, &sge, 1, xfer, IBV_SEND_INLINE);
      copy(nullptr, xfer);  // (only advances)
    } else {
      const int inline_flag = xfer <= rs->sq_inline ? IBV_SEND_INLINE : 0;
      rc = stage_and_post(rs, xfer, copy, [&](ibv_sge* sgl, int nsge) {
        return write_data(rs, sgl, nsge, xfer, inline_flag);
      });
    }
    if (rc != 0) break;
    left -= xfer;
  }
  return (rc != 0 && left == len) ? rc : ssize_t(len - left);
}

size_t peek(Rsocket* rs, uint8_t* buf, size_t len) {
  size_t left = len;
  int head = rs->rmsg_head;
  int offset = rs->rbuf_offset;
  while (left > 0 && head != rs->rmsg_tail) {
    uint32_t size;
    if (left < rs->rmsg[size_t(head)].data) {
      size = uint32_t(left);
    } else {
      size = rs->rmsg[size_t(head)].data;
      if (++head == rs->rq_size + 1) head = 0;
    }
    const uint32_t end = rs->rbuf_size - uint32_t(offset);
    if (size > end) {
      std::memcpy(buf, &rs->rbuf[offset], end);
      offset = 0;
      buf += end;
      size -= end;
      left -= end;
    }
    std::memcpy(buf, &rs->rbuf[offset], size);
    offset += int(size);
    buf += size;
    left -= size;
  }
  return len - left;
}

}  // namespace

namespace uroce::rsocket {

bool ctrl_avail(const Rsocket* rs) { return rs->ctrl_seqno != rs->ctrl_max_seqno; }
bool have_rdata(const Rsocket* rs) { return rs->rmsg_head != rs->rmsg_tail; }
bool conn_have_rdata(const Rsocket* rs) { return have_rdata(rs) || !(rs->state & kReadable); }
bool conn_can_send_ctrl(Rsocket* rs) { return ctrl_avail(rs) || !(rs->state & kConnected); }
bool conn_all_sends_done(Rsocket* rs) {
  return int(rs->ctrl_max_seqno) - int(rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size || !(rs->state & kConnected);
}

// Room in the send ring and the send queue, a message the peer's limit allows, and a granted target.
bool can_send(const Rsocket* rs) {
  return rs->sqe_avail > 0 && rs->sbuf_bytes_avail >= int(kSendLowWater) && rs->sseq_no != rs->sseq_comp &&
         rs->target_sgl[rs->target_sge].length != 0;
}

int post_ctrl(Rsocket* rs, Ctrl ctrl) {
  ++rs->ctrl_seqno;
  return post_msg(rs, message(Op::ctrl, uint32_t(ctrl)));
}

// A zero-length RDMA WRITE: it needs no receive on the other side and proves the connection alive.
int post_keepalive(Rsocket* rs) {
  std::lock_guard g(rs->cq_lock);
  if (!ctrl_avail(rs) || !(rs->state & kConnected)) return 0;
  ++rs->ctrl_seqno;
  return post_write(rs, nullptr, 0, message(Op::ctrl, uint32_t(Ctrl::keepalive)), 0, 0, 0, false);
}

// The connection's end as rdma_cm reports it: DISCONNECTED comes with the peer's DREQ, which its CM sends
// when the peer calls rdma_disconnect or destroys the ID, and also when the peer's process dies without a
// word. librdmacm's rsockets do not look (a receiver whose peer died waits forever unless SO_KEEPALIVE is
// on); uroce's do, so a dead peer ends a blocked rrecv (0: end of stream) or rsend (ECONNRESET) at once.
// What arrived before the end is still delivered: the CQ is drained first.
void take_cm_events(Rsocket* rs) {
  if (rs->state < kConnected || rs->cm_id->channel == nullptr) return;
  pollfd p{rs->cm_id->channel->fd, POLLIN, 0};
  while (poll(&p, 1, 0) == 1 && (p.revents & POLLIN)) {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(rs->cm_id->channel, &e) != 0) return;
    const rdma_cm_event_type type = e->event;
    rdma_ack_cm_event(e);
    if (type != RDMA_CM_EVENT_DISCONNECTED && type != RDMA_CM_EVENT_DEVICE_REMOVAL) continue;
    poll_cq(rs);
    if (rs->state & kConnected) {
      rs->state = kDisconnected;
      // The peer's QP is gone: flush ours, so that sends waiting for ACKs complete now, not after retries.
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      ibv_modify_qp(rs->cm_id->qp, &attr, IBV_QP_STATE);
    }
  }
}

// Sleeps until the CQ's channel has an event (taken) or the ID's rdma_cm channel does (cm_ready).
int wait_cq_or_cm(Rsocket* rs, bool& cm_ready) {
  pollfd p[2] = {{rs->cm_id->recv_cq_channel->fd, POLLIN, 0}, {rs->cm_id->channel->fd, POLLIN, 0}};
  const nfds_t n = rs->state >= kConnected ? 2 : 1;
  if (poll(p, n, -1) < 0) return errno == EINTR ? 0 : -1;
  cm_ready = n == 2 && (p[1].revents & POLLIN);
  if (p[0].revents & POLLIN) return get_cq_event(rs);
  return 0;
}

int get_cq_event(Rsocket* rs) {
  if (!rs->cq_armed) return 0;
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  const int rc = ibv_get_cq_event(rs->cm_id->recv_cq_channel, &cq, &context);
  if (rc == 0) {
    if (++rs->unack_cqe >= unsigned(rs->sq_size) + rs->rq_size) {
      ibv_ack_cq_events(rs->cm_id->recv_cq, rs->unack_cqe);
      rs->unack_cqe = 0;
    }
    rs->cq_armed = false;
  } else if (!(errno == EAGAIN || errno == EINTR)) {
    rs->state = kError;
  }
  return rc;
}

// Polls the CQ until test() holds; blocks on the completion channel unless nonblock (EWOULDBLOCK).
int process_cq(Rsocket* rs, bool nonblock, bool (*test)(Rsocket*)) {
  std::unique_lock cq(rs->cq_lock);
  int rc = 0;
  do {
    update_credits(rs);
    rc = poll_cq(rs);
    if (rc == 0 && Clock::now() >= rs->next_cm_check) {  // (rarely: a system call)
      rs->next_cm_check = Clock::now() + kCmCheckInterval;
      take_cm_events(rs);
    }
    if (test(rs)) {
      rc = 0;
      break;
    }
    if (rc != 0) break;
    if (nonblock) {
      rc = fail(EWOULDBLOCK);
    } else if (!rs->cq_armed) {
      ibv_req_notify_cq(rs->cm_id->recv_cq, 0);
      rs->cq_armed = true;  // and poll once more: a completion may have come before the arming
    } else {
      update_credits(rs);
      std::unique_lock wait(rs->cq_wait_lock);
      cq.unlock();
      bool cm_ready = false;
      rc = wait_cq_or_cm(rs, cm_ready);
      wait.unlock();
      cq.lock();
      if (cm_ready) take_cm_events(rs);
    }
  } while (rc == 0);
  update_credits(rs);
  return rc;
}

// Spins for the configured polling time before sleeping on the channel.
int get_comp(Rsocket* rs, bool nonblock, bool (*test)(Rsocket*)) {
  SpinBudget spin;
  do {
    const int rc = process_cq(rs, true, test);
    if (rc == 0 || nonblock || errno != EWOULDBLOCK) return rc;
  } while (spin.left());
  return process_cq(rs, false, test);
}

bool SpinBudget::left() {
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    end_ = now + std::chrono::microseconds(defaults().polling_time_us);
  }
  return now <= end_;
}

}  // namespace uroce::rsocket

CMA_EXPORT ssize_t rsend(int socket, const void* buf, size_t len, int flags) {
  Rsocket* rs = stream(socket);
  if (rs == nullptr) return -1;
  if (rs->dgram != nullptr) {
    const iovec one{const_cast<void*>(buf), len};
    return datagram_send(rs, &one, 1, flags, nullptr, 0);
  }
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  return send_stream(rs, len, flags, p, [&](uint8_t* dst, size_t n) {
    if (dst != nullptr) std::memcpy(dst, p + done, n);
    done += n;
  });
}

CMA_EXPORT ssize_t rwrite(int socket, const void* buf, size_t count) { return rsend(socket, buf, count, 0); }

namespace {

ssize_t sendv(int socket, const iovec* iov, int iovcnt, int flags, const sockaddr* dest = nullptr,
              socklen_t destlen = 0) {
  Rsocket* rs = stream(socket);
  if (rs == nullptr) return -1;
  if (iovcnt < 0 || (iovcnt > 0 && iov == nullptr)) return fail<ssize_t>(EINVAL);
  if (rs->dgram != nullptr) return datagram_send(rs, iov, iovcnt, flags, dest, destlen);
  size_t len = 0;
  for (int i = 0; i < iovcnt; ++i) len += iov[i].iov_len;
  const iovec* cur = iov;
  size_t offset = 0;
  return send_stream(rs, len, flags, nullptr, [&](uint8_t* dst, size_t n) {
    while (n > 0) {
      const size_t take = std::min(n, cur->iov_len - offset);
      std::memcpy(dst, static_cast<const uint8_t*>(cur->iov_base) + offset, take);
      dst += take;
      n -= take;
      offset += take;
      if (offset == cur->iov_len) {
        ++cur;
        offset = 0;
      }
    }
  });
}

}  // namespace

CMA_EXPORT ssize_t rwritev(int socket, const iovec* iov, int iovcnt) { return sendv(socket, iov, iovcnt, 0); }

CMA_EXPORT ssize_t rsendmsg(int socket, const msghdr* msg, int flags) {
  if (msg == nullptr) return fail<ssize_t>(EINVAL);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail<ssize_t>(ENOTSUP);
  return sendv(socket, msg->msg_iov, int(msg->msg_iovlen), flags, static_cast<const sockaddr*>(msg->msg_name),
               msg->msg_namelen);
}

CMA_EXPORT ssize_t rsendto(int socket, const void* buf, size_t len, int flags, const sockaddr* dest,
                           socklen_t addrlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail<ssize_t>(EBADF);
  if (rs->dgram != nullptr) {
    const iovec one{const_cast<void*>(buf), len};
    return datagram_send(rs, &one, 1, flags, dest, addrlen);
  }
  if (dest != nullptr || addrlen != 0) return fail<ssize_t>(EISCONN);
  return rsend(socket, buf, len, flags);
}

// Data already received is delivered even after the peer has gone.
CMA_EXPORT ssize_t rrecv(int socket, void* buf, size_t len, int flags) {
  Rsocket* rs = stream(socket);
  if (rs == nullptr) return -1;
  if (rs->dgram != nullptr) return datagram_recv(rs, buf, len, flags, nullptr, nullptr);
  if (finish_opening(rs) != 0) return -1;
  std::lock_guard g(rs->rlock);
  auto* out = static_cast<uint8_t*>(buf);
  size_t left = len;
  int rc = 0;
  do {
    if (!have_rdata(rs)) {
      rc = get_comp(rs, nonblocking(rs, flags), [](Rsocket* r) { return conn_have_rdata(r); });
      if (rc != 0) break;
      // Nothing left to read: end of stream after an orderly disconnect (0, as recv(2) after FIN), but an
      // error if the connection failed, as recv(2) after a reset; a caller taking 0 for "try again" would
      // otherwise spin.
      if (!have_rdata(rs) && (rs->state & kError)) {
        rc = fail(connection_error(rs, ECONNRESET));
        break;
      }
    }
    if (flags & MSG_PEEK) {
      left = len - peek(rs, out, left);
      break;
    }
    while (left > 0 && have_rdata(rs)) {
      ReceivedMessage& m = rs->rmsg[size_t(rs->rmsg_head)];
      uint32_t size;
      if (left < m.data) {
        size = uint32_t(left);
        m.data -= size;
      } else {
        ++rs->rseq_no;
        size = m.data;
        if (++rs->rmsg_head == rs->rq_size + 1) rs->rmsg_head = 0;
      }
      const uint32_t end = rs->rbuf_size - uint32_t(rs->rbuf_offset);
      if (size > end) {
        std::memcpy(out, &rs->rbuf[rs->rbuf_offset], end);
        rs->rbuf_offset = 0;
        out += end;
        size -= end;
        left -= end;
        rs->rbuf_bytes_avail += int(end);
      }
      std::memcpy(out, &rs->rbuf[rs->rbuf_offset], size);
      rs->rbuf_offset += int(size);
      out += size;
      left -= size;
      rs->rbuf_bytes_avail += int(size);
    }
  } while (left > 0 && (flags & MSG_WAITALL) && (rs->state & kReadable));
  return (rc != 0 && left == len) ? rc : ssize_t(len - left);
}

CMA_EXPORT ssize_t rread(int socket, void* buf, size_t count) { return rrecv(socket, buf, count, 0); }

CMA_EXPORT ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src, socklen_t* addrlen) {
  if (Rsocket* rs = lookup(socket); rs != nullptr && rs->dgram != nullptr) {
    return datagram_recv(rs, buf, len, flags, src, addrlen);
  }
  const ssize_t n = rrecv(socket, buf, len, flags);
  if (n > 0 && src != nullptr) rgetpeername(socket, src, addrlen);
  return n;
}

// Into the first buffer only, as librdmacm.
CMA_EXPORT ssize_t rreadv(int socket, const iovec* iov, int iovcnt) {
  if (iovcnt <= 0 || iov == nullptr) return fail<ssize_t>(EINVAL);
  return rrecv(socket, iov[0].iov_base, iov[0].iov_len, 0);
}

CMA_EXPORT ssize_t rrecvmsg(int socket, msghdr* msg, int flags) {
  if (msg == nullptr || msg->msg_iovlen == 0 || msg->msg_iov == nullptr) return fail<ssize_t>(EINVAL);
  if (msg->msg_control != nullptr && msg->msg_controllen != 0) return fail<ssize_t>(ENOTSUP);
  if (Rsocket* rs = lookup(socket); rs != nullptr && rs->dgram != nullptr) {
    return datagram_recv(rs, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags,
                         static_cast<sockaddr*>(msg->msg_name), msg->msg_name != nullptr ? &msg->msg_namelen : nullptr);
  }
  return rrecv(socket, msg->msg_iov[0].iov_base, msg->msg_iov[0].iov_len, flags);
}

// Straight into a buffer the peer mapped with riomap at `offset`: plain RDMA WRITEs, nothing received.
CMA_EXPORT size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) {
  Rsocket* rs = stream(socket);
  if (rs == nullptr) return size_t(-1);
  if (rs->dgram != nullptr) return fail<size_t>(EOPNOTSUPP);
  std::lock_guard g(rs->slock);
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t left = count;
  uint32_t overlap = kOverlapStart;
  int rc = 0;
  const IoMap* iom = nullptr;
  if (rs->iomap_pending) rc = send_iomaps(rs, flags);
  while (rc == 0 && left > 0) {
    if (iom == nullptr || uint64_t(offset) > iom->offset + iom->sge.length) {
      iom = nullptr;
      for (int i = 0; i < rs->target_iomap_size; ++i) {
        const IoMap& m = rs->target_iomap[i];
        if (uint64_t(offset) >= m.offset && uint64_t(offset) < m.offset + m.sge.length) {
          iom = &m;
          break;
        }
      }
      if (iom == nullptr) break;
    }
    if ((rc = wait_to_send(rs, flags)) != 0) break;
    uint32_t xfer = next_piece(rs, overlap, left);
    xfer = uint32_t(std::min<uint64_t>(xfer, iom->offset + iom->sge.length - uint64_t(offset)));
    const uint64_t addr = iom->sge.addr + uint64_t(offset) - iom->offset;
    const uint32_t key = iom->sge.key;
    const uint32_t msg = message(Op::write, xfer);
    --rs->sqe_avail;
    rs->sbuf_bytes_avail -= int(xfer);
    if (xfer <= rs->sq_inline) {
      ibv_sge sge{uintptr_t(p), xfer, 0};
      rc = post_write(rs, &sge, 1, msg, IBV_SEND_INLINE, addr, key, false);
    } else {
      size_t done = 0;
      rc = stage_and_post(
          rs, xfer,
          [&](uint8_t* dst, size_t n) {
            std::memcpy(dst, p + done, n);
            done += n;
          },
          [&](ibv_sge* sgl, int nsge) { return post_write(rs, sgl, nsge, msg, 0, addr, key, false); });
    }
    if (rc != 0) break;
    left -= xfer;
    p += xfer;
    offset += off_t(xfer);
  }
  return (rc != 0 && left == count) ? size_t(rc) : count - left;
}
