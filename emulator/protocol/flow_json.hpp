// Flow steering rules (ibv_create_flow) as they travel in a create_flow request (docs/control-protocol.md):
// the attribute's type, priority and flags, and its specs, each an object with "type" ("eth", "ipv4",
// "ipv6", "tcp", "udp", "drop") and the fields of the ibv_flow_spec_* filter it came from, by the same
// names, each with a "_mask" twin. Numbers are in host order; MAC and IPv6 addresses are arrays of bytes.
// Missing fields are 0 (match anything); a wrongly typed field, a byte array of the wrong length or an
// unknown spec type throws (nlohmann::json::exception or std::invalid_argument): the request is EINVAL.
#pragma once

#include <nlohmann/json.hpp>

#include "transport/flow/flow_rule.hpp"

namespace uroce::transport::flow {
void to_json(nlohmann::json& j, const FlowRule& rule);
void from_json(const nlohmann::json& j, FlowRule& rule);
}  // namespace uroce::transport::flow
