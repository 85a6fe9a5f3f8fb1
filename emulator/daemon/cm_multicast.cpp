// Multicast on UD rdma_cm IDs (RDMA_PS_UDP): rdma_join_multicast and rdma_leave_multicast, as Linux's
// rdma_cm does them on a RoCE port (cma_iboe_join_multicast). No SA is asked: the join is answered at once
// with a MULTICAST_JOIN event whose ud parameters say how to send to the group (destination QP 0xFFFFFF,
// the ID's Q_Key, an address handle to the group's GID). The group's GID is the address itself for IPv6
// and ::ffff:a.b.c.d for IPv4 (RoCEv2's mapping). librdmacm then attaches the ID's QP (ibv_attach_mcast),
// and it is that attachment that makes the port take the group's frames and report membership (IGMP):
// a send-only join attaches nothing, and on Linux sends no IGMP report either.
//
// Linux refuses IPv6 groups on RoCEv2 (ENOTSUPP); uroce takes them, its transport delivers both.
#include <spdlog/spdlog.h>

#include "emulator/daemon/cm_service.hpp"
#include "emulator/daemon/source_gid.hpp"

namespace uroce::emulator {

using nlohmann::json;

namespace {

constexpr uint32_t multicast_qpn = 0xffffff;
constexpr uint8_t multicast_hop_limit = 64;  // IPV6_DEFAULT_HOPLIMIT, Linux's choice for RoCEv2 groups

}  // namespace

json CmService::join_multicast(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  const uint32_t n = need_field(r, "cm_id");
  if (!is_datagram(id)) throw ServiceError(EINVAL, "only UD IDs (RDMA_PS_UDP) join multicast groups");
  if (!id.bound && id.state != CmIdState::addr_resolved) {
    throw ServiceError(EINVAL, "the ID has no address yet: bind or resolve it first");
  }
  const wire::IpAddress group = need_ip(r, "addr");
  if (!group.is_multicast()) throw ServiceError(EINVAL, wire::to_string(group) + " is not a multicast address");
  if (is_wildcard(id.src)) {
    const auto source = source_gid_index(port_.gids, group);
    if (!source) throw ServiceError(EADDRNOTAVAIL, "the port has no address of the group's family");
    id.src = port_.gids[*source];
  } else if (id.src.is_v4() != group.is_v4()) {
    throw ServiceError(EINVAL,
                       wire::to_string(id.src) + " and " + wire::to_string(group) + " are of different families");
  }
  const uint32_t handle = next_membership_++;
  id.groups.emplace(handle, group);
  spdlog::debug("rdma_cm: ID {} joins {}", n, wire::to_string(group));
  queue_event(n, RdmaCmEvent::multicast_join, 0,
              {{"mc", handle},
               {"ud",
                {{"qp_num", multicast_qpn},
                 {"qkey", rdma_udp_qkey},
                 {"dgid", wire::to_string(group)},
                 {"sgid_index", sgid_index(id.src)},
                 {"hop_limit", multicast_hop_limit},
                 {"traffic_class", id.tos},
                 {"sl", service_level_of(id)}}}});
  return {{"mc", handle}};
}

json CmService::leave_multicast(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  const uint32_t n = need_field(r, "cm_id");
  const uint32_t handle = need_field(r, "mc");
  if (id.groups.erase(handle) == 0) throw ServiceError(EADDRNOTAVAIL, "the ID has no such membership");
  // A join event not yet taken is withdrawn with its membership, as librdmacm waits for it before leaving.
  const auto ch = channels_.find(id.channel);
  if (ch != channels_.end()) {
    std::erase_if(ch->second.events, [&](const json& e) {
      return e.value("cm_id", 0u) == n && e.value("mc", 0u) == handle;
    });
  }
  return json::object();
}

}  // namespace uroce::emulator
