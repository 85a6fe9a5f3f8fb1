// UD multicast: ibv_attach_mcast / ibv_detach_mcast. uroced's transport delivers a datagram sent to a group
// (destination QP 0xFFFFFF) to every QP attached to it, and its port joins the group on the wire (IGMP)
// while any QP is attached. The kernel's ib_attach_mcast checks are uroced's: a UD QP and a multicast GID
// (ff00::/8, or ::ffff:224.0.0.0/4 for IPv4), else EINVAL. The LID means nothing on Ethernet and is ignored,
// as the kernel ignores it on a RoCE port.
#include "shim.hpp"

namespace {

uroce::wire::IpAddress group_of(const ibv_gid* gid) { return uroce::wire::IpAddress::from_v6_bytes(gid->raw); }

}  // namespace

using namespace uroce::shim;

SHIM_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) {
  if (qp == nullptr || gid == nullptr) return errno = EINVAL;
  return guarded("attach_mcast",
                 [&] { to_shim(qp->context)->impl->attach_mcast(*to_shim(qp)->impl, group_of(gid)); });
}

SHIM_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) {
  if (qp == nullptr || gid == nullptr) return errno = EINVAL;
  return guarded("detach_mcast",
                 [&] { to_shim(qp->context)->impl->detach_mcast(*to_shim(qp)->impl, group_of(gid)); });
}
