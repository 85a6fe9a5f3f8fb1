// Memory windows (ibv_alloc_mw / ibv_dealloc_mw). A window is named by its number (its rkey >> 8), which
// the client puts in its BIND_MW work requests; binding happens on the data path (the send ring), where
// the engine lets a session bind only its own windows to its own regions (QueueService::bind_allowed).
#include <cerrno>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

using nlohmann::json;

json VerbsService::alloc_mw(Session& s, uint64_t id, const json& r, std::vector<int>&) {
  const uint32_t pd = need_u32(r, "pd");
  require_owned(s.pds, pd, "protection domain");
  // IBV_MW_TYPE_1 and IBV_MW_TYPE_2 (verbs.h numbers them as verbs::MwType); anything else is EINVAL.
  const uint32_t type = need_u32(r, "type");
  if (type != uint32_t(verbs::MwType::type1) && type != uint32_t(verbs::MwType::type2)) {
    throw ServiceError(EINVAL, "no such memory window type");
  }
  uint32_t rkey = 0;
  engine_call("alloc_mw", [&](EngineContext& c) {
    if (int e = c.device.alloc_mw(pd, verbs::MwType(type), rkey)) return e;
    c.queues.attach_mw(id, rkey >> 8);  // so that no other session's BIND_MW can name it
    return 0;
  });
  s.mws.insert(rkey >> 8);
  return {{"mw", rkey >> 8}, {"rkey", rkey}};
}

// Unbinds the window if it is bound (its region can then be deregistered).
json VerbsService::dealloc_mw(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t mw = need_u32(r, "mw");
  require_owned(s.mws, mw, "memory window");
  engine_call("dealloc_mw", [&](EngineContext& c) {
    if (int e = c.device.dealloc_mw(mw)) return e;
    c.queues.detach_mw(mw);
    return 0;
  });
  s.mws.erase(mw);
  return json::object();
}

}  // namespace uroce::emulator
