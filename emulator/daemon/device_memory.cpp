// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_reg_dm_mr): memory that belongs to the NIC, not to the
// host process, as a ConnectX's on-chip MEMIC does. uroced's "chip" is the daemon, so device memory is a
// memfd the daemon creates and owns; the client maps it to copy in and out (ibv_memcpy_to_dm /
// _from_dm), as mlx5 maps the MEMIC BAR into the process, and a region registered on it (always zero
// based) is reached by the transport in place, like any shared-pages region. The whole device has
// device_memory_bytes of it, shared by every client, as a NIC's MEMIC is: an allocation that does not
// fit in what is left is ENOMEM.
#include <cerrno>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/shared_memory.hpp"
#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

using nlohmann::json;

// alloc_dm (length, log_align_req): the allocation's number and its memfd. Allocations start on a page
// of their own, so any alignment up to a page (log_align_req <= 12) holds; a larger one is EINVAL.
json VerbsService::alloc_dm(Session& s, uint64_t, const json& r, std::vector<int>& fds) {
  const uint64_t length = need_u64(r, "length");
  const uint32_t log_align = opt_u32(r, "log_align_req", 0);
  if (length == 0 || length > device_memory_bytes) throw ServiceError(EINVAL, "device memory length out of range");
  if (log_align > 12) throw ServiceError(EINVAL, "device memory alignment above a page");
  const uint64_t charged = protocol::round_to_pages(length);  // what the region will take, and be given back
  if (charged > device_memory_bytes - device_memory_in_use_) throw ServiceError(ENOMEM, "device memory exhausted");
  DeviceMemory dm{protocol::SharedRegion::create("uroce-dm", charged), length, 0};
  const uint32_t number = next_dm_++;
  fds.push_back(dm.region.dup_fd());
  device_memory_in_use_ += charged;
  s.dms.emplace(number, std::move(dm));
  return {{"dm", number}, {"length", length}, {"size", charged}};
}

json VerbsService::free_dm(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t number = need_u32(r, "dm");
  const auto it = s.dms.find(number);
  if (it == s.dms.end()) throw ServiceError(EINVAL, "no such device memory");
  if (it->second.regions != 0) throw ServiceError(EBUSY, "memory regions are registered on the device memory");
  release_dm(s, it);
  return json::object();
}

void VerbsService::release_dm(Session& s, std::map<uint32_t, DeviceMemory>::iterator it) {
  device_memory_in_use_ -= it->second.region.size();
  s.dms.erase(it);
}

// reg_dm_mr (pd, dm, offset, length, access): a region on [offset, offset+length) of the allocation. As
// ibv_reg_dm_mr requires, the access includes IBV_ACCESS_ZERO_BASED: the region's addresses count from 0.
json VerbsService::reg_dm_mr(Session& s, uint64_t id, const json& r, std::vector<int>&) {
  const uint32_t pd = need_u32(r, "pd");
  require_owned(s.pds, pd, "protection domain");
  const uint32_t number = need_u32(r, "dm");
  const auto it = s.dms.find(number);
  if (it == s.dms.end()) throw ServiceError(EINVAL, "no such device memory");
  const uint64_t offset = need_u64(r, "offset"), length = need_u64(r, "length");
  const uint32_t access = need_u32(r, "access");
  if (!(access & verbs::access_zero_based)) throw ServiceError(EINVAL, "device memory regions are zero based");
  DeviceMemory& dm = it->second;
  if (offset > dm.length || length > dm.length - offset) throw ServiceError(EINVAL, "outside the device memory");
  auto memory = std::make_shared<SharedMemory>(dm.region.fd(), offset, length, s.liveness);
  uint32_t key = 0;
  engine_call("reg_dm_mr", [&](EngineContext& c) {
    if (int e = c.device.reg_mr(pd, 0, length, access & ~uint32_t(verbs::access_zero_based), memory, 0, key)) return e;
    c.queues.attach_mr(id, key);
    return 0;
  });
  s.mrs.insert(key);
  s.dm_regions[key] = number;
  ++dm.regions;
  return {{"lkey", key}, {"rkey", key}};
}

// dereg_mr of a device-memory region: the allocation may be freed once none is left on it.
void VerbsService::forget_dm_region(Session& s, uint32_t key) {
  const auto it = s.dm_regions.find(key);
  if (it == s.dm_regions.end()) return;
  if (auto dm = s.dms.find(it->second); dm != s.dms.end()) --dm->second.regions;
  s.dm_regions.erase(it);
}

}  // namespace uroce::emulator
