// The verbs types as they travel in control messages (JSON, docs/control-protocol.md): field names are
// the ibv_* struct fields', so a message reads like the call that caused it. Missing fields keep their
// defaults; wrongly typed ones throw nlohmann::json::exception, which the server turns into EINVAL.
#pragma once

#include <nlohmann/json.hpp>

#include "transport/device.hpp"
#include "transport/verbs/work.hpp"
#include "transport/wire/address.hpp"

namespace uroce::wire {
void to_json(nlohmann::json& j, const IpAddress& a);    // "10.0.0.1" or "fe80::1"
void from_json(const nlohmann::json& j, IpAddress& a);  // throws std::invalid_argument on bad text
void to_json(nlohmann::json& j, const MacAddress& a);
}  // namespace uroce::wire

namespace uroce::verbs {
void to_json(nlohmann::json& j, const AddressVector& av);
void from_json(const nlohmann::json& j, AddressVector& av);
void to_json(nlohmann::json& j, const QpCap& c);
void from_json(const nlohmann::json& j, QpCap& c);
void to_json(nlohmann::json& j, const QpAttr& a);
void from_json(const nlohmann::json& j, QpAttr& a);
}  // namespace uroce::verbs

namespace uroce::transport {
void to_json(nlohmann::json& j, const DeviceLimits& l);
void from_json(const nlohmann::json& j, DeviceLimits& l);
void to_json(nlohmann::json& j, const DeviceCounters& c);
}  // namespace uroce::transport
