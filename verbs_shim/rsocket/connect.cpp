// Making rsocket connections: rsocket, rbind, rlisten, raccept, rconnect (and its non-blocking steps),
// rshutdown, rclose. The connection is an rdma_cm connection on a synchronous ID of port space TCP; each
// side's ConnData rides in its private data (REQ, REP).
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "verbs_shim/rdmacm/cma.hpp"
#include "verbs_shim/rsocket/rsocket.hpp"

using namespace uroce::rsocket;

namespace {

Rsocket* alloc(const Rsocket* inherit) {
  auto* rs = new (std::nothrow) Rsocket{};
  if (rs == nullptr) return nullptr;
  if (inherit != nullptr) {  // an accepted socket takes its listener's sizes
    rs->sbuf_size = inherit->sbuf_size;
    rs->rbuf_size = inherit->rbuf_size;
    rs->sq_inline = inherit->sq_inline;
    rs->sq_size = inherit->sq_size;
    rs->rq_size = inherit->rq_size;
    rs->ctrl_max_seqno = inherit->ctrl_max_seqno;
    rs->target_iomap_size = inherit->target_iomap_size;
  } else {
    const Defaults& d = defaults();
    rs->sbuf_size = d.wmem;
    rs->rbuf_size = d.mem;
    rs->sq_inline = d.inline_size;
    rs->sq_size = d.sq_size;
    rs->rq_size = d.rq_size;
    rs->ctrl_max_seqno = kCtrlSlots;
    rs->target_iomap_size = d.iomap_size;
  }
  return rs;
}

uint16_t max_qp_size(rdma_cm_id* id) {
  ibv_context* verbs = id->verbs;
  ibv_device_attr attr{};
  try {
    if (verbs == nullptr) verbs = uroce::rdmacm::device_context();
  } catch (...) {
    return kQpMaxSize;
  }
  if (ibv_query_device(verbs, &attr) != 0) return kQpMaxSize;
  return uint16_t(std::min<int>(attr.max_qp_wr, kQpMaxSize));
}

void set_qp_size(Rsocket* rs) {
  const uint16_t max = max_qp_size(rs->cm_id);
  rs->sq_size = std::clamp<uint16_t>(rs->sq_size, kQpMinSize, max);
  rs->rq_size = std::clamp<uint16_t>(rs->rq_size, kQpMinSize, max);
}

void* zalloc(size_t n) { return std::calloc(n ? n : 1, 1); }

int init_bufs(Rsocket* rs) {
  rs->rmsg.assign(size_t(rs->rq_size) + 1, ReceivedMessage{Op::data, 0});
  // Control messages (credit grants) go inline; with too small an inline size they need slots of their own.
  size_t total_sbuf = rs->sbuf_size;
  if (rs->sq_inline < sizeof(Sge)) total_sbuf += sizeof(Sge) * kCtrlSlots;
  if ((rs->sbuf = static_cast<uint8_t*>(zalloc(total_sbuf))) == nullptr) return fail(ENOMEM);
  if ((rs->smr = rdma_reg_msgs(rs->cm_id, rs->sbuf, total_sbuf)) == nullptr) return -1;

  const size_t list_len = sizeof(Sge) * kTargetSglEntries + sizeof(IoMap) * rs->target_iomap_size;
  if ((rs->target_buffer_list = static_cast<uint8_t*>(zalloc(list_len))) == nullptr) return fail(ENOMEM);
  if ((rs->target_mr = rdma_reg_write(rs->cm_id, rs->target_buffer_list, list_len)) == nullptr) return -1;
  rs->target_sgl = reinterpret_cast<volatile Sge*>(rs->target_buffer_list);
  if (rs->target_iomap_size != 0)
    rs->target_iomap = reinterpret_cast<IoMap*>(rs->target_buffer_list + sizeof(Sge) * kTargetSglEntries);

  if ((rs->rbuf = static_cast<uint8_t*>(zalloc(rs->rbuf_size))) == nullptr) return fail(ENOMEM);
  if ((rs->rmr = rdma_reg_write(rs->cm_id, rs->rbuf, rs->rbuf_size)) == nullptr) return -1;

  rs->ssgl[0].addr = rs->ssgl[1].addr = uintptr_t(rs->sbuf);
  rs->ssgl[0].lkey = rs->ssgl[1].lkey = rs->smr->lkey;
  rs->sbuf_bytes_avail = int(rs->sbuf_size);
  // The first half of the ring is granted in the ConnData; the second waits for the first grant.
  rs->rbuf_free_offset = int(rs->rbuf_size >> 1);
  rs->rbuf_bytes_avail = int(rs->rbuf_size >> 1);
  rs->sqe_avail = int(rs->sq_size) - int(rs->ctrl_max_seqno);
  rs->rseq_comp = uint16_t(rs->rq_size >> 1);
  return 0;
}

// One CQ for both directions, armed at once (librdmacm's rs_create_cq).
int create_cq(Rsocket* rs) {
  rdma_cm_id* id = rs->cm_id;
  if ((id->recv_cq_channel = ibv_create_comp_channel(id->verbs)) == nullptr) return -1;
  id->recv_cq = ibv_create_cq(id->verbs, rs->sq_size + rs->rq_size, id, id->recv_cq_channel, 0);
  if (id->recv_cq == nullptr) {
    ibv_destroy_comp_channel(id->recv_cq_channel);
    id->recv_cq_channel = nullptr;
    return -1;
  }
  if ((rs->fd_flags & O_NONBLOCK) && fcntl(id->recv_cq_channel->fd, F_SETFL, O_NONBLOCK) != 0) return -1;
  ibv_req_notify_cq(id->recv_cq, 0);
  id->send_cq_channel = id->recv_cq_channel;
  id->send_cq = id->recv_cq;
  return 0;
}

int post_recv(Rsocket* rs) {
  // Data arrives by RDMA WRITE WITH IMMEDIATE: a receive only takes the immediate, no buffer.
  ibv_recv_wr wr{}, *bad = nullptr;
  wr.wr_id = uint64_t(1) << 63;
  const int rc = ibv_post_recv(rs->cm_id->qp, &wr, &bad);
  return rc != 0 ? fail(rc) : 0;
}

int create_ep(Rsocket* rs) {
  set_qp_size(rs);
  if (create_cq(rs) != 0) return -1;
  ibv_qp_init_attr attr{};
  attr.qp_context = rs;
  attr.send_cq = rs->cm_id->send_cq;
  attr.recv_cq = rs->cm_id->recv_cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 1;
  attr.cap.max_send_wr = rs->sq_size;
  attr.cap.max_recv_wr = rs->rq_size;
  attr.cap.max_send_sge = 2;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = rs->sq_inline;
  if (rdma_create_qp(rs->cm_id, nullptr, &attr) != 0) return -1;
  rs->sq_inline = uint16_t(attr.cap.max_inline_data);
  if (init_bufs(rs) != 0) return -1;
  for (int i = 0; i < rs->rq_size; ++i) {
    if (post_recv(rs) != 0) return -1;
  }
  return 0;
}

void free_iomappings(Rsocket* rs) {
  for (auto* list : {&rs->iomap_list, &rs->iomap_queue}) {
    for (IoMapMr* m : *list) {
      ibv_dereg_mr(m->mr);
      m->mr = nullptr;
      if (m->index < 0) delete m;
    }
    list->clear();
  }
}

void free_rsocket(Rsocket* rs) {
  if (rs->smr != nullptr) rdma_dereg_mr(rs->smr);
  if (rs->rmr != nullptr) rdma_dereg_mr(rs->rmr);
  if (rs->target_mr != nullptr) rdma_dereg_mr(rs->target_mr);
  std::free(rs->sbuf);
  std::free(rs->rbuf);
  std::free(rs->target_buffer_list);
  if (rdma_cm_id* id = rs->cm_id) {
    free_iomappings(rs);
    if (id->qp != nullptr) rdma_destroy_qp(id);
    // The CQ and its channel are ours (librdmacm's rdma_destroy_qp would take them with the QP).
    if (id->recv_cq != nullptr) {
      ibv_ack_cq_events(id->recv_cq, rs->unack_cqe);
      ibv_destroy_cq(id->recv_cq);
    }
    if (id->recv_cq_channel != nullptr) ibv_destroy_comp_channel(id->recv_cq_channel);
    id->recv_cq = id->send_cq = nullptr;
    id->recv_cq_channel = id->send_cq_channel = nullptr;
    rdma_destroy_id(id);
  }
  remove(rs);
  delete rs;
}

ConnData conn_data_of(const Rsocket* rs) {
  ConnData c;
  c.flags = kConnFlagIoMap | (__BYTE_ORDER == __BIG_ENDIAN ? kConnFlagNetworkOrder : 0);
  c.credits = rs->rq_size;
  c.target_iomap_size = uint8_t(to_scale(rs->target_iomap_size, 8));
  c.target_sgl = {uintptr_t(rs->target_sgl), rs->target_mr->rkey, uint32_t(kTargetSglEntries)};
  c.data_buf = {uintptr_t(rs->rbuf), rs->rmr->rkey, rs->rbuf_size >> 1};
  return c;
}

void save_conn_data(Rsocket* rs, const ConnData& c) {
  rs->remote_sgl = c.target_sgl;
  rs->remote_sge = 1;  // entry 0 describes the half the peer already has
  const bool peer_network_order = (c.flags & kConnFlagNetworkOrder) != 0;
  if (peer_network_order != (__BYTE_ORDER == __BIG_ENDIAN)) rs->opts = kOptSwapSgl;
  if (c.flags & kConnFlagIoMap) {
    rs->remote_iomap.addr = rs->remote_sgl.addr + sizeof(Sge) * rs->remote_sgl.length;
    rs->remote_iomap.length = from_scale(c.target_iomap_size, 8);
    rs->remote_iomap.key = rs->remote_sgl.key;
  }
  rs->target_sgl[0].addr = c.data_buf.addr;
  rs->target_sgl[0].key = c.data_buf.key;
  rs->target_sgl[0].length = c.data_buf.length;
  rs->sseq_comp = c.credits;
}

// The peer's ConnData in the ID's current event (REQ or REP).
std::optional<ConnData> peer_conn_data(rdma_cm_id* id) {
  if (id->event == nullptr) return std::nullopt;
  const rdma_conn_param& p = id->event->param.conn;
  auto c = decode(p.private_data, p.private_data_len);
  if (!c || c->version != kVersion) return std::nullopt;
  return c;
}

bool would_block() { return errno == EAGAIN || errno == EWOULDBLOCK; }

// librdmacm's rs_do_connect, one small function per step: resolve the address, the route, make the QP and
// buffers, connect. A step that would block leaves the state saying where to resume (EINPROGRESS).
enum class Step { resolve_addr, complete_addr, resolve_route, complete_route, connect, complete_connect,
                  take_peer_data, complete_accept, done };

struct Next {
  Step step;
  int rc = 0;
};

Next finish(int rc) { return {Step::done, rc}; }
Next complete_resolved(Rsocket* rs, bool route);

// rdma_resolve_addr / rdma_resolve_route, with librdmacm's timeouts: 1 s, doubling on each retry.
Next start_resolve(Rsocket* rs, bool route) {
  rdma_cm_id* id = rs->cm_id;
  const int timeout = 1000 << rs->retries++;
  const int rc = route ? rdma_resolve_route(id, timeout) : rdma_resolve_addr(id, nullptr, &id->route.addr.dst_addr, timeout);
  if (rc == 0) return complete_resolved(rs, route);
  if (would_block()) rs->state = route ? kResolvingRoute : kResolvingAddr;
  return finish(rc);
}

Next complete_resolved(Rsocket* rs, bool route) {
  if (!route) rs->retries = 0;
  return {route ? Step::connect : Step::resolve_route};
}

Next complete_resolve(Rsocket* rs, bool route) {
  const int rc = uroce::rdmacm::complete(uroce::rdmacm::to_impl(rs->cm_id));
  if (rc == 0) return complete_resolved(rs, route);
  if (errno == ETIMEDOUT && rs->retries <= kConnectRetries) return {route ? Step::resolve_route : Step::resolve_addr};
  return finish(rc);
}

Next start_connect(Rsocket* rs) {
  if (create_ep(rs) != 0) return finish(-1);
  const auto conn = encode(conn_data_of(rs));
  rdma_conn_param param{};
  param.private_data = conn.data();
  param.private_data_len = uint8_t(conn.size());
  param.flow_control = 1;
  param.retry_count = 7;
  param.rnr_retry_count = 7;  // flow control is the receiver's posted receives: wait for them forever
  rs->retries = 0;
  const int rc = rdma_connect(rs->cm_id, &param);
  if (rc == 0) return {Step::take_peer_data};
  if (would_block()) rs->state = kConnecting;
  return finish(rc);
}

Next complete_connect(Rsocket* rs) {
  const int rc = uroce::rdmacm::complete(uroce::rdmacm::to_impl(rs->cm_id));
  return rc == 0 ? Next{Step::take_peer_data} : finish(rc);
}

Next take_peer_data(Rsocket* rs) {
  const auto peer = peer_conn_data(rs->cm_id);
  if (!peer) return finish(fail(ENOTSUP));
  save_conn_data(rs, *peer);
  rs->state = kConnectRdwr;
  return finish(0);
}

Next complete_accept(Rsocket* rs) {
  if (!(rs->fd_flags & O_NONBLOCK)) fcntl(rs->cm_id->channel->fd, F_SETFL, 0);
  const int rc = uroce::rdmacm::complete(uroce::rdmacm::to_impl(rs->cm_id));
  if (rc == 0) rs->state = kConnectRdwr;
  return finish(rc);
}

Step first_step(uint32_t state) {
  switch (state) {
    case kInit:
    case kBound: return Step::resolve_addr;
    case kResolvingAddr: return Step::complete_addr;
    case kResolvingRoute: return Step::complete_route;
    case kConnecting: return Step::complete_connect;
    case kAccepting: return Step::complete_accept;
    default: return Step::done;
  }
}

Next run(Rsocket* rs, Step step) {
  switch (step) {
    case Step::resolve_addr: return start_resolve(rs, false);
    case Step::complete_addr: return complete_resolve(rs, false);
    case Step::resolve_route: return start_resolve(rs, true);
    case Step::complete_route: return complete_resolve(rs, true);
    case Step::connect: return start_connect(rs);
    case Step::complete_connect: return complete_connect(rs);
    case Step::take_peer_data: return take_peer_data(rs);
    case Step::complete_accept: return complete_accept(rs);
    case Step::done: break;
  }
  return finish(fail(EINVAL));  // not a state a connection can go on from
}

}  // namespace

namespace uroce::rsocket {

int set_nonblocking(Rsocket* rs, int flags) {
  int rc = 0;
  if (rs->cm_id->recv_cq_channel != nullptr) rc = fcntl(rs->cm_id->recv_cq_channel->fd, F_SETFL, flags);
  if (rc == 0 && rs->state < kConnected) rc = fcntl(rs->cm_id->channel->fd, F_SETFL, flags);
  return rc;
}

int do_connect(Rsocket* rs) {
  Next next{first_step(rs->state)};
  do {
    next = run(rs, next.step);
  } while (next.step != Step::done);
  if (next.rc != 0) {
    if (would_block()) {
      errno = EINPROGRESS;
    } else {
      rs->state = kConnectError;
      rs->err = errno;
    }
  }
  return next.rc;
}

}  // namespace uroce::rsocket

CMA_EXPORT int rsocket(int domain, int type, int protocol) {
  if ((domain != AF_INET && domain != AF_INET6 && domain != AF_IB) ||
      (type != SOCK_STREAM && type != SOCK_DGRAM) ||
      (type == SOCK_STREAM && protocol != 0 && protocol != IPPROTO_TCP) ||
      (type == SOCK_DGRAM && protocol != 0 && protocol != IPPROTO_UDP)) {
    return fail(ENOTSUP);
  }
  if (domain == AF_IB) return fail(ENOTSUP);
  Rsocket* rs = alloc(nullptr);
  if (rs == nullptr) return fail(ENOMEM);
  if (type == SOCK_DGRAM) {
    const int fd = datagram_create(rs, domain);
    if (fd < 0) {
      const int err = errno;
      if (rs->dgram != nullptr) datagram_close(rs);
      delete rs;
      return fail(err);
    }
    return fd;
  }
  if (rdma_create_id(nullptr, &rs->cm_id, rs, RDMA_PS_TCP) != 0) {
    const int err = errno;
    delete rs;
    return fail(err);
  }
  rs->cm_id->route.addr.src_addr.sa_family = sa_family_t(domain);
  if (insert(rs, rs->cm_id->channel->fd) < 0) {
    const int err = errno;
    free_rsocket(rs);
    return fail(err);
  }
  return rs->index;
}

CMA_EXPORT int rbind(int socket, const sockaddr* addr, socklen_t addrlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) return datagram_bind(rs, addr, addrlen);
  const int rc = rdma_bind_addr(rs->cm_id, const_cast<sockaddr*>(addr));
  if (rc == 0) rs->state = kBound;
  return rc;
}

CMA_EXPORT int rlisten(int socket, int backlog) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) return fail(EOPNOTSUPP);  // as listen(2) on a UDP socket
  if (rs->state == kListening) return 0;
  const int rc = rdma_listen(rs->cm_id, backlog);
  if (rc == 0) rs->state = kListening;
  return rc;
}

// The new socket's connection is finished without blocking when the listener does not block (so that one
// thread can connect to itself), as in librdmacm; its data transfers block unless rfcntl says otherwise.
CMA_EXPORT int raccept(int socket, sockaddr* addr, socklen_t* addrlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) return fail(EOPNOTSUPP);
  if (rs->state != kListening) return fail(EINVAL);
  Rsocket* nrs = alloc(rs);
  if (nrs == nullptr) return fail(ENOMEM);
  auto give_up = [&] {
    const int err = errno;
    if (nrs->cm_id != nullptr && nrs->cm_id->event != nullptr && nrs->state == kInit)
      rdma_reject(nrs->cm_id, nullptr, 0);
    free_rsocket(nrs);
    errno = err;
    return -1;
  };
  if (rdma_get_request(rs->cm_id, &nrs->cm_id) != 0) return give_up();
  nrs->cm_id->context = nrs;
  if (insert(nrs, nrs->cm_id->channel->fd) < 0) return give_up();
  const auto peer = peer_conn_data(nrs->cm_id);
  if (!peer) {
    errno = ENOTSUP;
    return give_up();
  }
  if (rs->fd_flags & O_NONBLOCK) fcntl(nrs->cm_id->channel->fd, F_SETFL, O_NONBLOCK);
  if (create_ep(nrs) != 0) return give_up();
  save_conn_data(nrs, *peer);
  rdma_conn_param param = nrs->cm_id->event->param.conn;
  const auto mine = encode(conn_data_of(nrs));
  param.private_data = mine.data();
  param.private_data_len = uint8_t(mine.size());
  if (rdma_accept(nrs->cm_id, &param) == 0) {
    nrs->state = kConnectRdwr;
  } else if (would_block()) {
    nrs->state = kAccepting;
  } else {
    nrs->state = kConnectError;  // (no reject: the accept itself failed)
    return give_up();
  }
  if (addr != nullptr && addrlen != nullptr) rgetpeername(nrs->index, addr, addrlen);
  return nrs->index;
}

CMA_EXPORT int rconnect(int socket, const sockaddr* addr, socklen_t addrlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) return datagram_connect(rs, addr, addrlen);
  if (addr == nullptr || addrlen > sizeof(sockaddr_in6)) return fail(EINVAL);
  if (rs->state == kInit || rs->state == kBound) std::memcpy(&rs->cm_id->route.addr.dst_addr, addr, addrlen);
  return do_connect(rs);
}

// A graceful end: tell the peer (a control message), then wait until every send has completed, unless
// the peer has gone already.
CMA_EXPORT int rshutdown(int socket, int how) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) return 0;  // nothing in flight to finish: datagrams are sent when posted
  if (rs->opts & kOptSvcActive) keepalive_remove(rs);
  if (rs->fd_flags & O_NONBLOCK) set_nonblocking(rs, 0);
  int rc = 0;
  if (rs->state & kConnected) {
    Ctrl ctrl;
    bool send = true;
    if (how == SHUT_RDWR) {
      ctrl = Ctrl::disconnect;
      rs->state &= ~(kReadable | kWritable);
    } else if (how == SHUT_WR) {
      rs->state &= ~kWritable;
      ctrl = (rs->state & kReadable) ? Ctrl::shutdown : Ctrl::disconnect;
    } else {
      rs->state &= ~kReadable;
      ctrl = Ctrl::disconnect;
      send = !(rs->state & kWritable);
    }
    if (send) {
      if (!ctrl_avail(rs)) rc = process_cq(rs, false, [](Rsocket* r) { return conn_can_send_ctrl(r); });
      if (rc == 0 && (rs->state & kConnected) && ctrl_avail(rs)) rc = post_ctrl(rs, ctrl);
      if (rc == 0 && (rs->state & kConnected))
        process_cq(rs, false, [](Rsocket* r) { return conn_all_sends_done(r); });
    }
  }
  if ((rs->fd_flags & O_NONBLOCK) && (rs->state & kConnected)) set_nonblocking(rs, rs->fd_flags);
  if (rs->state & kDisconnected) {
    // Flush the receives (QP to error) so that a thread in rpoll wakes up.
    ibv_req_notify_cq(rs->cm_id->recv_cq, 0);
    if (rs->cm_id->qp != nullptr) {
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      ibv_modify_qp(rs->cm_id->qp, &attr, IBV_QP_STATE);
    }
  }
  return rc;
}

CMA_EXPORT int rclose(int socket) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) {
    remove(rs);
    datagram_close(rs);
    delete rs;
    return 0;
  }
  if (rs->state & kConnected) {
    rshutdown(socket, SHUT_RDWR);
  } else if (rs->opts & kOptSvcActive) {
    keepalive_remove(rs);
  }
  free_rsocket(rs);
  return 0;
}
