// The process-wide state: the devices and their daemons (with rdma_cm's control connection to each), the
// event channels' registrations with them, the live IDs by daemon and handle.
#include <arpa/inet.h>
#include <sys/epoll.h>

#include <cstdlib>

#include <map>
#include <string>

#include "verbs_shim/rdmacm/cma.hpp"

namespace uroce::rdmacm {

namespace client = emulator::client;

namespace {

std::mutex lock;
std::vector<Daemon*> all_daemons;  // opened once, like librdmacm's cma_dev_array
bool devices_opened = false;
std::map<std::pair<Daemon*, uint32_t>, Id*> ids;

}  // namespace

nlohmann::json Daemon::call(nlohmann::json request, std::vector<int>* fds, std::span<const int> send) {
  client::ControlConnection* c = nullptr;
  {
    std::lock_guard g(lock);
    if (!connection) connection = client::ControlConnection::connect(verbs->device->dev_path, "librdmacm");
    c = connection.get();  // (calls on it may run from several threads at once)
  }
  return c->call(std::move(request), send, fds);
}

bool Daemon::gone() {
  std::lock_guard g(lock);
  return hangup || (connection && connection->closed());
}

void Daemon::hung_up() {
  std::lock_guard g(lock);
  hangup = true;
}

int Daemon::socket() {
  std::lock_guard g(lock);
  return connection ? connection->fd() : -1;
}

ibv_pd* Daemon::protection_domain() {
  std::lock_guard g(lock);
  if (pd == nullptr) pd = ibv_alloc_pd(verbs);  // (errno set when it fails; tried again next time)
  return pd;
}

const std::vector<Daemon*>& daemons() {
  std::lock_guard g(lock);
  if (!devices_opened) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) throw client::ControlError(errno ? errno : ENODEV, "no RDMA devices");
    for (int i = 0; i < n; ++i) {
      if (ibv_context* c = ibv_open_device(list[i])) {
        auto* d = new Daemon;
        d->verbs = c;
        all_daemons.push_back(d);
      }
    }
    ibv_free_device_list(list);
    devices_opened = true;
  }
  if (all_daemons.empty()) throw client::ControlError(ENODEV, "no RDMA devices");
  return all_daemons;
}

std::vector<ibv_context*> all_device_contexts() {
  std::vector<ibv_context*> contexts;
  for (Daemon* d : daemons()) contexts.push_back(d->verbs);
  return contexts;
}

ibv_context* device_context() { return daemons().front()->verbs; }

uint32_t channel_on(Channel* c, Daemon& d) {
  {
    std::lock_guard g(c->lock);
    for (const auto& [daemon, handle] : c->handles) {
      if (daemon == &d) return handle;
    }
  }
  // The daemon counts this channel's events on our eventfd, beside every other daemon's.
  const int fd = c->counter;
  const uint32_t handle = d.call({{"op", "cm_create_channel"}}, nullptr, std::span<const int>(&fd, 1)).at("channel");
  // Its hang-up wakes the channel too (only that: the connection's messages are read by calls).
  epoll_event watch{};
  watch.events = EPOLLRDHUP;
  watch.data.ptr = &d;
  if (epoll_ctl(c->channel.fd, EPOLL_CTL_ADD, d.socket(), &watch) != 0 && errno != EEXIST) {
    const int err = errno;
    d.call({{"op", "cm_destroy_channel"}, {"channel", handle}});
    throw client::ControlError(err, "cannot watch the daemon's connection");
  }
  std::lock_guard g(c->lock);
  c->handles.emplace_back(&d, handle);
  return handle;
}

void remember(Daemon* d, uint32_t handle, Id* id) {
  std::lock_guard g(lock);
  ids[{d, handle}] = id;
}

Id* find_id(Daemon* d, uint32_t handle) {
  std::lock_guard g(lock);
  const auto it = ids.find({d, handle});
  return it == ids.end() ? nullptr : it->second;
}

void forget(Daemon* d, uint32_t handle) {
  std::lock_guard g(lock);
  ids.erase({d, handle});
}

void mark_removed(Id* id) {
  std::lock_guard g(lock);  // (next_removed reads it on another thread)
  id->removed = true;
}

Id* next_removed(Daemon* d, const Channel* c) {
  std::lock_guard g(lock);
  for (const auto& [key, id] : ids) {
    if (key.first == d && id->daemon == d && id->handle == key.second && id->id.verbs == d->verbs &&
        id->id.channel == &c->channel && !id->removed) {
      id->removed = true;
      return id;
    }
  }
  return nullptr;
}

std::string ip_text(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a != nullptr && a->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text);
  } else if (a != nullptr && a->sa_family == AF_INET6) {
    // The scope (fe80::1%veth0) is not needed: uroced has one port, and its link-local GID is on it.
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof text);
  } else {
    throw client::ControlError(EAFNOSUPPORT, "only IPv4 and IPv6 addresses");
  }
  return text;
}

bool is_loopback(const sockaddr* a) {
  if (a != nullptr && a->sa_family == AF_INET) {
    return ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24 == 127;
  }
  return a != nullptr && a->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

uint16_t port_of(const sockaddr* a) {
  if (a == nullptr) return 0;
  if (a->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
}

void set_ip(sockaddr* out, const std::string& text, uint16_t port) {
  if (text.find(':') != std::string::npos) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(out);
    *sin6 = {};
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port);
    inet_pton(AF_INET6, text.c_str(), &sin6->sin6_addr);
    return;
  }
  auto* sin = reinterpret_cast<sockaddr_in*>(out);
  *sin = {};
  sin->sin_family = AF_INET;
  sin->sin_port = htons(port);
  inet_pton(AF_INET, text.c_str(), &sin->sin_addr);
}

void set_gid(ibv_gid& gid, const std::string& text) {
  gid = {};
  if (text.find(':') != std::string::npos) {
    inet_pton(AF_INET6, text.c_str(), gid.raw);
    return;
  }
  gid.raw[10] = 0xff;
  gid.raw[11] = 0xff;
  inet_pton(AF_INET, text.c_str(), &gid.raw[12]);
}

}  // namespace uroce::rdmacm

CMA_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  using namespace uroce::rdmacm;
  std::vector<ibv_context*> list;
  if (guarded([&] {
        list = all_device_contexts();
        return 0;
      }) != 0) {
    list.clear();  // no daemon, no device: an empty list, as librdmacm gives on a host without RDMA
  }
  auto** out = static_cast<ibv_context**>(calloc(list.size() + 1, sizeof(ibv_context*)));
  if (out == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < list.size(); ++i) out[i] = list[i];
  if (num_devices != nullptr) *num_devices = int(list.size());
  return out;
}

CMA_EXPORT void rdma_free_devices(ibv_context** list) { free(list); }
