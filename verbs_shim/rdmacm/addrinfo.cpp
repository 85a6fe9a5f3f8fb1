// rdma_getaddrinfo for IPv4: the addresses come from getaddrinfo(3); what makes them RDMA addresses is
// the port space and QP type. Routes are resolved later by rdma_resolve_route (ai_route stays empty).
#include <netdb.h>

#include <cstring>

#include "verbs_shim/rdmacm/cma.hpp"

namespace {

sockaddr* copy_address(const addrinfo* ai) {
  auto* a = static_cast<sockaddr*>(calloc(1, sizeof(sockaddr_in)));
  if (a != nullptr) std::memcpy(a, ai->ai_addr, sizeof(sockaddr_in));
  return a;
}

}  // namespace

CMA_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                rdma_addrinfo** res) {
  if (res == nullptr || (node == nullptr && service == nullptr)) {
    errno = EINVAL;
    return -1;
  }
  if (hints != nullptr && hints->ai_family != AF_UNSPEC && hints->ai_family != AF_INET) {
    errno = EAFNOSUPPORT;
    return -1;
  }
  const bool passive = hints != nullptr && (hints->ai_flags & RAI_PASSIVE);
  addrinfo want{};
  want.ai_family = AF_INET;
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
  r->ai_family = AF_INET;
  r->ai_port_space = hints != nullptr && hints->ai_port_space != 0 ? hints->ai_port_space : RDMA_PS_TCP;
  r->ai_qp_type = hints != nullptr && hints->ai_qp_type != 0 ? hints->ai_qp_type
                  : r->ai_port_space == RDMA_PS_UDP        ? IBV_QPT_UD
                                                           : IBV_QPT_RC;
  sockaddr* a = copy_address(found);
  freeaddrinfo(found);
  if (a == nullptr) {
    free(r);
    errno = ENOMEM;
    return -1;
  }
  if (passive) {
    r->ai_src_addr = a;
    r->ai_src_len = sizeof(sockaddr_in);
  } else {
    r->ai_dst_addr = a;
    r->ai_dst_len = sizeof(sockaddr_in);
    if (hints != nullptr && hints->ai_src_addr != nullptr && hints->ai_src_len >= sizeof(sockaddr_in)) {
      auto* s = static_cast<sockaddr*>(calloc(1, sizeof(sockaddr_in)));
      if (s != nullptr) {
        std::memcpy(s, hints->ai_src_addr, sizeof(sockaddr_in));
        r->ai_src_addr = s;
        r->ai_src_len = sizeof(sockaddr_in);
      }
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
