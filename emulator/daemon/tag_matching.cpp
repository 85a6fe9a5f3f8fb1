// Tag matching SRQs, served (transport/qp/tag_matching.cpp has the device's side): create_srq with a "tm"
// object makes one (ibv_create_srq_ex with IBV_SRQT_TM), and post_srq_ops carries out ibv_post_srq_ops'
// list operations on one of the session's, in order, up to the first the device refuses.
//
// The operations run on the engine in one go and their completions are in the SRQ's CQ ring before the
// reply leaves: ibv_post_srq_ops returns with ADD's handles written, and the application may poll for the
// completions at once (a NIC would take a moment, which no application can tell from no time).
#include <cerrno>
#include <string>

#include <spdlog/spdlog.h>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "emulator/protocol/tag_op_json.hpp"

namespace uroce::emulator {

using nlohmann::json;

// {"tm": {"max_num_tags", "max_ops"}, "cq"} within a create_srq request.
std::optional<VerbsService::TmSrqRequest> VerbsService::tm_srq_request(Session& s, const json& r) {
  const auto tm = r.find("tm");
  if (tm == r.end()) return std::nullopt;
  if (!tm->is_object()) throw ServiceError(EINVAL, "tm: an object with max_num_tags and max_ops expected");
  TmSrqRequest t;
  t.max_num_tags = need_u32(*tm, "max_num_tags");
  t.max_ops = need_u32(*tm, "max_ops");
  // The CQ takes the list operations' completions and every receive of the SRQ's QPs: it must be given.
  t.cq = need_u32(r, "cq");
  require_owned(s.cqs, t.cq, "completion queue");
  return t;
}

namespace {

// Whether the session lets `op` reach the device: each SGE must name one of its regions (another
// session's is reported as none, as everywhere).
bool names_own_regions(const verbs::TagOp& op, const std::set<uint32_t>& mrs) {
  for (const verbs::Sge& sge : op.sg_list) {
    if (!mrs.contains(sge.lkey)) return false;
  }
  return true;
}

}  // namespace

// {"srq", "ops": [list operation, ...] (protocol/tag_op_json.hpp)} -> {"handles": [one per operation
// carried out: ADD's handle, 0 for the others]}, and "failed": {"index", "errno", "error"} for the operation
// that was refused (those after it were not tried).
json VerbsService::post_srq_ops(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t srqn = need_u32(r, "srq");
  require_owned(s.srqs, srqn, "shared receive queue");
  const json& list = r.at("ops");
  if (!list.is_array()) throw ServiceError(EINVAL, "ops: an array expected");
  std::vector<verbs::TagOp> ops;
  ops.reserve(list.size());
  for (const json& op : list) ops.push_back(op.get<verbs::TagOp>());  // malformed: EINVAL, nothing done
  // The operations before the first one naming a foreign region are carried out, as the device carries
  // out those before the first it refuses.
  size_t allowed = 0;
  while (allowed < ops.size() && names_own_regions(ops[allowed], s.mrs)) ++allowed;
  std::vector<uint32_t> handles;
  int error = 0;
  engine_.run_on_engine([&](EngineContext& c) {
    for (size_t i = 0; i < allowed && error == 0; ++i) {
      uint32_t handle = 0;
      error = c.device.post_srq_op(srqn, ops[i], handle, c.now);
      if (error == 0) handles.push_back(handle);
    }
    c.queues.deliver_completions();
  });
  json reply = {{"handles", handles}};
  const char* why = nullptr;
  if (error == ENOMEM) {
    why = "the tag list is full (max_num_tags)";
  } else if (error != 0) {
    why = "refused by the device (not a tag matching SRQ, an unknown opcode or flag, or more SGEs than max_sge)";
  } else if (allowed < ops.size()) {
    error = EINVAL;
    why = "an SGE names no memory region";
  }
  if (why != nullptr) {
    spdlog::debug("client {}: post_srq_ops on SRQ {:#x}: operation {}: {}", s.pid, srqn, handles.size(), why);
    reply["failed"] = {{"index", handles.size()}, {"errno", error}, {"error", why}};
  }
  return reply;
}

}  // namespace uroce::emulator
