// Event channels and events. A channel's fd is an epoll fd of ours over an eventfd that every daemon with an
// ID on the channel counts its events on (a semaphore: one read per event) and over those daemons' sockets
// (cma.hpp, Channel), so it blocks, polls and epolls like the kernel's rdma_cm fd, for all the program's
// devices at once; the event itself is then fetched from its daemon with cm_get_event. A CONNECT_RESPONSE
// on an ID with a QP is finished here as librdmacm does: the QP goes to RTR and RTS, RTU is sent, and the
// application sees ESTABLISHED.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <endian.h>

#include <cstring>
#include <new>
#include <optional>

#include "emulator/protocol/cm_json.hpp"
#include "verbs_shim/rdmacm/cma.hpp"

using namespace uroce::rdmacm;
using nlohmann::json;

static_assert(RDMA_CM_EVENT_CONNECT_REQUEST == 4 && RDMA_CM_EVENT_ESTABLISHED == 9 &&
              RDMA_CM_EVENT_TIMEWAIT_EXIT == 15, "uroced numbers events as rdma_cma.h does (cm_ids.hpp)");

CMA_EXPORT rdma_event_channel* rdma_create_event_channel() {
  auto* c = new (std::nothrow) Channel{};
  if (c == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  // Blocking, as the kernel's rdma_cm fd is: the application may set O_NONBLOCK.
  c->channel.fd = epoll_create1(EPOLL_CLOEXEC);
  c->counter = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event watch{};
  watch.events = EPOLLIN;
  watch.data.ptr = nullptr;  // (a daemon's socket carries its Daemon)
  if (c->channel.fd < 0 || c->counter < 0 || epoll_ctl(c->channel.fd, EPOLL_CTL_ADD, c->counter, &watch) != 0) {
    const int err = errno;
    if (c->channel.fd >= 0) close(c->channel.fd);
    if (c->counter >= 0) close(c->counter);
    delete c;
    errno = err;
    return nullptr;
  }
  // Registered with the first daemon now, so that a program without one learns it here, as it would without
  // the kernel's rdma_cm; with another when an ID there first uses it.
  const int rc = guarded([&] { return channel_on(c, *daemons().front()), 0; });
  if (rc != 0) {
    const int err = errno;
    close(c->channel.fd);
    close(c->counter);
    delete c;
    errno = err;
    return nullptr;
  }
  return &c->channel;
}

CMA_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  Channel* c = to_impl(channel);
  for (const auto& [daemon, handle] : c->handles) {
    guarded([&] { return daemon->call({{"op", "cm_destroy_channel"}, {"channel", handle}}), 0; });
  }
  close(c->channel.fd);
  close(c->counter);
  delete c;
}

namespace {

// The event's private data (hex in `param`) into the event's own buffer, which `data`/`len` then point to.
void copy_private_data(Event& e, const json& param, const void*& data, uint8_t& len) {
  const auto bytes = uroce::emulator::protocol::from_hex(param.value("private_data", std::string()));
  if (!bytes || bytes->empty()) return;
  const size_t n = std::min(bytes->size(), sizeof e.private_data);
  std::memcpy(e.private_data, bytes->data(), n);
  data = e.private_data;
  len = uint8_t(n);
}

void fill_conn(Event& e, const json& conn) {
  rdma_conn_param& p = e.event.param.conn;
  copy_private_data(e, conn, p.private_data, p.private_data_len);
  p.responder_resources = conn.value("responder_resources", uint8_t(0));
  p.initiator_depth = conn.value("initiator_depth", uint8_t(0));
  p.retry_count = conn.value("retry_count", uint8_t(0));
  p.rnr_retry_count = conn.value("rnr_retry_count", uint8_t(0));
  p.srq = conn.value("srq", false) ? 1 : 0;
  p.qp_num = conn.value("qp_num", 0u);
}

// A UD ID's CONNECT_REQUEST (private data only, as Linux gives it), ESTABLISHED (the peer's QPN and Q_Key,
// and an address handle's attributes to reach it) or UNREACHABLE (the SIDR_REP's private data).
void fill_ud(Event& e, const json& ud) {
  rdma_ud_param& p = e.event.param.ud;
  copy_private_data(e, ud, p.private_data, p.private_data_len);
  p.qp_num = ud.value("qp_num", 0u);
  p.qkey = ud.value("qkey", 0u);
  if (ud.contains("dgid")) set_ah_attr(p.ah_attr, ud);
}

// A CONNECT_REQUEST makes a new ID, a child of the listener (same channel, context, port space), on the
// device whose daemon the request came to.
Id* new_connection_id(Id* listener, Daemon* daemon, const json& m) {
  auto* id = new Id{};
  id->daemon = daemon;
  id->handle = m.at("cm_id").get<uint32_t>();
  id->bound = true;
  id->id.channel = listener->id.channel;
  id->id.context = listener->id.context;
  id->id.ps = listener->id.ps;
  id->id.qp_type = listener->id.qp_type;
  id->id.verbs = daemon->verbs;
  id->id.pd = daemon->protection_domain();
  id->id.port_num = 1;
  // Never synchronous here, even under a synchronous listener: it shares the listener's channel, which is not
  // its own to destroy; rdma_get_request gives it a channel of its own and makes it synchronous then.
  id->sync = false;
  rdma_addr& a = id->id.route.addr;
  set_ip(&a.src_addr, m.value("src", std::string()), m.value("src_port", uint16_t(0)));
  set_ip(&a.dst_addr, m.value("dst", std::string()), m.value("dst_port", uint16_t(0)));
  set_gid(a.addr.ibaddr.sgid, m.value("src", std::string()));
  set_gid(a.addr.ibaddr.dgid, m.value("dst", std::string()));
  a.addr.ibaddr.pkey = htobe16(0xffff);
  id->path.sgid = a.addr.ibaddr.sgid;
  id->path.dgid = a.addr.ibaddr.dgid;
  id->path.pkey = htobe16(0xffff);
  id->path.mtu = m.value("path_mtu", uint8_t(3));
  id->path.hop_limit = 64;
  id->path.traffic_class = m.value("traffic_class", uint8_t(0));
  id->path.sl = m.value("sl", uint8_t(0));
  id->path.reversible = 1;
  id->id.route.path_rec = &id->path;
  id->id.route.num_paths = 1;
  if (m.contains("conn")) {  // (a UD request has `ud` instead: nothing to negotiate)
    const json& conn = m["conn"];
    id->peer_responder_resources = conn.value("responder_resources", uint8_t(0));
    id->peer_initiator_depth = conn.value("initiator_depth", uint8_t(0));
  }
  remember(daemon, id->handle, id);
  return id;
}

// librdmacm's ucma_process_conn_resp: the active side's QP follows the REP, then RTU.
void finish_connect(Id* id, Event& e) {
  if (modify_qp_to(id, IBV_QPS_RTR) != 0 || modify_qp_to(id, IBV_QPS_RTS) != 0) {
    const int err = errno;
    guarded([&] { return call(id, {{"op", "cm_reject"}, {"cm_id", id->handle}}), 0; });
    e.event.event = RDMA_CM_EVENT_CONNECT_ERROR;
    e.event.status = -err;
    return;
  }
  if (guarded([&] { return call(id, {{"op", "cm_establish"}, {"cm_id", id->handle}}), 0; }) != 0) {
    e.event.event = RDMA_CM_EVENT_CONNECT_ERROR;
    e.event.status = -errno;
    return;
  }
  e.event.event = RDMA_CM_EVENT_ESTABLISHED;
}

// The DEVICE_REMOVAL of an ID whose daemon has gone, made here as the daemon would have sent it.
json removal_event(const Id* id) {
  return {{"type", int(RDMA_CM_EVENT_DEVICE_REMOVAL)}, {"cm_id", id->handle}, {"status", 0}};
}

// The count read was one daemon's; which one, the channel does not say. Each daemon it is registered with is
// asked in turn, starting after the one that gave the last event. Null if none has one (its ID was
// destroyed meanwhile, or another thread took it and this thread's count is for a later one). A daemon that
// has stopped counted a DEVICE_REMOVAL for each ID on its device (CmService::announce_removal): once it is
// gone, they are made here, one per ID. A daemon that has gone is otherwise passed over, so that the others'
// events still come; its error is thrown only if every daemon failed.
Daemon* next_event(Channel* c, json& m) {
  std::vector<std::pair<Daemon*, uint32_t>> handles;
  size_t first = 0;
  {
    std::lock_guard g(c->lock);
    handles = c->handles;
    first = c->next % handles.size();
  }
  std::optional<uroce::emulator::client::ControlError> failed;
  size_t failures = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    const auto& [daemon, handle] = handles[(first + i) % handles.size()];
    try {
      m = daemon->call({{"op", "cm_get_event"}, {"channel", handle}});
    } catch (const uroce::emulator::client::ControlError& e) {
      if (Id* id = daemon->gone() ? next_removed(daemon, c) : nullptr) {
        m = removal_event(id);
        return daemon;
      }
      failed = e;
      ++failures;
      continue;
    }
    if (m.value("none", false)) continue;
    std::lock_guard g(c->lock);
    c->next = first + i + 1;
    return daemon;
  }
  if (failures == handles.size()) throw *failed;
  return nullptr;
}

// Whether a blocking read that a signal handler interrupted here would go on. The kernel's rdma_cm fd is read
// with read(), which the kernel restarts after a handler installed with SA_RESTART (signal(7)); our wait is
// an epoll_wait, which a handler always ends with EINTR. So an interrupted wait goes on when every handler
// that could have run on this thread (its signal not blocked here) was installed with SA_RESTART: fio's
// are, and a handler from glibc's signal() is. (sigaction does not show glibc's own: the one for set*id
// across threads has SA_RESTART, and cancellation ends the thread in the wait, a cancellation point.)
bool restarts_after_signal() {
  sigset_t blocked;
  if (pthread_sigmask(SIG_BLOCK, nullptr, &blocked) != 0) return false;
  for (int s = 1; s < NSIG; ++s) {
    struct sigaction a {};
    if (sigismember(&blocked, s) == 1 || sigaction(s, nullptr, &a) != 0) continue;
    const bool has_handler = (a.sa_flags & SA_SIGINFO) ? a.sa_sigaction != nullptr
                                                       : a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
    if (has_handler && !(a.sa_flags & SA_RESTART)) return false;
  }
  return true;
}

// Blocks (or EAGAIN on a non-blocking channel) until a daemon counted an event or hung up; no lock is held, so
// other threads keep making calls meanwhile. 0: a count was taken (the event is to be fetched); 1: a daemon
// has gone, and `m` is the DEVICE_REMOVAL of an ID that was on its device, from `from`; -1 with errno.
int wait_for_event(Channel* c, json& m, Daemon*& from) {
  const int flags = fcntl(c->channel.fd, F_GETFL);
  const bool nonblocking = flags >= 0 && (flags & O_NONBLOCK);
  for (;;) {
    epoll_event ready[8];
    const int n = epoll_wait(c->channel.fd, ready, 8, nonblocking ? 0 : -1);
    if (n < 0 && errno == EINTR && !nonblocking && restarts_after_signal()) continue;
    if (n < 0) return -1;
    if (n == 0) {
      errno = EAGAIN;
      return -1;
    }
    for (int i = 0; i < n; ++i) {
      auto* d = static_cast<Daemon*>(ready[i].data.ptr);
      if (d == nullptr) continue;
      d->hung_up();
      if (Id* id = next_removed(d, c)) {
        m = removal_event(id);
        from = d;
        return 1;
      }
      // Every ID it had here has been told: it wakes the channel no more.
      epoll_ctl(c->channel.fd, EPOLL_CTL_DEL, d->socket(), nullptr);
    }
    uint64_t count = 0;
    if (read(c->counter, &count, sizeof count) == sizeof count) return 0;
    // (another thread took the count, or only a hang-up woke us)
    if (nonblocking) {
      errno = EAGAIN;
      return -1;
    }
  }
}

}  // namespace

CMA_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  Channel* c = to_impl(channel);
  for (;;) {
    json m;
    Daemon* from = nullptr;
    const int woken = wait_for_event(c, m, from);
    if (woken < 0) return -1;  // errno: EAGAIN, EINTR
    if (woken == 0 && guarded([&] { return from = next_event(c, m), 0; }) != 0) return -1;
    if (from == nullptr) continue;  // the event's ID was destroyed meanwhile
    Id* id = find_id(from, m.value("cm_id", 0u));
    Id* listener = m.contains("listen_id") ? find_id(from, m.value("listen_id", 0u)) : nullptr;
    if (id == nullptr && listener == nullptr) continue;
    // The call that led to this event may not have filled the ID in yet (Id::filling): wait until it has.
    { const std::lock_guard filled((id != nullptr ? id : listener)->filling); }
    auto* e = new (std::nothrow) Event{};
    if (e == nullptr) {
      errno = ENOMEM;
      return -1;
    }
    e->event.event = rdma_cm_event_type(m.value("type", 0));
    e->event.status = m.value("status", 0);
    if (m.contains("conn")) fill_conn(*e, m["conn"]);
    if (m.contains("ud")) fill_ud(*e, m["ud"]);
    if (e->event.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
      if (listener == nullptr) {
        delete e;
        continue;
      }
      try {
        id = new_connection_id(listener, from, m);
      } catch (...) {
        delete e;
        errno = ENOMEM;
        return -1;
      }
      e->event.listen_id = &listener->id;
    }
    e->event.id = &id->id;
    if (e->event.event == RDMA_CM_EVENT_DEVICE_REMOVAL) mark_removed(id);
    if (e->event.event == RDMA_CM_EVENT_CONNECT_RESPONSE && id->id.qp != nullptr) finish_connect(id, *e);
    if (m.contains("mc") && !take_join_event(id, *e, m)) {
      delete e;
      continue;
    }
    *event = &e->event;
    return 0;
  }
}

CMA_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) {
    errno = EINVAL;
    return -1;
  }
  delete to_impl(event);
  return 0;
}

CMA_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}
