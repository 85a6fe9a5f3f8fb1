// UD multicast: ibv_attach_mcast / ibv_detach_mcast and the delivery of datagrams sent to a group.
//
// A multicast datagram carries the multicast QPN (0xFFFFFF) in its BTH and the group in its destination
// IP address. Every QP attached to the group gets a copy, checked as a datagram addressed to it would be
// (P_Key, transport, state, then Q_Key in the UD responder): rxe's rxe_rcv_mcast_pkt. Which groups the port
// must listen to (MAC filter, IGMP/MLD) is the owner's business; multicast_generation() tells it when to look.
#include <cerrno>

#include "transport/device.hpp"
#include "transport/device_impl.hpp"

namespace uroce::transport {

int Device::attach_mcast(uint32_t qpn, const wire::IpAddress& mgid) {
  DeviceImpl& d = *impl_;
  QueuePair* qp = d.find_qp(qpn);
  // ib_attach_mcast's rules; the LID it also checks does not exist on RoCE.
  if (qp == nullptr || qp->type != verbs::QpType::ud || !mgid.is_multicast()) return EINVAL;
  switch (d.multicast_.attach(mgid, qpn)) {
    case MulticastGroups::Attach::attached: ++qp->multicast_groups; return 0;
    case MulticastGroups::Attach::already_attached: return 0;  // rxe: attaching twice changes nothing
    case MulticastGroups::Attach::full: return ENOMEM;
  }
  return EINVAL;
}

int Device::detach_mcast(uint32_t qpn, const wire::IpAddress& mgid) {
  DeviceImpl& d = *impl_;
  QueuePair* qp = d.find_qp(qpn);
  if (qp == nullptr || !d.multicast_.detach(mgid, qpn)) return EINVAL;
  --qp->multicast_groups;
  return 0;
}

std::vector<wire::IpAddress> Device::multicast_groups() const { return impl_->multicast_.groups(); }

bool Device::has_multicast_group(const wire::IpAddress& mgid) const {
  return impl_->multicast_.members(mgid) != nullptr;
}

uint64_t Device::multicast_generation() const { return impl_->multicast_.generation(); }

void DeviceImpl::on_multicast(const wire::Frame& f, size_t frame_size, Nanos now) {
  // Only multicast addresses are ever attached, so a unicast destination finds no members either.
  const std::vector<uint32_t>* members = multicast_.members(f.dst_ip());
  if (members == nullptr) {
    ++counters_.rx_multicast_no_members;
    return;
  }
  // Delivery never attaches or detaches (nothing calls out of the device), so `members` stays valid.
  bool delivered = false;
  for (const uint32_t qpn : *members) {
    if (QueuePair* qp = find_qp(qpn)) delivered |= dispatch(*qp, f, frame_size, now);
  }
  if (delivered) ++counters_.rx_multicast;
}

}  // namespace uroce::transport
