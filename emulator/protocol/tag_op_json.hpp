// A tag matching list operation (ibv_post_srq_ops' struct ibv_ops_wr) as it travels in a post_srq_ops
// request (docs/control-protocol.md): {"wr_id", "opcode" (enum ibv_ops_wr_opcode), "flags" (enum
// ibv_ops_flags), "unexpected_cnt", "handle", "recv_wr_id", "tag", "mask", "sg_list": [[addr, length,
// lkey], ...]}, the ibv_ops_wr fields by their names, ibv_sge's in their order. Missing fields are 0. A
// wrongly typed field or a number that does not fit its field throws (nlohmann::json::exception or
// std::invalid_argument): the request is EINVAL. What the values mean (an opcode or flag the device does not
// know, too many SGEs) is the device's to judge, op by op.
#pragma once

#include <nlohmann/json.hpp>

#include "transport/verbs/work.hpp"

namespace uroce::verbs {
void to_json(nlohmann::json& j, const TagOp& op);
void from_json(const nlohmann::json& j, TagOp& op);
}  // namespace uroce::verbs
