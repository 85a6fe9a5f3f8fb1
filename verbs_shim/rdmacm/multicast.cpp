// Multicast on UD IDs: rdma_join_multicast(_ex) and rdma_leave_multicast, as librdmacm does them. uroced's
// rdma_cm answers a join with a MULTICAST_JOIN event (emulator/daemon/cm_multicast.cpp); taking that event
// attaches the ID's QP to the group (librdmacm's ucma_process_join), unless the join was send-only, and a
// failed attach turns the event into MULTICAST_ERROR. Leaving detaches the QP, then tells uroced.
#include <mutex>
#include <string>

#include "verbs_shim/rdmacm/cma.hpp"

using namespace uroce::rdmacm;
using nlohmann::json;

namespace {

struct Membership {
  uint32_t handle = 0;       // uroced's name for it
  std::string group;         // the address joined, as text
  void* context = nullptr;   // the application's, given back in the join event's private_data
  uint32_t join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  ibv_gid mgid{};            // from the join event: what the QP is attached to
  uint16_t mlid = 0;
  bool attached = false;
};

// Joins and leaves come from the application's threads, join events from whichever thread takes events.
std::mutex memberships_lock;
std::multimap<const Id*, Membership> memberships;

Membership* find(const Id* id, uint32_t handle) {
  for (auto [it, end] = memberships.equal_range(id); it != end; ++it) {
    if (it->second.handle == handle) return &it->second;
  }
  return nullptr;
}

int join(rdma_cm_id* cm_id, const sockaddr* addr, uint32_t join_flags, void* context) {
  if (cm_id == nullptr || addr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  Id* id = to_impl(cm_id);
  return guarded([&] {
    Membership m;
    m.group = ip_text(addr);
    m.context = context;
    m.join_flags = join_flags;
    // Recorded before uroced is asked: the join event may be taken by another thread at once.
    std::unique_lock lock(memberships_lock);
    const json r = call(id, {{"op", "cm_join_multicast"}, {"cm_id", id->handle}, {"addr", m.group},
                         {"join_flags", join_flags}});
    m.handle = r.at("mc").get<uint32_t>();
    memberships.emplace(id, m);
    lock.unlock();
    return id->sync ? complete(id) : 0;
  });
}

}  // namespace

namespace uroce::rdmacm {

bool take_join_event(Id* id, Event& e, const json& m) {
  std::lock_guard lock(memberships_lock);
  Membership* mc = find(id, m.value("mc", 0u));
  if (mc == nullptr) return false;  // left meanwhile
  rdma_ud_param& ud = e.event.param.ud;
  ud.private_data = mc->context;
  ud.private_data_len = 0;
  if (e.event.event != RDMA_CM_EVENT_MULTICAST_JOIN) return true;
  mc->mgid = ud.ah_attr.grh.dgid;
  mc->mlid = ud.ah_attr.dlid;
  if (id->id.qp == nullptr || mc->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) return true;
  if (const int rc = ibv_attach_mcast(id->id.qp, &mc->mgid, mc->mlid)) {
    errno = rc;
    e.event.event = RDMA_CM_EVENT_MULTICAST_ERROR;
    e.event.status = -1;  // librdmacm's rdma_seterrno result; errno says why
    return true;
  }
  mc->attached = true;
  return true;
}

void forget_memberships(const Id* id) {
  std::lock_guard lock(memberships_lock);
  memberships.erase(id);
}

}  // namespace uroce::rdmacm

CMA_EXPORT int rdma_join_multicast(rdma_cm_id* id, sockaddr* addr, void* context) {
  return join(id, addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

CMA_EXPORT int rdma_join_multicast_ex(rdma_cm_id* id, rdma_cm_join_mc_attr_ex* attr, void* context) {
  if (attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED) {
    errno = ENOTSUP;
    return -1;
  }
  if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
      attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED) {
    errno = EINVAL;
    return -1;
  }
  return join(id, attr->addr, attr->join_flags, context);
}

CMA_EXPORT int rdma_leave_multicast(rdma_cm_id* cm_id, sockaddr* addr) {
  if (cm_id == nullptr || addr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  Id* id = to_impl(cm_id);
  return guarded([&] {
    const std::string group = ip_text(addr);
    std::unique_lock lock(memberships_lock);
    auto [it, end] = memberships.equal_range(id);
    while (it != end && it->second.group != group) ++it;
    if (it == end) throw uroce::emulator::client::ControlError(EADDRNOTAVAIL, "not a member of " + group);
    const Membership m = it->second;
    memberships.erase(it);
    lock.unlock();
    if (m.attached && id->id.qp != nullptr) ibv_detach_mcast(id->id.qp, &m.mgid, m.mlid);
    call(id, {{"op", "cm_leave_multicast"}, {"cm_id", id->handle}, {"mc", m.handle}});
    return 0;
  });
}
