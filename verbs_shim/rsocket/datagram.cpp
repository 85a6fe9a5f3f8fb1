// Datagram rsockets (SOCK_DGRAM): each socket is one UD QP with a ring of receives, bound to an address and
// port as an rdma_cm ID of port space UDP. Every datagram starts with the sender's address (protocol.hpp,
// librdmacm's ds_header), so the receiver can report it (rrecvfrom) and answer: the first datagram from a
// peer also gives its QPN (the completion's source QP) and an address handle back (ibv_create_ah_from_wc).
//
// Finding a peer's QPN before anything came from it differs from librdmacm. librdmacm sends the first
// datagram to an unknown peer over a kernel UDP socket bound to the same address and port, and a service
// thread at the peer forwards it and learns the sender's QPN. uroce's network is not the kernel's (the
// daemon owns the port), so that datagram would never arrive. Here the sender asks instead with the
// InfiniBand way for datagram services, Service ID Resolution: rdma_connect on a UD ID sends a SIDR_REQ for
// the peer's port, and the peer's bound ID answers with its QPN and Q_Key (SIDR_REP). A thread of this
// process answers those requests for every bound datagram rsocket, as librdmacm's UDP service thread
// answers its first datagrams, so a peer is found even while its program is busy elsewhere. The datagrams
// themselves are librdmacm's, so the two differ only in how the first one finds its way.
//
// A blocking socket's first datagram to a peer waits for that round trip. A nonblocking one's does not, as
// a UDP sendto never waits for ARP: the datagram waits in its send slot while the service thread finds the
// peer (asynchronous rdma_cm, Finding below), and goes, with any sent to that peer meanwhile, in order,
// once it is found; the call returns at once.
//
// Semantics are UDP's: a datagram to a peer that cannot be found (nothing bound at that port, no route) is
// lost, not an error, and the socket's SO_ERROR says why; a datagram longer than the path MTU allows is
// EMSGSIZE; a receive buffer shorter than the datagram takes its start (MSG_TRUNC returns the whole length).
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>


#include "emulator/client/logger.hpp"
#include "verbs_shim/rdmacm/cma.hpp"
#include "verbs_shim/rsocket/rsocket.hpp"

namespace uroce::rsocket {

namespace {

constexpr size_t kGrh = 40;                      // every UD receive starts with the GRH area
constexpr uint64_t kSendSlot = uint64_t(1) << 32;  // wr_id: sends have this bit, receives not
constexpr int kResolveTimeoutMs = 2000;

// A peer: its address and port, the key of the table of peers we know how to reach.
using PeerKey = std::array<uint8_t, 18>;

PeerKey key_of(const sockaddr* a) {
  PeerKey k{};
  if (a->sa_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(a);
    std::memcpy(k.data(), &s->sin6_addr, 16);
    std::memcpy(k.data() + 16, &s->sin6_port, 2);
  } else {
    const auto* s = reinterpret_cast<const sockaddr_in*>(a);
    k[10] = k[11] = 0xff;  // IPv4-mapped, so that the two families never collide
    std::memcpy(k.data() + 12, &s->sin_addr, 4);
    std::memcpy(k.data() + 16, &s->sin_port, 2);
  }
  return k;
}

socklen_t size_of(const sockaddr* a) {
  return a->sa_family == AF_INET6 ? socklen_t(sizeof(sockaddr_in6)) : socklen_t(sizeof(sockaddr_in));
}

struct Peer {
  ibv_ah* ah = nullptr;
  uint32_t qpn = 0;
  uint32_t qkey = 0;
};

// A datagram in its send slot, waiting for its peer to be found.
struct Queued {
  uint32_t slot;
  uint32_t length;  // header and payload
};

struct Arrival {
  uint32_t slot;
  uint32_t length;   // payload bytes
  sockaddr_storage from;
};

}  // namespace

struct Datagram {
  Rsocket* owner = nullptr;  // its SO_ERROR, when a peer the service thread looked for is not found
  int domain = AF_INET;
  rdma_event_channel* channel = nullptr;  // the descriptor; the bound ID's SIDR requests (service thread)
  rdma_cm_id* id = nullptr;               // bound: the socket's address and port
  ibv_pd* pd = nullptr;
  ibv_comp_channel* cq_channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buffers = nullptr;  // rq_size receive slots, then sq_size send slots
  uint32_t rq_size = 0, sq_size = 0, mtu = 0, recv_slot = 0, send_slot = 0;
  size_t header_size = kDatagramHeaderV4;
  DatagramHeader header;  // ours, at the front of every datagram we send

  std::mutex lock;       // everything below, and the CQ's processing
  std::mutex wait_lock;  // arming and reading the CQ's channel
  std::vector<uint32_t> free_sends;
  std::deque<Arrival> arrivals;
  std::map<PeerKey, Peer> peers;
  std::map<PeerKey, std::vector<Queued>> finding;  // peers the service thread looks for, what waits for each
  bool connected = false;
  sockaddr_storage peer{};
  bool cq_armed = false;
  unsigned unacked_events = 0;
  uint64_t dropped = 0;  // datagrams without a header we know (not from an rsocket)

  bool open() const { return qp != nullptr; }
  uint8_t* receive_buffer(uint32_t slot) const { return buffers + size_t(slot) * recv_slot; }
  uint8_t* send_buffer(uint32_t slot) const {
    return buffers + size_t(rq_size) * recv_slot + size_t(slot) * send_slot;
  }
  uint32_t max_payload() const { return mtu - uint32_t(header_size); }
};

namespace {

// ---- the thread that answers SIDR requests for every bound datagram rsocket of the process -------------
// ---- and finds peers for nonblocking senders ----------------------------------------------------------

// A peer being found: an rdma_cm ID of its own (nonblocking) channel through address and route resolution
// to the SIDR exchange, then the outcome. For a nonblocking sender the service thread steps it and keeps it
// until the socket's lock can be taken to send what waits (found()); a blocking sender steps it itself
// (resolve()).
struct Finding {
  Datagram* d = nullptr;  // null once the socket is closed: the outcome is then only cleaned up
  PeerKey key{};
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  bool done = false;
  int error = 0;  // done: 0 (found) or SO_ERROR's value
  ibv_ah_attr ah{};
  uint32_t qpn = 0, qkey = 0;

  ~Finding() {
    const int err = errno;  // (it may end a call that failed: what failed stays in errno)
    if (id != nullptr) rdma_destroy_id(id);
    if (channel != nullptr) rdma_destroy_event_channel(channel);
    errno = err;
  }

  // The first step: resolving `dest`'s address from `src`. -1 (errno set) if it cannot even start.
  int start(const sockaddr* src, const sockaddr* dest) {
    if ((channel = rdma_create_event_channel()) == nullptr) return -1;
    fcntl(channel->fd, F_SETFL, fcntl(channel->fd, F_GETFL) | O_NONBLOCK);
    if (rdma_create_id(channel, &id, nullptr, RDMA_PS_UDP) != 0) return -1;
    return rdma_resolve_addr(id, const_cast<sockaddr*>(src), const_cast<sockaddr*>(dest), kResolveTimeoutMs);
  }

  // Steps until the outcome, on the caller's thread; returns `error`.
  int wait() {
    while (!done) {
      pollfd p{channel->fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) {
        end(errno);
        break;
      }
      step();
    }
    return error;
  }

  // Takes the events on its channel: each step starts the next; the last gives the outcome.
  void step() {
    rdma_cm_event* e = nullptr;
    while (!done && rdma_get_cm_event(channel, &e) == 0) {
      switch (e->event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
          if (rdma_resolve_route(id, kResolveTimeoutMs) != 0) end(errno != 0 ? errno : EIO);
          break;
        case RDMA_CM_EVENT_ROUTE_RESOLVED:
          if (rdma_connect(id, nullptr) != 0) end(errno != 0 ? errno : EIO);
          break;
        case RDMA_CM_EVENT_ESTABLISHED:
          ah = e->param.ud.ah_attr;
          qpn = e->param.ud.qp_num;
          qkey = e->param.ud.qkey;
          end(0);
          break;
        default:  // an error, a rejection, unreachable: as UDP reports a closed port, or the error itself
          end(e->status < 0 ? -e->status : ECONNREFUSED);
      }
      rdma_ack_cm_event(e);
    }
  }

  void end(int err) {
    done = true;
    error = err;
  }
};

// The outcome of a finding for the socket, under its lock: the datagrams that waited go, or are lost.
void found(Datagram& d, const Finding& f);

struct Responder {
  // Held while a request is answered or a finding steps: a socket leaves the lists only between them.
  // Lock order: a socket's lock, then this one (datagram_send, datagram_close); this thread takes a socket's
  // lock under it only with try_lock, and tries again later when that fails.
  std::mutex lock;
  std::vector<Datagram*> sockets;
  std::vector<std::unique_ptr<Finding>> findings;
  int wake = -1;    // an eventfd: the lists changed
  bool started = false;

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      bool outcomes_waiting = false;
      {
        std::lock_guard g(lock);
        fds.assign(1, pollfd{wake, POLLIN, 0});
        for (Datagram* d : sockets) fds.push_back({d->channel->fd, POLLIN, 0});
        for (const auto& f : findings) {
          if (!f->done) fds.push_back({f->channel->fd, POLLIN, 0});
          outcomes_waiting |= f->done;
        }
      }
      // An outcome whose socket was busy is tried again after a millisecond.
      if (poll(fds.data(), fds.size(), outcomes_waiting ? 1 : -1) < 0) continue;
      if (fds[0].revents != 0) {
        uint64_t n;
        (void)!read(wake, &n, sizeof n);
      }
      std::lock_guard g(lock);
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const auto it = std::find_if(sockets.begin(), sockets.end(),
                                     [&](Datagram* d) { return d->channel->fd == fds[i].fd; });
        if (it != sockets.end()) answer(**it);
        for (const auto& f : findings) {
          if (f->channel->fd == fds[i].fd) f->step();
        }
      }
      deliver_outcomes();
    }
  }

  // Under `lock`.
  void deliver_outcomes() {
    for (auto it = findings.begin(); it != findings.end();) {
      Finding& f = **it;
      if (!f.done) {
        ++it;
        continue;
      }
      if (f.d != nullptr) {
        std::unique_lock dl(f.d->lock, std::try_to_lock);
        if (!dl.owns_lock()) {  // its owner may be waiting for `lock`: never wait for it here
          ++it;
          continue;
        }
        found(*f.d, f);
      }
      it = findings.erase(it);
    }
  }

  // Starts finding the peer at `dest` for the socket (under its lock). The steps run on this thread.
  int find(Datagram* d, const PeerKey& key, const sockaddr* src, const sockaddr* dest) {
    auto f = std::make_unique<Finding>();
    f->d = d;
    f->key = key;
    if (f->start(src, dest) != 0) return -1;  // (f goes, errno kept)
    std::lock_guard g(lock);
    findings.push_back(std::move(f));
    notify();
    return 0;
  }

  // Every request waiting on the socket's channel gets our QPN (the Q_Key is rdma_cm's RDMA_UDP_QKEY).
  static void answer(Datagram& d) {
    rdma_cm_event* e = nullptr;
    while (rdma_get_cm_event(d.channel, &e) == 0) {
      rdma_cm_id* request = e->event == RDMA_CM_EVENT_CONNECT_REQUEST ? e->id : nullptr;
      if (request != nullptr) {
        rdma_conn_param p{};
        p.qp_num = d.qp->qp_num;
        if (rdma_accept(request, &p) != 0) rdma_reject(request, nullptr, 0);
      }
      rdma_ack_cm_event(e);
      if (request != nullptr) rdma_destroy_id(request);
    }
  }

  void notify() {
    const uint64_t one = 1;
    (void)!write(wake, &one, sizeof one);
  }

  int add(Datagram* d) {
    std::lock_guard g(lock);
    if (!started) {
      wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (wake < 0) return -1;
      try {
        std::thread([this] { run(); }).detach();
      } catch (const std::system_error&) {
        close(wake);
        wake = -1;
        return fail(EAGAIN);
      }
      started = true;
    }
    sockets.push_back(d);
    notify();
    return 0;
  }

  void remove(Datagram* d) {
    std::lock_guard g(lock);
    sockets.erase(std::remove(sockets.begin(), sockets.end(), d), sockets.end());
    for (const auto& f : findings) {
      if (f->d == d) f->d = nullptr;  // it runs to its end (each step is bounded) and is dropped then
    }
    if (started) notify();
  }
};

Responder& responder() {
  static Responder* r = new Responder;  // never destroyed: its thread outlives static destruction
  return *r;
}

// ---- opening: the bound ID, the UD QP and its buffers ------------------------------------------------

void release(Datagram& d) {
  if (d.qp != nullptr) {
    responder().remove(&d);
    ibv_destroy_qp(d.qp);
    d.qp = nullptr;
  }
  for (auto& [key, peer] : d.peers) {
    if (peer.ah != nullptr) ibv_destroy_ah(peer.ah);
  }
  d.peers.clear();
  if (d.mr != nullptr) ibv_dereg_mr(d.mr);
  d.mr = nullptr;
  std::free(d.buffers);
  d.buffers = nullptr;
  if (d.cq != nullptr) {
    ibv_ack_cq_events(d.cq, d.unacked_events);
    ibv_destroy_cq(d.cq);
  }
  d.cq = nullptr;
  if (d.cq_channel != nullptr) ibv_destroy_comp_channel(d.cq_channel);
  d.cq_channel = nullptr;
  if (d.pd != nullptr) ibv_dealloc_pd(d.pd);
  d.pd = nullptr;
  if (d.id != nullptr) rdma_destroy_id(d.id);
  d.id = nullptr;
}

int post_receive(Datagram& d, uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(d.receive_buffer(slot)), d.recv_slot, d.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(d.qp, &wr, &bad) == 0 ? 0 : -1;
}

uint32_t mtu_bytes(ibv_context* verbs) {
  ibv_port_attr pa{};
  if (ibv_query_port(verbs, 1, &pa) != 0) return 1024;
  return 128u << std::clamp(int(pa.active_mtu), 1, 5);
}

// `a` with port 0: the address alone, to bind or resolve from.
sockaddr_storage without_port(const sockaddr* a) {
  sockaddr_storage out{};
  std::memcpy(&out, a, size_of(a));
  if (out.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&out)->sin6_port = 0;
  } else {
    reinterpret_cast<sockaddr_in*>(&out)->sin_port = 0;
  }
  return out;
}

// A UD QP in RTS with rdma_cm's Q_Key, as librdmacm's ucma_init_ud_qp leaves one (made here, not by
// rdma_create_qp, because an ID bound to a wildcard address has no device to make it on).
ibv_qp* create_ud_qp(Datagram& d) {
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = d.cq;
  qa.cap.max_send_wr = d.sq_size;
  qa.cap.max_recv_wr = d.rq_size;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_UD;
  qa.sq_sig_all = 1;
  ibv_qp* qp = ibv_create_qp(d.pd, &qa);
  if (qp == nullptr) return nullptr;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = RDMA_UDP_QKEY;
  bool ok = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  ok = ok && ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  ok = ok && ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0;
  if (!ok) {
    const int err = errno;
    ibv_destroy_qp(qp);
    errno = err;
    return nullptr;
  }
  return qp;
}

// The address a socket bound to a wildcard says it sends from: the port's first address of its family
// (an IPv4 address is a GID of the form ::ffff:a.b.c.d).
bool first_port_address(ibv_context* verbs, int family, DatagramHeader& h) {
  for (int i = 0; i < 16; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(verbs, 1, i, &gid) != 0) return false;
    static constexpr uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const bool v4 = std::memcmp(gid.raw, v4_mapped, 12) == 0;
    const bool empty = std::all_of(std::begin(gid.raw), std::end(gid.raw), [](uint8_t b) { return b == 0; });
    if (empty || v4 != (family == AF_INET)) continue;
    std::memcpy(h.address.data(), v4 ? gid.raw + 12 : gid.raw, v4 ? 4 : 16);
    return true;
  }
  return false;
}

// Binds the socket to `addr` (port 0: one the daemon picks) and makes its QP, buffers and receives.
int open_at(Rsocket* rs, Datagram& d, const sockaddr* addr) {
  auto undo = [&d] {
    const int err = errno;
    release(d);
    errno = err;
    return -1;
  };
  if (rdma_create_id(d.channel, &d.id, rs, RDMA_PS_UDP) != 0) return -1;
  if (rdma_bind_addr(d.id, const_cast<sockaddr*>(addr)) != 0) return undo();
  // Bound to a wildcard address, the ID has no device: the socket takes uroce's.
  ibv_context* verbs = d.id->verbs != nullptr ? d.id->verbs : rdmacm::device_context();
  if (verbs == nullptr) return undo();
  d.mtu = mtu_bytes(verbs);
  d.header_size = d.domain == AF_INET6 ? kDatagramHeaderV6 : kDatagramHeaderV4;
  d.rq_size = std::clamp<uint32_t>(rs->rq_size, kQpMinSize, kQpMaxSize);
  d.sq_size = std::clamp<uint32_t>(rs->sq_size, kQpMinSize, kQpMaxSize);
  d.recv_slot = uint32_t(kGrh) + d.mtu;
  d.send_slot = d.mtu;
  if ((d.pd = ibv_alloc_pd(verbs)) == nullptr) return undo();
  if ((d.cq_channel = ibv_create_comp_channel(verbs)) == nullptr) return undo();
  if ((d.cq = ibv_create_cq(verbs, int(d.rq_size + d.sq_size), nullptr, d.cq_channel, 0)) == nullptr) return undo();
  const size_t bytes = size_t(d.rq_size) * d.recv_slot + size_t(d.sq_size) * d.send_slot;
  d.buffers = static_cast<uint8_t*>(std::calloc(1, bytes));
  if (d.buffers == nullptr) {
    errno = ENOMEM;
    return undo();
  }
  if ((d.mr = ibv_reg_mr(d.pd, d.buffers, bytes, IBV_ACCESS_LOCAL_WRITE)) == nullptr) return undo();
  if ((d.qp = create_ud_qp(d)) == nullptr) return undo();
  for (uint32_t i = 0; i < d.rq_size; ++i) {
    if (post_receive(d, i) != 0) return undo();
  }
  d.free_sends.clear();
  for (uint32_t i = d.sq_size; i-- > 0;) d.free_sends.push_back(i);

  // What every datagram says about us: the address and port we are bound to.
  const sockaddr* local = rdma_get_local_addr(d.id);
  d.header = {};
  if (local->sa_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(local);
    d.header.version = 6;
    d.header.port = ntohs(s->sin6_port);
    d.header.flowinfo = ntohl(s->sin6_flowinfo);
    std::memcpy(d.header.address.data(), &s->sin6_addr, 16);
  } else {
    const auto* s = reinterpret_cast<const sockaddr_in*>(local);
    d.header.version = 4;
    d.header.port = ntohs(s->sin_port);
    std::memcpy(d.header.address.data(), &s->sin_addr, 4);
  }
  d.header_size = d.header.size();
  if (d.id->verbs == nullptr && !first_port_address(verbs, local->sa_family, d.header)) {
    errno = EADDRNOTAVAIL;
    return undo();
  }

  // Requests for our port from now on; the responder answers them.
  if (rdma_listen(d.id, 0) != 0) return undo();
  fcntl(d.channel->fd, F_SETFL, fcntl(d.channel->fd, F_GETFL) | O_NONBLOCK);
  if (responder().add(&d) != 0) return undo();
  return 0;
}

// A socket that sends before it is bound takes the address the route to `dest` leaves from, with a port
// of the daemon's choosing, as a UDP socket does.
int open_towards(Rsocket* rs, Datagram& d, const sockaddr* dest) {
  rdma_cm_id* probe = nullptr;
  if (rdma_create_id(nullptr, &probe, nullptr, RDMA_PS_UDP) != 0) return -1;
  const int rc = rdma_resolve_addr(probe, nullptr, const_cast<sockaddr*>(dest), kResolveTimeoutMs);
  sockaddr_storage local{};
  if (rc == 0) local = without_port(rdma_get_local_addr(probe));
  const int err = errno;
  rdma_destroy_id(probe);
  errno = err;
  return rc != 0 ? -1 : open_at(rs, d, reinterpret_cast<sockaddr*>(&local));
}

// ---- finding peers ---------------------------------------------------------------------------------

// The peer a finding found, with an address handle to it; -1 (errno set) if there is none.
int peer_found(Datagram& d, const Finding& f, Peer& out) {
  ibv_ah_attr attr = f.ah;
  out = {ibv_create_ah(d.pd, &attr), f.qpn, f.qkey};
  return out.ah != nullptr ? 0 : -1;
}

// Asks the peer's daemon for the QPN bound at `dest` (SIDR) and makes an address handle to it. Blocks for
// one round trip through the two daemons, or until the request gives up.
int resolve(Datagram& d, const sockaddr* dest, Peer& out) {
  Finding f;
  const sockaddr_storage src = without_port(rdma_get_local_addr(d.id));
  if (f.start(reinterpret_cast<const sockaddr*>(&src), dest) != 0) return -1;
  if (f.wait() != 0) {
    errno = f.error;
    return -1;
  }
  return peer_found(d, f, out);
}

// Sends the datagram in send slot `slot` (`length` bytes, header included) to the peer. Under d.lock.
int post_datagram(Datagram& d, const Peer& peer, uint32_t slot, uint32_t length) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(d.send_buffer(slot)), length, d.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = kSendSlot | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = peer.ah;
  wr.wr.ud.remote_qpn = peer.qpn;
  wr.wr.ud.remote_qkey = peer.qkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(d.qp, &wr, &bad) != 0) {
    d.free_sends.push_back(slot);
    return -1;
  }
  return 0;
}

void found(Datagram& d, const Finding& f) {
  const auto waiting = d.finding.find(f.key);
  if (waiting == d.finding.end()) return;
  const std::vector<Queued> queued = std::move(waiting->second);
  d.finding.erase(waiting);
  int error = f.error;
  auto peer = d.peers.find(f.key);
  if (error == 0 && peer == d.peers.end()) {
    Peer p;
    if (peer_found(d, f, p) != 0) {
      error = errno;
    } else {
      peer = d.peers.emplace(f.key, p).first;
    }
  }
  for (const Queued& q : queued) {
    if (error != 0) {
      d.free_sends.push_back(q.slot);
    } else {
      post_datagram(d, peer->second, q.slot, q.length);  // (a failed post gives its slot back)
    }
  }
  if (error != 0) d.owner->err = error;  // lost, as UDP datagrams to a closed port; SO_ERROR says why
}

sockaddr_storage address_of(const DatagramHeader& h) {
  sockaddr_storage a{};
  if (h.version == 6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a);
    s->sin6_family = AF_INET6;
    s->sin6_port = htons(h.port);
    s->sin6_flowinfo = htonl(h.flowinfo);
    std::memcpy(&s->sin6_addr, h.address.data(), 16);
  } else {
    auto* s = reinterpret_cast<sockaddr_in*>(&a);
    s->sin_family = AF_INET;
    s->sin_port = htons(h.port);
    std::memcpy(&s->sin_addr, h.address.data(), 4);
  }
  return a;
}

// ---- the CQ -----------------------------------------------------------------------------------------

// A receive that completed: a datagram to deliver, or one to drop (too short, not a header we know).
void take_receive(Datagram& d, ibv_wc& wc) {
  const uint32_t slot = uint32_t(wc.wr_id);
  uint8_t* buf = d.receive_buffer(slot);
  if (wc.status == IBV_WC_SUCCESS && wc.byte_len >= kGrh + kDatagramHeaderV4) {
    const auto h = decode_datagram_header(buf + kGrh, wc.byte_len - kGrh);
    if (h && wc.byte_len >= kGrh + h->size()) {
      Arrival a{slot, uint32_t(wc.byte_len - kGrh - h->size()), address_of(*h)};
      const PeerKey key = key_of(reinterpret_cast<sockaddr*>(&a.from));
      if (d.connected && key != key_of(reinterpret_cast<const sockaddr*>(&d.peer))) {
        post_receive(d, slot);  // as a connected UDP socket: only the peer's datagrams are taken
        return;
      }
      // The sender can be answered from now on: its QPN, and an address handle back to it (a new one
      // when its QPN changed: another process bound there since).
      const auto known = d.peers.find(key);
      if (known == d.peers.end() || known->second.qpn != wc.src_qp) {
        if (ibv_ah* ah = ibv_create_ah_from_wc(d.pd, &wc, reinterpret_cast<ibv_grh*>(buf), 1)) {
          if (known != d.peers.end()) ibv_destroy_ah(known->second.ah);
          d.peers[key] = {ah, wc.src_qp, RDMA_UDP_QKEY};
        }
      }
      d.arrivals.push_back(a);
      return;
    }
  }
  if (wc.status == IBV_WC_WR_FLUSH_ERR) return;  // the QP is going away
  // Dropped: the slot takes the next one. Counted, and said once in a thousand (a peer that sends such
  // datagrams on purpose must not fill the program's output).
  if (d.dropped++ % 1000 == 0) {
    emulator::client::logger().warn("rsocket: dropped a datagram of {} bytes from QPN {:#x} without an rsocket "
                                    "header ({} so far)", wc.byte_len, wc.src_qp, d.dropped);
  }
  post_receive(d, slot);
}

void process_cq(Datagram& d) {
  ibv_wc wc[16];
  for (int n; (n = ibv_poll_cq(d.cq, 16, wc)) > 0;) {
    for (int i = 0; i < n; ++i) {
      if (wc[i].wr_id & kSendSlot) {
        d.free_sends.push_back(uint32_t(wc[i].wr_id));
      } else {
        take_receive(d, wc[i]);
      }
    }
  }
}

// Asks for an event on the CQ's channel at its next completion, unless that is asked already. Under
// d.wait_lock.
int arm_cq(Datagram& d) {
  if (d.cq_armed) return 0;
  if (ibv_req_notify_cq(d.cq, 0) != 0) return -1;
  d.cq_armed = true;
  return 0;
}

// Reads the armed CQ's event from its channel (blocking until there is one), acknowledged 16 at a time.
// Under d.wait_lock.
int take_cq_event(Datagram& d) {
  ibv_cq* cq = nullptr;
  void* context = nullptr;
  if (ibv_get_cq_event(d.cq_channel, &cq, &context) != 0) return -1;
  d.cq_armed = false;
  if (++d.unacked_events >= 16) {
    ibv_ack_cq_events(d.cq, d.unacked_events);
    d.unacked_events = 0;
  }
  return 0;
}

// Until the CQ's channel says there is something: the first call arms the CQ (the caller looks again
// before it sleeps), the next one sleeps. Called without d.lock.
int wait_cq(Datagram& d) {
  std::lock_guard w(d.wait_lock);
  if (!d.cq_armed) return arm_cq(d);
  return take_cq_event(d);
}

// Runs `ready` under the lock after taking the CQ's completions, waiting (or EAGAIN) until it is true.
template <class Ready>
int wait_for(Rsocket* rs, Datagram& d, int flags, std::unique_lock<std::mutex>& g, Ready&& ready) {
  SpinBudget spin;
  for (;;) {
    process_cq(d);
    if (ready()) return 0;
    if (nonblocking(rs, flags)) return fail(EAGAIN);
    g.unlock();
    const int rc = spin.left() ? 0 : wait_cq(d);
    g.lock();
    if (rc != 0) return -1;
  }
}

}  // namespace

// ---- the calls --------------------------------------------------------------------------------------

int datagram_create(Rsocket* rs, int domain) {
  auto* d = new (std::nothrow) Datagram;
  if (d == nullptr) return fail(ENOMEM);
  d->owner = rs;
  d->domain = domain;
  d->channel = rdma_create_event_channel();
  if (d->channel == nullptr) {
    delete d;
    return -1;
  }
  rs->dgram = d;
  return insert(rs, d->channel->fd);
}

int datagram_bind(Rsocket* rs, const sockaddr* addr, socklen_t len) {
  Datagram& d = *rs->dgram;
  if (addr == nullptr || len < socklen_t(sizeof(sockaddr_in))) return fail(EINVAL);
  std::lock_guard g(d.lock);
  if (d.open()) return fail(EINVAL);  // bound already, as bind(2) says
  return open_at(rs, d, addr);
}

int datagram_connect(Rsocket* rs, const sockaddr* addr, socklen_t len) {
  Datagram& d = *rs->dgram;
  if (addr != nullptr && len >= socklen_t(sizeof(sa_family_t)) && addr->sa_family == AF_UNSPEC) {
    // As connect(AF_UNSPEC) on a UDP socket: the peer is forgotten (datagrams from anyone are taken again,
    // and rsend needs an address), the local address and port are kept.
    std::lock_guard g(d.lock);
    d.connected = false;
    d.peer = {};
    return 0;
  }
  if (addr == nullptr || len < size_of(addr) || len > socklen_t(sizeof(sockaddr_storage))) return fail(EINVAL);
  std::lock_guard g(d.lock);
  if (!d.open() && open_towards(rs, d, addr) != 0) return -1;
  std::memcpy(&d.peer, addr, size_of(addr));
  d.connected = true;
  return 0;
}

namespace {

// Our header and the payload into send slot `slot`; returns the datagram's length.
uint32_t fill_send_slot(Datagram& d, uint32_t slot, const iovec* iov, int iovcnt) {
  uint8_t* out = d.send_buffer(slot);
  encode(d.header, out);
  size_t at = d.header_size;
  for (int i = 0; i < iovcnt; ++i) {
    std::memcpy(out + at, iov[i].iov_base, iov[i].iov_len);
    at += iov[i].iov_len;
  }
  return uint32_t(at);
}

}  // namespace

ssize_t datagram_send(Rsocket* rs, const iovec* iov, int iovcnt, int flags, const sockaddr* dest, socklen_t len) {
  Datagram& d = *rs->dgram;
  std::unique_lock g(d.lock);
  if (dest == nullptr) {
    if (!d.connected) return fail<ssize_t>(EDESTADDRREQ);
    dest = reinterpret_cast<const sockaddr*>(&d.peer);
  } else if (len < size_of(dest) || (dest->sa_family != AF_INET && dest->sa_family != AF_INET6)) {
    return fail<ssize_t>(EINVAL);
  }
  size_t bytes = 0;
  for (int i = 0; i < iovcnt; ++i) bytes += iov[i].iov_len;
  if (!d.open() && open_towards(rs, d, dest) != 0) return -1;
  if (bytes > d.max_payload()) return fail<ssize_t>(EMSGSIZE);

  const PeerKey key = key_of(dest);
  auto it = d.peers.find(key);
  if (it == d.peers.end() && (d.finding.count(key) != 0 || nonblocking(rs, flags))) {
    // Nonblocking, or behind datagrams that wait already: it waits in its slot until the peer is found.
    if (wait_for(rs, d, flags, g, [&d] { return !d.free_sends.empty(); }) != 0) return -1;
    const uint32_t slot = d.free_sends.back();
    d.free_sends.pop_back();
    const Queued q{slot, fill_send_slot(d, slot, iov, iovcnt)};
    // (Waiting for a slot may have let go of the lock: the service thread may have found the peer since.)
    const auto finding = d.finding.find(key);
    if (finding != d.finding.end()) {
      finding->second.push_back(q);
      return ssize_t(bytes);
    }
    if (const auto known = d.peers.find(key); known != d.peers.end()) {
      return post_datagram(d, known->second, slot, q.length) != 0 ? -1 : ssize_t(bytes);
    }
    d.finding[key] = {q};
    const sockaddr_storage src = without_port(rdma_get_local_addr(d.id));
    if (responder().find(&d, key, reinterpret_cast<const sockaddr*>(&src), dest) != 0) {
      rs->err = errno;  // lost, as below
      d.finding.erase(key);
      d.free_sends.push_back(slot);
    }
    return ssize_t(bytes);
  }
  if (it == d.peers.end()) {
    Peer p;
    if (resolve(d, dest, p) != 0) {
      rs->err = errno == EIO ? ECONNREFUSED : errno;  // lost, as a UDP datagram to a closed port; SO_ERROR says why
      return ssize_t(bytes);
    }
    it = d.peers.emplace(key, p).first;
  }
  if (wait_for(rs, d, flags, g, [&d] { return !d.free_sends.empty(); }) != 0) return -1;
  const uint32_t slot = d.free_sends.back();
  d.free_sends.pop_back();
  if (post_datagram(d, it->second, slot, fill_send_slot(d, slot, iov, iovcnt)) != 0) return -1;
  return ssize_t(bytes);
}

ssize_t datagram_recv(Rsocket* rs, void* buf, size_t len, int flags, sockaddr* src, socklen_t* addrlen) {
  Datagram& d = *rs->dgram;
  std::unique_lock g(d.lock);
  if (!d.open()) return fail<ssize_t>(nonblocking(rs, flags) ? EAGAIN : ENOTCONN);  // nothing can arrive
  if (wait_for(rs, d, flags, g, [&d] { return !d.arrivals.empty(); }) != 0) return -1;
  const Arrival a = d.arrivals.front();
  const size_t n = std::min<size_t>(len, a.length);
  std::memcpy(buf, d.receive_buffer(a.slot) + kGrh + d.header_size, n);
  if (src != nullptr && addrlen != nullptr) {
    const sockaddr* from = reinterpret_cast<const sockaddr*>(&a.from);
    std::memcpy(src, from, std::min(*addrlen, size_of(from)));
    *addrlen = size_of(from);
  }
  if (!(flags & MSG_PEEK)) {
    d.arrivals.pop_front();
    post_receive(d, a.slot);
  }
  return ssize_t((flags & MSG_TRUNC) ? a.length : n);
}

short datagram_poll(Rsocket* rs, short events) {
  Datagram& d = *rs->dgram;
  std::lock_guard g(d.lock);
  if (!d.open()) return short(events & POLLOUT);  // nothing to receive yet; sending opens it
  process_cq(d);
  short revents = 0;
  if ((events & POLLIN) && !d.arrivals.empty()) revents |= POLLIN;
  if ((events & POLLOUT) && !d.free_sends.empty()) revents |= POLLOUT;
  return revents;
}

int datagram_arm(Rsocket* rs, short events, int& fd) {
  Datagram& d = *rs->dgram;
  if (!d.open()) {
    fd = d.channel->fd;  // never readable for the caller: the responder empties it
    return events & POLLOUT;
  }
  {
    std::lock_guard w(d.wait_lock);
    if (arm_cq(d) != 0) return -1;
  }
  fd = d.cq_channel->fd;
  return datagram_poll(rs, events);  // what arrived before the CQ was armed raises no event: look once
}

void datagram_woken(Rsocket* rs) {
  Datagram& d = *rs->dgram;
  if (!d.open()) return;
  std::lock_guard w(d.wait_lock);
  if (d.cq_armed) take_cq_event(d);
}

int datagram_name(Rsocket* rs, sockaddr* addr, socklen_t* addrlen, bool peer) {
  Datagram& d = *rs->dgram;
  std::lock_guard g(d.lock);
  sockaddr_storage a{};
  if (peer) {
    if (!d.connected) return fail(ENOTCONN);
    a = d.peer;
  } else if (d.open()) {
    const sockaddr* local = rdma_get_local_addr(d.id);
    std::memcpy(&a, local, size_of(local));
  } else {
    a.ss_family = sa_family_t(d.domain);
  }
  const sockaddr* s = reinterpret_cast<const sockaddr*>(&a);
  std::memcpy(addr, s, std::min(*addrlen, size_of(s)));
  *addrlen = size_of(s);
  return 0;
}

int datagram_take_error(Rsocket* rs) {
  std::lock_guard g(rs->dgram->lock);
  const int err = rs->err;
  rs->err = 0;
  return err;
}

void datagram_close(Rsocket* rs) {
  Datagram* d = rs->dgram;
  {
    std::lock_guard g(d->lock);
    release(*d);
  }
  rdma_destroy_event_channel(d->channel);
  delete d;
  rs->dgram = nullptr;
}

}  // namespace uroce::rsocket
