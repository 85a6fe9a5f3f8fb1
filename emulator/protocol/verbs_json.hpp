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
// Same names as the members: nlohmann's macro writes both directions (a missing field keeps its default).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(QpCap, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
                                                max_inline_data)
void to_json(nlohmann::json& j, const QpAttr& a);
void from_json(const nlohmann::json& j, QpAttr& a);
}  // namespace uroce::verbs

namespace uroce::transport {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DeviceLimits, max_qp, max_cq, max_mr, max_srq, max_ah, max_pd,
                                                max_cqe, max_qp_wr, max_sge, max_inline_data, max_srq_wr,
                                                max_qp_rd_atom, max_mr_size, max_mcast_grp, max_mcast_qp_attach,
                                                max_total_mcast_qp_attach, max_num_tags, max_tm_ops,
                                                max_rndv_hdr_size, max_tm_sge)
void to_json(nlohmann::json& j, const DeviceCounters& c);
}  // namespace uroce::transport
