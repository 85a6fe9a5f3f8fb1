// The process-wide state: one control connection for rdma_cm, the verbs devices, the live IDs by handle.
#include <arpa/inet.h>

#include <cstdlib>

#include <map>
#include <string>

#include "verbs_shim/rdmacm/cma.hpp"

namespace uroce::rdmacm {

namespace client = emulator::client;

namespace {

std::mutex lock;
std::unique_ptr<client::ControlConnection> connection;  // never closed: ids may live until exit
std::vector<ibv_context*> contexts;                      // opened once, like librdmacm's cma_dev_array
bool devices_opened = false;
std::map<uint32_t, Id*> ids;

}  // namespace

client::ControlConnection& control() {
  std::lock_guard g(lock);
  if (!connection) connection = client::ControlConnection::connect(client::ControlConnection::default_socket_path(), "librdmacm");
  return *connection;
}

nlohmann::json call(nlohmann::json request, std::vector<int>* fds) { return control().call(std::move(request), fds); }

std::vector<ibv_context*> all_device_contexts() {
  std::lock_guard g(lock);
  if (!devices_opened) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) throw client::ControlError(errno ? errno : ENODEV, "no RDMA devices");
    for (int i = 0; i < n; ++i) {
      if (ibv_context* c = ibv_open_device(list[i])) contexts.push_back(c);
    }
    ibv_free_device_list(list);
    devices_opened = true;
  }
  if (contexts.empty()) throw client::ControlError(ENODEV, "no RDMA devices");
  return contexts;
}

// rdma_cm speaks to one daemon, the first of $UROCE_SOCKET (control()): its IDs are on that daemon's
// device, which the verbs shim names by its socket (ibv_device.dev_path).
ibv_context* device_context() {
  const std::string socket = client::ControlConnection::default_socket_path();
  for (ibv_context* c : all_device_contexts()) {
    if (socket == c->device->dev_path) return c;
  }
  throw client::ControlError(ENODEV, "no RDMA device at " + socket);
}

ibv_pd* device_pd() {
  static ibv_pd* pd = nullptr;
  ibv_context* context = nullptr;
  try {
    context = device_context();
  } catch (const client::ControlError& e) {
    errno = e.error_number();
    return nullptr;
  }
  std::lock_guard g(lock);
  if (pd == nullptr) pd = ibv_alloc_pd(context);  // (errno set when it fails; tried again next time)
  return pd;
}

void remember(Id* id) {
  std::lock_guard g(lock);
  ids[id->handle] = id;
}

Id* find_id(uint32_t handle) {
  std::lock_guard g(lock);
  const auto it = ids.find(handle);
  return it == ids.end() ? nullptr : it->second;
}

void forget(uint32_t handle) {
  std::lock_guard g(lock);
  ids.erase(handle);
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
