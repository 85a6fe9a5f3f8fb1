// A stream rsocket (SOCK_STREAM over one RC QP), the state librdmacm keeps for one, and the calls the
// files of this folder share. The descriptor an application holds is the fd of the rsocket's own
// rdma_cm event channel, as in librdmacm: a real descriptor, so it never collides with other files and
// rpoll can tell rsockets from other descriptors by looking them up (table.cpp).
//
// Files: connect.cpp (socket, bind, listen, accept, connect, shutdown, close), transfer.cpp (the credit
// protocol: send, receive, iowrite), poll.cpp (rpoll, rselect), options.cpp (socket options, fcntl,
// names, riomap), keepalive.cpp (SO_KEEPALIVE's service thread), datagram.cpp (SOCK_DGRAM rsockets).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <list>
#include <mutex>
#include <vector>

#include "verbs_shim/rsocket/protocol.hpp"

namespace uroce::rsocket {

// States are bit sets ordered passive < opening < connected < disconnected, as librdmacm's, because
// code compares them ("state >= connected").
enum State : uint32_t {
  kInit = 0,
  kBound = 0x0001,
  kListening = 0x0002,
  kOpening = 0x0004,
  kResolvingAddr = kOpening | 0x0010,
  kResolvingRoute = kOpening | 0x0020,
  kConnecting = kOpening | 0x0040,
  kAccepting = kOpening | 0x0080,
  kConnected = 0x0100,
  kWritable = 0x0200,
  kReadable = 0x0400,
  kConnectRdwr = kConnected | kReadable | kWritable,
  kConnectError = 0x0800,
  kDisconnected = 0x1000,
  kError = 0x2000,
};

inline constexpr int kOptSwapSgl = 1 << 0;    // the peer's byte order differs: swap what we write to it
inline constexpr int kOptSvcActive = 1 << 2;  // on the keepalive thread's list

inline constexpr uint32_t kSendLowWater = 2048;   // RS_SNDLOWAT: send only with this much room
inline constexpr uint32_t kOverlapStart = 2048;   // the first piece of a large send; doubles up to...
inline constexpr uint32_t kMaxTransfer = 65536;   // ...this, so the wire starts early
inline constexpr uint16_t kQpMinSize = 16;
inline constexpr uint16_t kQpMaxSize = 0xFFFE;
inline constexpr unsigned kCtrlSlots = 4;         // control messages in flight (a power of two)
inline constexpr int kConnectRetries = 6;

// A buffer we registered with riomap: writable ones get an entry in the peer's iomap table.
struct IoMapMr {
  uint64_t offset = 0;
  ibv_mr* mr = nullptr;
  int refcnt = 0;
  int index = -1;  // entry in the peer's table; -1 for a local (read-only) mapping
};

struct ReceivedMessage {
  Op op;
  uint32_t data;  // bytes still to read
};

struct Datagram;  // datagram.cpp

struct Rsocket {
  int index = -1;
  Datagram* dgram = nullptr;    // a datagram rsocket (SOCK_DGRAM): all its state; cm_id and the rest unused
  rdma_cm_id* cm_id = nullptr;
  uint32_t state = kInit;
  int opts = 0;
  int fd_flags = 0;
  int err = 0;
  int retries = 0;
  uint64_t so_opts = 0, tcp_opts = 0, ipv6_opts = 0;
  unsigned keepalive_time = 0;

  // Sizes, settable before connecting (SO_SNDBUF, SO_RCVBUF, SOL_RDMA options).
  uint32_t sbuf_size = 0, rbuf_size = 0;
  uint16_t sq_size = 0, rq_size = 0, sq_inline = 0;
  uint16_t target_iomap_size = 0;

  // Control messages (credits, shutdown) in flight, bounded by kCtrlSlots.
  unsigned ctrl_seqno = 0, ctrl_max_seqno = kCtrlSlots;
  // Send side: data messages sent and the peer's limit; receive side: messages consumed and our limit.
  uint16_t sseq_no = 0, sseq_comp = 0, rseq_no = 0, rseq_comp = 0;

  // The peer's target SGL array (where our credit grants go) and iomap table.
  int remote_sge = 0;
  Sge remote_sgl{}, remote_iomap{};

  // Ours, written by the peer: target_sgl (ring halves we may fill), then target_iomap.
  ibv_mr* target_mr = nullptr;
  int target_sge = 0;
  uint8_t* target_buffer_list = nullptr;
  volatile Sge* target_sgl = nullptr;
  IoMap* target_iomap = nullptr;

  // Receive ring: the peer writes into it; rrecv copies out.
  int rbuf_bytes_avail = 0, rbuf_free_offset = 0, rbuf_offset = 0;
  ibv_mr* rmr = nullptr;
  uint8_t* rbuf = nullptr;
  std::vector<ReceivedMessage> rmsg;  // rq_size + 1 slots
  int rmsg_head = 0, rmsg_tail = 0;

  // Send ring: data is copied here (unless inline) and written from here.
  int sbuf_bytes_avail = 0;
  ibv_mr* smr = nullptr;
  uint8_t* sbuf = nullptr;
  ibv_sge ssgl[2]{};

  int sqe_avail = 0;
  bool cq_armed = false;
  std::chrono::steady_clock::time_point next_cm_check{};  // when to look at the rdma_cm channel again
  unsigned unack_cqe = 0;

  std::vector<IoMapMr> remote_iomappings;  // one per entry of the peer's table
  std::list<IoMapMr*> iomap_list;          // sent (or local)
  std::list<IoMapMr*> iomap_queue;         // to send before the next data
  bool iomap_pending = false;

  // As librdmacm: one lock per direction, the CQ's processing and waiting apart so that a sender waiting
  // for credits never keeps a receiver from the CQ, and the iomap lists.
  std::mutex slock, rlock, cq_lock, cq_wait_lock, map_lock;
};

// table.cpp: descriptor -> rsocket. insert() fails (EMFILE) past the table's size.
Rsocket* lookup(int fd);
int insert(Rsocket* rs, int fd);
void remove(Rsocket* rs);

// The defaults of new rsockets, read once from /etc/rdma/rsocket as librdmacm does.
struct Defaults {
  uint16_t iomap_size = 0, inline_size = 64, sq_size = 384, rq_size = 384;
  uint32_t mem = 1 << 17, wmem = 1 << 17;
  uint32_t polling_time_us = 10;
};
const Defaults& defaults();

// Spinning before sleeping, for the configured polling time (librdmacm's polling_time, /etc/rdma/rsocket):
// left() says whether the time, counted from its first call, is not over yet. (transfer.cpp)
class SpinBudget {
 public:
  bool left();

 private:
  bool started_ = false;
  std::chrono::steady_clock::time_point end_{};
};

// transfer.cpp
int process_cq(Rsocket* rs, bool nonblock, bool (*test)(Rsocket*));
int get_comp(Rsocket* rs, bool nonblock, bool (*test)(Rsocket*));
int get_cq_event(Rsocket* rs);
int wait_cq_or_cm(Rsocket* rs, bool& cm_ready);
void take_cm_events(Rsocket* rs);
bool can_send(const Rsocket* rs);
bool conn_have_rdata(const Rsocket* rs);
bool have_rdata(const Rsocket* rs);
int post_ctrl(Rsocket* rs, Ctrl ctrl);
int post_keepalive(Rsocket* rs);
bool ctrl_avail(const Rsocket* rs);
bool conn_can_send_ctrl(Rsocket* rs);
bool conn_all_sends_done(Rsocket* rs);

// connect.cpp: advances a connect or accept still in progress (non-blocking sockets).
int do_connect(Rsocket* rs);
int set_nonblocking(Rsocket* rs, int flags);

// datagram.cpp: datagram rsockets. The descriptor is created with the socket; the address, the UD QP and
// its buffers when it is bound, or when it first sends or connects.
int datagram_create(Rsocket* rs, int domain);
int datagram_bind(Rsocket* rs, const sockaddr* addr, socklen_t len);
int datagram_connect(Rsocket* rs, const sockaddr* addr, socklen_t len);
ssize_t datagram_send(Rsocket* rs, const iovec* iov, int iovcnt, int flags, const sockaddr* dest, socklen_t len);
ssize_t datagram_recv(Rsocket* rs, void* buf, size_t len, int flags, sockaddr* src, socklen_t* addrlen);
short datagram_poll(Rsocket* rs, short events);  // without blocking
// rpoll's sleep: arms the CQ, then returns the events the socket already has (its revents), or 0 and the
// descriptor to sleep on in `fd`, or -1 if the CQ could not be armed.
int datagram_arm(Rsocket* rs, short events, int& fd);
void datagram_woken(Rsocket* rs);  // that descriptor was readable: takes its event
int datagram_name(Rsocket* rs, sockaddr* addr, socklen_t* addrlen, bool peer);
int datagram_take_error(Rsocket* rs);  // SO_ERROR: read and cleared under the socket's lock (the service thread sets it)
void datagram_close(Rsocket* rs);  // frees everything but the Rsocket

// keepalive.cpp
int keepalive_add(Rsocket* rs);
int keepalive_remove(Rsocket* rs);
int keepalive_update(Rsocket* rs);

inline bool nonblocking(const Rsocket* rs, int flags) { return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT); }

// The errno a failed connection reports: the error it ended with (EIO, EPROTO), else `otherwise`.
inline int connection_error(const Rsocket* rs, int otherwise) {
  return (rs->state & kError) && rs->err != 0 ? rs->err : otherwise;
}

template <class T = int>
T fail(int e) {
  errno = e;
  return T(-1);
}

}  // namespace uroce::rsocket
