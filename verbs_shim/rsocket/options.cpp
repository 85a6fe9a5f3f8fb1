// Socket options, fcntl, names, and riomap/riounmap, with librdmacm's meanings: buffer sizes and queue
// depths apply to a socket not yet connected; options with nothing to do over RDMA (TCP_NODELAY,
// SO_LINGER...) are remembered and reported back.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>
#include <sys/mman.h>

#include <cstdarg>
#include <cstring>

#include "verbs_shim/rdmacm/cma.hpp"
#include "verbs_shim/rsocket/rsocket.hpp"

using namespace uroce::rsocket;

namespace {

void copy_addr(sockaddr* dst, const sockaddr* src, socklen_t* len) {
  const socklen_t full = src->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(dst, src, std::min(*len, full));
  *len = full;
}

int put_int(void* optval, socklen_t* optlen, int value) {
  if (optval == nullptr || optlen == nullptr || *optlen < socklen_t(sizeof(int))) return fail(EINVAL);
  std::memcpy(optval, &value, sizeof value);
  *optlen = sizeof(int);
  return 0;
}

int int_of(const void* optval, socklen_t optlen, int& out) {
  if (optval == nullptr || optlen < socklen_t(sizeof(int))) return fail(EINVAL);
  std::memcpy(&out, optval, sizeof out);
  return 0;
}

unsigned system_keepalive_time() {
  unsigned t = 7200;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r")) {
    if (std::fscanf(f, "%u", &t) != 1) t = 7200;
    std::fclose(f);
  }
  return t;
}

int set_keepalive(Rsocket* rs, bool on) {
  if (on == bool(rs->opts & kOptSvcActive)) return 0;
  if (!on) return keepalive_remove(rs);
  if (rs->keepalive_time == 0) rs->keepalive_time = system_keepalive_time();
  return keepalive_add(rs);
}

// SOL_RDMA's RDMA_ROUTE: the resolved path as ibv_path_data records (librdmacm's rs_convert_sa_path).
int get_route(Rsocket* rs, void* optval, socklen_t* optlen) {
  if (*optlen < socklen_t(sizeof(ibv_path_data))) return fail(EINVAL);
  const rdma_route& route = rs->cm_id->route;
  socklen_t used = 0;
  for (int i = 0; i < route.num_paths && used + sizeof(ibv_path_data) <= *optlen; ++i) {
    const ibv_sa_path_rec& p = route.path_rec[i];
    ibv_path_data d{};
    d.path.dgid = p.dgid;
    d.path.sgid = p.sgid;
    d.path.dlid = p.dlid;
    d.path.slid = p.slid;
    d.path.flowlabel_hoplimit = htonl((ntohl(p.flow_label) << 8) | p.hop_limit);
    d.path.tclass = p.traffic_class;
    d.path.reversible_numpath = uint8_t(p.reversible << 7 | 1);
    d.path.pkey = p.pkey;
    d.path.qosclass_sl = htons(p.sl);
    d.path.mtu = uint8_t(p.mtu | 2 << 6);  // "exactly"
    d.path.rate = uint8_t(p.rate | 2 << 6);
    d.path.packetlifetime = uint8_t(p.packet_life_time | 2 << 6);
    d.flags = p.preference;
    std::memcpy(static_cast<uint8_t*>(optval) + used, &d, sizeof d);
    used += sizeof d;
  }
  *optlen = used;
  return 0;
}

void release(Rsocket* rs, std::list<IoMapMr*>& list, std::list<IoMapMr*>::iterator it) {
  IoMapMr* m = *it;
  if (--m->refcnt > 0) return;
  list.erase(it);
  ibv_dereg_mr(m->mr);
  m->mr = nullptr;
  if (m->index < 0) delete m;
  rs->iomap_pending = !rs->iomap_queue.empty();
}

// What a datagram rsocket takes: the sizes (queue depths apply when it is bound or first sends), and the
// options that only describe it. The rest are a stream's, or need an rdma_cm ID it does not have yet.
bool datagram_option(int level, int optname) {
  switch (level) {
    case SOL_SOCKET: return optname == SO_SNDBUF || optname == SO_RCVBUF || optname == SO_REUSEADDR;
    case SOL_RDMA: return optname == RDMA_SQSIZE || optname == RDMA_RQSIZE || optname == RDMA_INLINE;
    default: return false;
  }
}

}  // namespace

CMA_EXPORT int rsetsockopt(int socket, int level, int optname, const void* optval, socklen_t optlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) {
    if (!datagram_option(level, optname)) return fail(ENOTSUP);
    if (level == SOL_SOCKET && optname == SO_REUSEADDR) {
      int value = 0;
      if (int_of(optval, optlen, value) != 0) return -1;
      rs->so_opts = value != 0 ? rs->so_opts | (uint64_t(1) << SO_REUSEADDR) : rs->so_opts & ~(uint64_t(1) << SO_REUSEADDR);
      return 0;
    }
  }
  int value = 0;
  uint64_t* opts = nullptr;
  bool on = false;
  int rc = fail(ENOTSUP);
  switch (level) {
    case SOL_SOCKET:
      opts = &rs->so_opts;
      switch (optname) {
        case SO_REUSEADDR: {
          if (int_of(optval, optlen, value) != 0) return -1;
          rc = rdma_set_option(rs->cm_id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &value, sizeof value);
          // Once bound to a device the option may be refused; like librdmacm, that is no error.
          if (rc != 0 && (errno == ENOSYS || rs->state != kInit)) rc = 0;
          on = value != 0;
          break;
        }
        case SO_RCVBUF:
          if (int_of(optval, optlen, value) != 0) return -1;
          if (rs->rbuf == nullptr) rs->rbuf_size = uint32_t(value) << 1;
          rc = 0;
          break;
        case SO_SNDBUF:
          if (int_of(optval, optlen, value) != 0) return -1;
          if (rs->sbuf == nullptr) rs->sbuf_size = uint32_t(value) << 1;
          if (rs->sbuf_size < kSendLowWater) rs->sbuf_size = kSendLowWater << 1;
          rc = 0;
          break;
        case SO_LINGER:
          if (optval == nullptr || optlen < socklen_t(sizeof(linger))) return fail(EINVAL);
          on = !static_cast<const linger*>(optval)->l_onoff;  // stored inverted: "on" by default
          rc = 0;
          break;
        case SO_KEEPALIVE:
          if (int_of(optval, optlen, value) != 0) return -1;
          rc = set_keepalive(rs, value != 0);
          on = rs->opts & kOptSvcActive;
          break;
        case SO_OOBINLINE:
          if (int_of(optval, optlen, value) != 0) return -1;
          on = value != 0;
          rc = 0;
          break;
      }
      break;
    case IPPROTO_TCP:
      opts = &rs->tcp_opts;
      switch (optname) {
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL:
          rc = 0;  // a reliable connection retries by itself
          break;
        case TCP_KEEPIDLE:
          if (int_of(optval, optlen, value) != 0) return -1;
          if (value <= 0) return fail(EINVAL);
          rs->keepalive_time = unsigned(value);
          rc = (rs->opts & kOptSvcActive) ? keepalive_update(rs) : 0;
          break;
        case TCP_NODELAY:
          if (int_of(optval, optlen, value) != 0) return -1;
          on = value != 0;
          rc = 0;
          break;
        case TCP_MAXSEG:
          rc = 0;
          break;
      }
      break;
    case IPPROTO_IPV6:
      opts = &rs->ipv6_opts;
      if (optname == IPV6_V6ONLY) {
        if (int_of(optval, optlen, value) != 0) return -1;
        rc = rdma_set_option(rs->cm_id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &value, sizeof value);
        on = value != 0;
      }
      break;
    case SOL_RDMA:
      if (rs->state >= kOpening) return fail(EINVAL);
      if (optname != RDMA_ROUTE && int_of(optval, optlen, value) != 0) return -1;
      switch (optname) {
        case RDMA_SQSIZE:
          rs->sq_size = uint16_t(std::min<uint32_t>(uint32_t(value), kQpMaxSize));
          rc = 0;
          break;
        case RDMA_RQSIZE:
          rs->rq_size = uint16_t(std::min<uint32_t>(uint32_t(value), kQpMaxSize));
          rc = 0;
          break;
        case RDMA_INLINE:
          rs->sq_inline = uint16_t(std::min<uint32_t>(uint32_t(value), kQpMaxSize));
          rc = 0;
          break;
        case RDMA_IOMAPSIZE:
          rs->target_iomap_size = uint16_t(from_scale(to_scale(uint32_t(value), 8) & 0xFF, 8));
          rc = 0;
          break;
        case RDMA_ROUTE:
          rc = fail(ENOTSUP);  // uroced resolves routes itself: no path records to impose
          break;
      }
      break;
  }
  if (rc == 0 && opts != nullptr && optname < 64) {
    if (on) {
      *opts |= uint64_t(1) << optname;
    } else {
      *opts &= ~(uint64_t(1) << optname);
    }
  }
  return rc;
}

CMA_EXPORT int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (optval == nullptr || optlen == nullptr) return fail(EFAULT);
  if (rs->dgram != nullptr) {
    if (level == SOL_SOCKET && optname == SO_TYPE) return put_int(optval, optlen, SOCK_DGRAM);
    if (!datagram_option(level, optname) && !(level == SOL_SOCKET && optname == SO_ERROR)) return fail(ENOTSUP);
  }
  auto bit = [](uint64_t set, int name) { return name < 64 && (set & (uint64_t(1) << name)) ? 1 : 0; };
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR:
        case SO_KEEPALIVE:
        case SO_OOBINLINE: return put_int(optval, optlen, bit(rs->so_opts, optname));
        case SO_RCVBUF: return put_int(optval, optlen, int(rs->rbuf_size));
        case SO_SNDBUF: return put_int(optval, optlen, int(rs->sbuf_size));
        case SO_LINGER: {
          if (*optlen < socklen_t(sizeof(linger))) return fail(EINVAL);
          linger l{!bit(rs->so_opts, optname), 0};
          std::memcpy(optval, &l, sizeof l);
          *optlen = sizeof l;
          return 0;
        }
        case SO_ERROR: {
          int err = 0;
          if (rs->dgram != nullptr) {
            err = datagram_take_error(rs);
          } else {
            err = rs->err;
            rs->err = 0;
          }
          return put_int(optval, optlen, err);
        }
      }
      break;
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_KEEPCNT:
        case TCP_KEEPINTVL: return put_int(optval, optlen, 1);
        case TCP_KEEPIDLE: return put_int(optval, optlen, int(rs->keepalive_time));
        case TCP_NODELAY: return put_int(optval, optlen, bit(rs->tcp_opts, optname));
        case TCP_MAXSEG: {
          const rdma_route& r = rs->cm_id->route;
          return put_int(optval, optlen, r.num_paths > 0 ? 1 << (7 + r.path_rec->mtu) : 2048);
        }
      }
      break;
    case IPPROTO_IPV6:
      if (optname == IPV6_V6ONLY) return put_int(optval, optlen, bit(rs->ipv6_opts, optname));
      break;
    case SOL_RDMA:
      switch (optname) {
        case RDMA_SQSIZE: return put_int(optval, optlen, rs->sq_size);
        case RDMA_RQSIZE: return put_int(optval, optlen, rs->rq_size);
        case RDMA_INLINE: return put_int(optval, optlen, rs->sq_inline);
        case RDMA_IOMAPSIZE: return put_int(optval, optlen, rs->target_iomap_size);
        case RDMA_ROUTE: return get_route(rs, optval, optlen);
      }
      break;
  }
  return fail(ENOTSUP);
}

CMA_EXPORT int rfcntl(int socket, int cmd, ...) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (cmd == F_GETFL) return rs->fd_flags;
  if (cmd != F_SETFL) return fail(ENOTSUP);
  va_list args;
  va_start(args, cmd);
  const int flags = va_arg(args, int);
  va_end(args);
  int rc = 0;
  // (A datagram rsocket's calls read fd_flags themselves; a stream's channels change too.)
  if (rs->dgram == nullptr && (rs->fd_flags & O_NONBLOCK) != (flags & O_NONBLOCK)) {
    rc = set_nonblocking(rs, flags & O_NONBLOCK);
  }
  if (rc == 0) rs->fd_flags = flags;
  return rc;
}

CMA_EXPORT int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (addr == nullptr || addrlen == nullptr) return fail(EFAULT);
  if (rs->dgram != nullptr) return datagram_name(rs, addr, addrlen, true);
  copy_addr(addr, rdma_get_peer_addr(rs->cm_id), addrlen);
  return 0;
}

CMA_EXPORT int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (addr == nullptr || addrlen == nullptr) return fail(EFAULT);
  if (rs->dgram != nullptr) return datagram_name(rs, addr, addrlen, false);
  copy_addr(addr, rdma_get_local_addr(rs->cm_id), addrlen);
  return 0;
}

// Registers `buf` for the peer's riowrite at `offset` (the buffer's address when -1). A writable mapping
// takes a free entry of the peer's iomap table and is sent before the next data.
CMA_EXPORT off_t riomap(int socket, void* buf, size_t len, int prot, int /*flags*/, off_t offset) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail<off_t>(EBADF);
  if (rs->dgram != nullptr) return fail<off_t>(EOPNOTSUPP);
  if (rs->cm_id->pd == nullptr || (prot & ~(PROT_WRITE | PROT_NONE))) return fail<off_t>(EINVAL);
  std::lock_guard g(rs->map_lock);
  int access = IBV_ACCESS_LOCAL_WRITE;
  IoMapMr* m = nullptr;
  if (prot & PROT_WRITE) {
    if (rs->remote_iomappings.empty()) {
      rs->remote_iomappings.resize(rs->remote_iomap.length);
      for (size_t i = 0; i < rs->remote_iomappings.size(); ++i) rs->remote_iomappings[i].index = int(i);
    }
    for (IoMapMr& e : rs->remote_iomappings) {
      if (e.mr == nullptr) {
        m = &e;
        break;
      }
    }
    access |= IBV_ACCESS_REMOTE_WRITE;
  } else {
    m = new (std::nothrow) IoMapMr{};
  }
  if (m == nullptr) return fail<off_t>(ENOMEM);
  if ((m->mr = ibv_reg_mr(rs->cm_id->pd, buf, len, access)) == nullptr) {
    if (m->index < 0) delete m;
    return -1;
  }
  if (offset == -1) offset = off_t(uintptr_t(buf));
  m->offset = uint64_t(offset);
  m->refcnt = 1;
  if (m->index >= 0) {
    rs->iomap_queue.push_back(m);
    rs->iomap_pending = true;
  } else {
    rs->iomap_list.push_back(m);
  }
  return offset;
}

CMA_EXPORT int riounmap(int socket, void* buf, size_t len) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF);
  if (rs->dgram != nullptr) return fail(EOPNOTSUPP);
  std::lock_guard g(rs->map_lock);
  for (auto* list : {&rs->iomap_list, &rs->iomap_queue}) {
    for (auto it = list->begin(); it != list->end(); ++it) {
      if ((*it)->mr->addr == buf && (*it)->mr->length == len) {
        release(rs, *list, it);
        return 0;
      }
    }
  }
  return fail(EINVAL);
}
