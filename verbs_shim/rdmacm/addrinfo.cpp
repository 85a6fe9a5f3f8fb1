// rdma_getaddrinfo for IPv4 and IPv6: the addresses come from getaddrinfo(3); what makes them RDMA
// addresses is the port space and QP type. Routes are resolved later by rdma_resolve_route (ai_route stays empty).
#include <netdb.h>

#include <cstring>

#include "verbs_shim/rdmacm/cma.hpp"

namespace {

sockaddr* copy_address(const sockaddr* from, socklen_t len) {
  auto* a = static_cast<sockaddr*>(calloc(1, len));
  if (a != nullptr) std::memcpy(a, from, len);
  return a;
}

// With no family asked for: a passive wildcard is ::, which takes IPv4 connections too (as on Linux, where
// glibc lists it first); a name with both kinds of address is taken as IPv4 ("localhost" is then
// 127.0.0.1, which every uroced port reaches, while ::1 needs an IPv6 address on the port).
const addrinfo* pick(const addrinfo* found, bool passive_wildcard) {
  const int preferred = passive_wildcard ? AF_INET6 : AF_INET;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == preferred) return ai;
  }
  return found;
}

// The port space and QP type a result takes from `hints` (TCP and RC when they name none).
void set_transport(rdma_addrinfo* r, const rdma_addrinfo* hints) {
  r->ai_port_space = hints != nullptr && hints->ai_port_space != 0 ? hints->ai_port_space : RDMA_PS_TCP;
  r->ai_qp_type = hints != nullptr && hints->ai_qp_type != 0 ? hints->ai_qp_type
                  : r->ai_port_space == RDMA_PS_UDP        ? IBV_QPT_UD
                                                           : IBV_QPT_RC;
}

// Copies `len` bytes of `from` into *to (nothing when there are none). False only when memory ran out.
bool set_address(sockaddr*& to, socklen_t& to_len, const sockaddr* from, socklen_t len) {
  if (from == nullptr || len == 0) return true;
  to = copy_address(from, len);
  if (to == nullptr) return false;
  to_len = len;
  return true;
}

// With neither node nor service, the result is the hints' own addresses (librdmacm's behaviour, which
// pyverbs' AddrInfo(src=...) relies on, e.g. to name a multicast group for rdma_join_multicast).
rdma_addrinfo* from_hints(const rdma_addrinfo& hints) {
  auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (r == nullptr) return nullptr;
  r->ai_flags = hints.ai_flags;
  r->ai_family = hints.ai_family;
  set_transport(r, &hints);
  if (!set_address(r->ai_dst_addr, r->ai_dst_len, hints.ai_dst_addr, hints.ai_dst_len) ||
      !set_address(r->ai_src_addr, r->ai_src_len, hints.ai_src_addr, hints.ai_src_len)) {
    rdma_freeaddrinfo(r);
    return nullptr;
  }
  if (r->ai_family == AF_UNSPEC) {
    const sockaddr* any = r->ai_dst_addr != nullptr ? r->ai_dst_addr : r->ai_src_addr;
    if (any != nullptr) r->ai_family = any->sa_family;
  }
  return r;
}

}  // namespace

CMA_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr && hints == nullptr)) {
    errno = EINVAL;
    return -1;
  }
  if (node == nullptr && service == nullptr) {
    *res = from_hints(*hints);
    if (*res == nullptr) errno = ENOMEM;
    return *res != nullptr ? 0 : -1;
  }
  const int family = hints != nullptr ? hints->ai_family : AF_UNSPEC;
  if (family != AF_UNSPEC && family != AF_INET && family != AF_INET6) {
    errno = EAFNOSUPPORT;
    return -1;
  }
  const bool passive = hints != nullptr && (hints->ai_flags & RAI_PASSIVE);
  addrinfo want{};
  want.ai_family = family;
  want.ai_socktype = SOCK_STREAM;
  want.ai_flags = (passive ? AI_PASSIVE : 0) | ((hints != nullptr && (hints->ai_flags & RAI_NUMERICHOST)) ? AI_NUMERICHOST : 0);
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(node, service, &want, &found);
  if (rc != 0) {
    errno = rc == EAI_SYSTEM ? errno : (rc == EAI_MEMORY ? ENOMEM : ENODEV);
    return -1;
  }
  auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (r == nullptr) {
    freeaddrinfo(found);
    errno = ENOMEM;
    return -1;
  }
  r->ai_flags = hints != nullptr ? hints->ai_flags : 0;
  const addrinfo* chosen = pick(found, passive && node == nullptr);
  r->ai_family = chosen->ai_family;
  set_transport(r, hints);
  const socklen_t len = chosen->ai_addrlen;
  sockaddr* a = copy_address(chosen->ai_addr, len);
  freeaddrinfo(found);
  if (a == nullptr) {
    free(r);
    errno = ENOMEM;
    return -1;
  }
  if (passive) {
    r->ai_src_addr = a;
    r->ai_src_len = len;
  } else {
    r->ai_dst_addr = a;
    r->ai_dst_len = len;
    if (hints != nullptr && !set_address(r->ai_src_addr, r->ai_src_len, hints->ai_src_addr, hints->ai_src_len)) {
      rdma_freeaddrinfo(r);
      errno = ENOMEM;
      return -1;
    }
  }
  *res = r;
  return 0;
}

CMA_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res != nullptr) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}
