// ibv_import_pd, ibv_import_mr, ibv_import_dm: a context attached to a session (ibv_import_device,
// control_adapter.hpp) asks what one of the session's objects is, to build its own handle on it, as the
// kernel answers an import from the uverbs file's object table. The object stays the session's: freeing
// it through any context frees it for all, and unimporting only drops the asking context's handle.
#include <cerrno>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

using nlohmann::json;

json VerbsService::import_pd(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t pd = need_u32(r, "pd");
  require_owned(s.pds, pd, "protection domain");
  return {{"pd", pd}};
}

// The region's PD, keys, address (its iova: where it starts as the application names it), length and
// access rights.
json VerbsService::import_mr(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t key = need_u32(r, "key");
  require_owned(s.mrs, key, "memory region");
  transport::Device::RegionInfo info;
  engine_call("import_mr", [&](EngineContext& c) { return c.device.query_mr(key, info); });
  return {{"key", key}, {"pd", info.pd}, {"iova", info.iova}, {"length", info.length}, {"access", info.access}};
}

// The allocation's memfd again, for the asking context to map, and its length.
json VerbsService::import_dm(Session& s, uint64_t, const json& r, std::vector<int>& fds) {
  const uint32_t number = need_u32(r, "dm");
  const auto it = s.dms.find(number);
  if (it == s.dms.end()) throw ServiceError(EINVAL, "no such device memory");
  fds.push_back(it->second.region.dup_fd());
  return {{"dm", number}, {"length", it->second.length}, {"size", it->second.region.size()}};
}

}  // namespace uroce::emulator
