// Which device an rdma_cm ID is on, when a program lists several (UROCE_SOCKET=a:b, uroce-run --socket a
// --socket b). Linux's rdma_cm binds an ID to the netdev that has its source address, or that the route to its
// destination leaves by, and a wildcard listener hears every device. Here each device is a daemon, and an ID
// lives in one daemon's rdma_cm service: it starts on the first, moves once an address places it elsewhere,
// and a wildcard listener has a twin on every other daemon.
#include <arpa/inet.h>
#include <netinet/in.h>

#include "emulator/client/logger.hpp"
#include "verbs_shim/rdmacm/cma.hpp"

namespace uroce::rdmacm {

using emulator::client::ControlError;
using nlohmann::json;

namespace {

// uroced's "cm_route" answer, best first.
enum class Route { local, link, gateway, none };

Route route_of(Daemon& d, const std::string& ip) {
  try {
    const std::string r = d.call({{"op", "cm_route"}, {"dst", ip}}).value("route", std::string());
    if (r == "local") return Route::local;
    if (r == "link") return Route::link;
    if (r == "gateway") return Route::gateway;
  } catch (const ControlError& e) {
    emulator::client::logger().debug("rdma_cm: no route answer from {}: {}", d.verbs->device->dev_path, e.what());
  }
  return Route::none;
}

bool is_wildcard(const sockaddr* a) {
  if (a->sa_family == AF_INET) return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == INADDR_ANY;
  return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

bool is_multicast(const sockaddr* a) {
  if (a->sa_family == AF_INET) return IN_MULTICAST(ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr));
  return IN6_IS_ADDR_MULTICAST(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

// The daemon with the best route to `a` no worse than `worst`; null if there is one device only, if `a` is
// an address no device can own, or if no daemon qualifies.
Daemon* best_daemon(const sockaddr* a, Route worst) {
  const auto& all = daemons();
  if (all.size() < 2 || a == nullptr || (a->sa_family != AF_INET && a->sa_family != AF_INET6) || is_wildcard(a) ||
      is_loopback(a) || is_multicast(a)) {
    return nullptr;
  }
  const std::string ip = ip_text(a);
  Daemon* best = nullptr;
  Route best_route = Route::none;
  for (Daemon* d : all) {  // in the program's order: the first of equals wins
    const Route r = route_of(*d, ip);
    if (r < best_route && r <= worst) best = d, best_route = r;
    if (best_route == Route::local) break;
  }
  return best;
}

// Destroys a daemon's ID on a path that is already failing or replacing it: an error here changes nothing (a
// daemon that has gone keeps nothing of it).
void destroy_quietly(Daemon& d, uint32_t handle) {
  try {
    d.call({{"op", "cm_destroy_id"}, {"cm_id", handle}});
  } catch (const ControlError&) {
  }
}

// A new ID on `d` like `id`: same channel, port space, QP type and options. Throws ControlError.
uint32_t create_like(const Id* id, Daemon& d) {
  const json r = d.call({{"op", "cm_create_id"}, {"channel", channel_on(to_impl(id->id.channel), d)},
                         {"port_space", int(id->id.ps)}, {"qp_type", int(id->id.qp_type)}});
  const uint32_t handle = r.at("cm_id").get<uint32_t>();
  try {
    for (const auto& [name, value] : id->options) {
      d.call({{"op", "cm_set_option"}, {"cm_id", handle}, {"name", name}, {"value", value}});
    }
  } catch (...) {
    destroy_quietly(d, handle);
    throw;
  }
  return handle;
}

}  // namespace

Daemon* owner_of(const sockaddr* ip) { return best_daemon(ip, Route::local); }

Daemon* best_route_to(const sockaddr* dst) { return best_daemon(dst, Route::gateway); }

void move_id(Id* id, Daemon& to) {
  if (id->daemon == &to) return;
  const uint32_t handle = create_like(id, to);
  if (id->bound) {  // (to a wildcard: an address of a device would have placed it already)
    try {
      const sockaddr* src = &id->id.route.addr.src_addr;
      to.call({{"op", "cm_bind"}, {"cm_id", handle}, {"addr", ip_text(src)}, {"port", port_of(src)}});
    } catch (...) {
      destroy_quietly(to, handle);
      throw;
    }
  }
  destroy_quietly(*id->daemon, id->handle);
  forget(id->daemon, id->handle);
  id->daemon = &to;
  id->handle = handle;
  remember(&to, handle, id);
}

void listen_on_every_device(Id* id, int backlog, uint16_t port) {
  const sockaddr* src = &id->id.route.addr.src_addr;
  for (Daemon* d : daemons()) {
    if (d == id->daemon) continue;
    uint32_t handle = 0;
    try {
      handle = create_like(id, *d);
      // Known before it listens: another thread may take its first CONNECT_REQUEST at once.
      remember(d, handle, id);
      // Bound as the ID is (its wildcard), or, like an unbound listener, to none: the daemon then takes the
      // port for it as it would have taken it for the ID.
      json listen = {{"op", "cm_listen"}, {"cm_id", handle}, {"backlog", backlog}, {"port", port}};
      if (id->bound) d->call({{"op", "cm_bind"}, {"cm_id", handle}, {"addr", ip_text(src)}, {"port", port}});
      d->call(listen);
    } catch (const ControlError& e) {
      emulator::client::logger().warn("rdma_listen on port {}: not listening on {} ({}): {}", port,
                                      d->verbs->device->name, d->verbs->device->dev_path, e.what());
      if (handle != 0) {
        forget(d, handle);
        destroy_quietly(*d, handle);
      }
      continue;
    }
    id->twins.emplace_back(d, handle);
  }
}

}  // namespace uroce::rdmacm
