// rdma_cm IDs: create, destroy, bind, resolve, listen, options, migrate.
#include <arpa/inet.h>
#include <endian.h>

#include "verbs_shim/rdmacm/cma.hpp"

using namespace uroce::rdmacm;
using nlohmann::json;

namespace uroce::rdmacm {

int complete(Id* id) {
  if (!id->sync) return 0;
  if (id->id.event != nullptr) {
    rdma_ack_cm_event(id->id.event);
    id->id.event = nullptr;
  }
  if (rdma_get_cm_event(id->id.channel, &id->id.event) != 0) return -1;
  const int status = id->id.event->status;
  if (status == 0 && id->id.event->event != RDMA_CM_EVENT_REJECTED && id->id.event->event != RDMA_CM_EVENT_UNREACHABLE &&
      id->id.event->event != RDMA_CM_EVENT_CONNECT_ERROR && id->id.event->event != RDMA_CM_EVENT_ADDR_ERROR &&
      id->id.event->event != RDMA_CM_EVENT_ROUTE_ERROR) {
    return 0;
  }
  errno = status < 0 ? -status : (id->id.event->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : EIO);
  return -1;
}

}  // namespace uroce::rdmacm

namespace {

void fill_src(Id* id, const json& r) {
  rdma_addr& a = id->id.route.addr;
  set_ip(&a.src_addr, r.value("addr", r.value("src", std::string("0.0.0.0"))),
         r.value("port", r.value("src_port", uint16_t(0))));
  set_gid(a.addr.ibaddr.sgid, r.value("addr", r.value("src", std::string("0.0.0.0"))));
  a.addr.ibaddr.pkey = htobe16(0xffff);
}

}  // namespace

CMA_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id_out, void* context,
                              rdma_port_space ps) {
  if (id_out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  const bool sync = channel == nullptr;
  if (sync && (channel = rdma_create_event_channel()) == nullptr) return -1;
  auto* id = new (std::nothrow) Id{};
  if (id == nullptr) {
    errno = ENOMEM;
    return -1;
  }
  const ibv_qp_type type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
  const int rc = guarded([&] {
    // On the first device until an address places it (rdma_bind_addr, rdma_resolve_addr).
    Daemon& d = *daemons().front();
    const json r = d.call({{"op", "cm_create_id"}, {"channel", channel_on(to_impl(channel), d)},
                           {"port_space", int(ps)}, {"qp_type", int(type)}});
    id->daemon = &d;
    id->handle = r.at("cm_id").get<uint32_t>();
    return 0;
  });
  if (rc != 0) {
    const int err = errno;  // closing the channel must not clobber the reason
    delete id;
    if (sync) rdma_destroy_event_channel(channel);
    errno = err;
    return -1;
  }
  id->sync = sync;
  id->id.channel = channel;
  id->id.context = context;
  id->id.ps = ps;
  id->id.qp_type = type;
  remember(id->daemon, id->handle, id);
  *id_out = &id->id;
  return 0;
}

CMA_EXPORT int rdma_destroy_id(rdma_cm_id* cm_id) {
  if (cm_id == nullptr) {
    errno = EINVAL;
    return -1;
  }
  Id* id = to_impl(cm_id);
  int rc = guarded([&] { return call(id, {{"op", "cm_destroy_id"}, {"cm_id", id->handle}}), 0; });
  if (rc != 0 && id->daemon->gone()) rc = 0;  // its daemon stopped (DEVICE_REMOVAL): nothing of it is left
  forget(id->daemon, id->handle);
  for (const auto& [daemon, handle] : id->twins) {
    guarded([&] { return daemon->call({{"op", "cm_destroy_id"}, {"cm_id", handle}}), 0; });
    forget(daemon, handle);
  }
  forget_memberships(id);
  if (id->id.event != nullptr) rdma_ack_cm_event(id->id.event);
  if (id->sync) rdma_destroy_event_channel(id->id.channel);
  delete id;
  return rc;
}

CMA_EXPORT int rdma_bind_addr(rdma_cm_id* cm_id, sockaddr* addr) {
  Id* id = to_impl(cm_id);
  return guarded([&] {
    const std::string ip = ip_text(addr);
    // One of a device's own addresses ties the ID to that device, as Linux binds it to the address's netdev.
    if (!id->bound) {
      if (Daemon* owner = owner_of(addr)) move_id(id, *owner);
    }
    const json r = call(id, {{"op", "cm_bind"}, {"cm_id", id->handle}, {"addr", ip}, {"port", port_of(addr)}});
    fill_src(id, r);
    id->bound = true;
    // Bound to one of the port's own addresses, the ID belongs to its device (a wildcard or a loopback
    // address does not: uroced says which).
    if (r.value("on_port", false)) {
      id->id.verbs = id->daemon->verbs;
      id->id.pd = id->daemon->protection_domain();
      id->id.port_num = 1;
    }
    return 0;
  });
}

CMA_EXPORT int rdma_resolve_addr(rdma_cm_id* cm_id, sockaddr* src, sockaddr* dst, int timeout_ms) {
  Id* id = to_impl(cm_id);
  const int rc = guarded([&] {
    const std::lock_guard filling(id->filling);
    const std::string to = ip_text(dst);
    const bool has_src = src != nullptr && src->sa_family != AF_UNSPEC;
    // An ID on no device yet goes to the device of its source address, else to the one with the best route to
    // the destination (its own address, then its link, then a gateway), as Linux's route lookup picks the
    // netdev. A wildcard-bound ID takes its port along.
    if (id->id.verbs == nullptr && id->twins.empty()) {
      Daemon* place = has_src ? owner_of(src) : best_route_to(dst);
      if (place != nullptr) move_id(id, *place);
    }
    json req = {{"op", "cm_resolve_addr"}, {"cm_id", id->handle}, {"dst", to}, {"dst_port", port_of(dst)},
                {"timeout_ms", timeout_ms}};
    if (has_src) {
      req["src"] = ip_text(src);
      req["src_port"] = port_of(src);  // 0: an ephemeral one; else that port, as rdma_bind_addr would take it
    }
    const json r = call(id, req);
    fill_src(id, r);
    id->bound = true;
    rdma_addr& a = id->id.route.addr;
    set_ip(&a.dst_addr, r.value("dst", std::string()), port_of(dst));
    set_gid(a.addr.ibaddr.dgid, r.value("dst", std::string()));
    id->id.verbs = id->daemon->verbs;
    id->id.pd = id->daemon->protection_domain();
    id->id.port_num = 1;
    return 0;
  });
  return rc != 0 ? rc : complete(id);
}

CMA_EXPORT int rdma_resolve_route(rdma_cm_id* cm_id, int /*timeout_ms*/) {
  Id* id = to_impl(cm_id);
  const int rc = guarded([&] {
    const std::lock_guard filling(id->filling);
    const json r = call(id, {{"op", "cm_resolve_route"}, {"cm_id", id->handle}});
    ibv_sa_path_rec& p = id->path;
    p = {};
    p.sgid = id->id.route.addr.addr.ibaddr.sgid;
    p.dgid = id->id.route.addr.addr.ibaddr.dgid;
    p.pkey = htobe16(0xffff);
    p.mtu = r.value("path_mtu", uint8_t(3));
    p.mtu_selector = 2;  // exactly
    p.hop_limit = r.value("hop_limit", uint8_t(64));
    p.traffic_class = r.value("traffic_class", uint8_t(0));
    p.sl = r.value("sl", uint8_t(0));
    p.reversible = 1;
    p.numb_path = 1;
    p.packet_life_time = 18;
    id->id.route.path_rec = &id->path;
    id->id.route.num_paths = 1;
    return 0;
  });
  return rc != 0 ? rc : complete(id);
}

CMA_EXPORT int rdma_listen(rdma_cm_id* cm_id, int backlog) {
  Id* id = to_impl(cm_id);
  return guarded([&] {
    const std::lock_guard filling(id->filling);
    backlog = backlog < 0 ? 0 : backlog;
    const json r = call(id, {{"op", "cm_listen"}, {"cm_id", id->handle}, {"backlog", backlog}});
    for (const auto& [daemon, handle] : id->twins) {  // a new backlog
      daemon->call({{"op", "cm_listen"}, {"cm_id", handle}, {"backlog", backlog}});
    }
    if (!r.contains("port")) return 0;  // (it was listening already)
    sockaddr* src = &id->id.route.addr.src_addr;
    if (src->sa_family == AF_UNSPEC) src->sa_family = AF_INET;  // unbound: the IPv4 wildcard, as uroced has it
    // sin_port and sin6_port lie at the same offset.
    const uint16_t port = r["port"].get<uint16_t>();
    reinterpret_cast<sockaddr_in*>(src)->sin_port = htons(port);
    // Not bound to an address of one device (nor to a loopback address, which is on none): a listener on
    // every device, as Linux's wildcard listen is.
    if (id->id.verbs == nullptr && !is_loopback(src)) listen_on_every_device(id, backlog, port);
    return 0;
  });
}

CMA_EXPORT int rdma_set_option(rdma_cm_id* cm_id, int level, int optname, void* optval, size_t optlen) {
  Id* id = to_impl(cm_id);
  if (cm_id == nullptr || optval == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::string name;
  uint32_t value = 0;
  if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_TOS && optlen == sizeof(uint8_t)) {
    name = "tos", value = *static_cast<uint8_t*>(optval);
  } else if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_REUSEADDR && optlen == sizeof(int)) {
    name = "reuseaddr", value = *static_cast<int*>(optval) != 0;
  } else if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_AFONLY && optlen == sizeof(int)) {
    name = "afonly", value = *static_cast<int*>(optval) != 0;
  } else if (level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT && optlen == sizeof(uint8_t)) {
    name = "ack_timeout", value = *static_cast<uint8_t*>(optval);
  } else if (level == RDMA_OPTION_ID || level == RDMA_OPTION_IB) {
    errno = ENOSYS;  // RDMA_OPTION_IB_PATH: uroce resolves its own routes
    return -1;
  } else {
    errno = EINVAL;
    return -1;
  }
  return guarded([&] {
    call(id, {{"op", "cm_set_option"}, {"cm_id", id->handle}, {"name", name}, {"value", value}});
    for (const auto& [daemon, handle] : id->twins) {
      daemon->call({{"op", "cm_set_option"}, {"cm_id", handle}, {"name", name}, {"value", value}});
    }
    id->options[name] = value;
    return 0;
  });
}

// To another channel, or with none to synchronous operation (librdmacm: a channel of its own, whose events
// the ID's calls then wait for).
CMA_EXPORT int rdma_migrate_id(rdma_cm_id* cm_id, rdma_event_channel* channel) {
  Id* id = to_impl(cm_id);
  if (cm_id == nullptr || (channel == nullptr && id->sync)) {
    errno = EINVAL;
    return -1;
  }
  const bool to_sync = channel == nullptr;
  if (to_sync && (channel = rdma_create_event_channel()) == nullptr) return -1;
  const int rc = guarded([&] {
    Channel* to = to_impl(channel);
    call(id, {{"op", "cm_migrate_id"}, {"cm_id", id->handle}, {"channel", channel_on(to, *id->daemon)}});
    for (const auto& [daemon, handle] : id->twins) {
      daemon->call({{"op", "cm_migrate_id"}, {"cm_id", handle}, {"channel", channel_on(to, *daemon)}});
    }
    return 0;
  });
  if (rc != 0) {
    if (to_sync) rdma_destroy_event_channel(channel);
    return rc;
  }
  if (id->sync) {
    if (id->id.event != nullptr) {
      rdma_ack_cm_event(id->id.event);
      id->id.event = nullptr;
    }
    rdma_destroy_event_channel(id->id.channel);
  }
  id->sync = to_sync;
  id->id.channel = channel;
  return 0;
}

CMA_EXPORT __be16 rdma_get_src_port(rdma_cm_id* id) {
  return reinterpret_cast<sockaddr_in*>(&id->route.addr.src_addr)->sin_port;
}

CMA_EXPORT __be16 rdma_get_dst_port(rdma_cm_id* id) {
  return reinterpret_cast<sockaddr_in*>(&id->route.addr.dst_addr)->sin_port;
}
