#include "emulator/protocol/verbs_json.hpp"

#include <arpa/inet.h>

#include <stdexcept>

namespace uroce::wire {

void to_json(nlohmann::json& j, const IpAddress& a) { j = to_string(a); }

void from_json(const nlohmann::json& j, IpAddress& a) {
  const std::string s = j.get<std::string>();
  uint8_t v4[4];
  if (inet_pton(AF_INET, s.c_str(), v4) == 1) {
    a = IpAddress::from_v4_bytes(v4);
    return;
  }
  uint8_t v6[16];
  if (inet_pton(AF_INET6, s.c_str(), v6) == 1) {
    a = IpAddress::from_v6_bytes(v6);
    return;
  }
  throw std::invalid_argument("not an IP address: " + s);
}

void to_json(nlohmann::json& j, const MacAddress& a) { j = to_string(a); }

}  // namespace uroce::wire

namespace uroce {
namespace {
template <class T>
void get_if(const nlohmann::json& j, const char* key, T& out) {
  if (auto it = j.find(key); it != j.end()) out = it->get<T>();
}
template <class E>
void get_enum_if(const nlohmann::json& j, const char* key, E& out) {
  if (auto it = j.find(key); it != j.end()) out = E(it->get<uint32_t>());
}
}  // namespace
}  // namespace uroce

namespace uroce::verbs {

void to_json(nlohmann::json& j, const AddressVector& av) {
  j = {{"dgid", av.dgid}, {"sgid_index", av.sgid_index}, {"flow_label", av.flow_label},
       {"hop_limit", av.hop_limit}, {"traffic_class", av.traffic_class}, {"sl", av.service_level}};
}

void from_json(const nlohmann::json& j, AddressVector& av) {
  get_if(j, "dgid", av.dgid);
  get_if(j, "sgid_index", av.sgid_index);
  get_if(j, "flow_label", av.flow_label);
  get_if(j, "hop_limit", av.hop_limit);
  get_if(j, "traffic_class", av.traffic_class);
  get_if(j, "sl", av.service_level);
}

void to_json(nlohmann::json& j, const QpAttr& a) {
  j = {{"qp_state", uint32_t(a.qp_state)},
       {"cur_qp_state", uint32_t(a.cur_qp_state)},
       {"path_mtu", uint32_t(a.path_mtu)},
       {"qkey", a.qkey},
       {"rq_psn", a.rq_psn},
       {"sq_psn", a.sq_psn},
       {"dest_qp_num", a.dest_qp_num},
       {"qp_access_flags", a.qp_access_flags},
       {"cap", a.cap},
       {"ah_attr", a.ah_attr},
       {"pkey_index", a.pkey_index},
       {"en_sqd_async_notify", a.en_sqd_async_notify},
       {"sq_draining", a.sq_draining},
       {"max_rd_atomic", a.max_rd_atomic},
       {"max_dest_rd_atomic", a.max_dest_rd_atomic},
       {"min_rnr_timer", a.min_rnr_timer},
       {"port_num", a.port_num},
       {"timeout", a.timeout},
       {"retry_cnt", a.retry_cnt},
       {"rnr_retry", a.rnr_retry},
       {"rate_limit", a.rate_limit},
       {"max_burst_sz", a.max_burst_sz}};
}

void from_json(const nlohmann::json& j, QpAttr& a) {
  get_enum_if(j, "qp_state", a.qp_state);
  get_enum_if(j, "cur_qp_state", a.cur_qp_state);
  get_enum_if(j, "path_mtu", a.path_mtu);
  get_if(j, "qkey", a.qkey);
  get_if(j, "rq_psn", a.rq_psn);
  get_if(j, "sq_psn", a.sq_psn);
  get_if(j, "dest_qp_num", a.dest_qp_num);
  get_if(j, "qp_access_flags", a.qp_access_flags);
  get_if(j, "cap", a.cap);
  get_if(j, "ah_attr", a.ah_attr);
  get_if(j, "pkey_index", a.pkey_index);
  get_if(j, "en_sqd_async_notify", a.en_sqd_async_notify);
  get_if(j, "sq_draining", a.sq_draining);
  get_if(j, "max_rd_atomic", a.max_rd_atomic);
  get_if(j, "max_dest_rd_atomic", a.max_dest_rd_atomic);
  get_if(j, "min_rnr_timer", a.min_rnr_timer);
  get_if(j, "port_num", a.port_num);
  get_if(j, "timeout", a.timeout);
  get_if(j, "retry_cnt", a.retry_cnt);
  get_if(j, "rnr_retry", a.rnr_retry);
  get_if(j, "rate_limit", a.rate_limit);
  get_if(j, "max_burst_sz", a.max_burst_sz);
}

}  // namespace uroce::verbs

namespace uroce::transport {

void to_json(nlohmann::json& j, const DeviceCounters& c) {
  j = {{"rx_frames", c.rx_frames},
       {"rx_malformed", c.rx_malformed},
       {"rx_bad_icrc", c.rx_bad_icrc},
       {"rx_placed_early", c.rx_placed_early},
       {"rx_not_roce", c.rx_not_roce},
       {"rx_unknown_qp", c.rx_unknown_qp},
       {"rx_bad_pkey", c.rx_bad_pkey},
       {"rx_bad_qkey", c.rx_bad_qkey},
       {"rx_wrong_transport", c.rx_wrong_transport},
       {"rx_qp_not_ready", c.rx_qp_not_ready},
       {"rx_no_receive", c.rx_no_receive},
       {"rx_multicast", c.rx_multicast},
       {"rx_multicast_no_members", c.rx_multicast_no_members},
       {"rx_ecn_ce", c.rx_ecn_ce},
       {"cnp_sent", c.cnp_sent},
       {"rx_cnp", c.rx_cnp},
       {"rate_cuts", c.rate_cuts},
       {"paced_stops", c.paced_stops},
       {"rx_duplicates", c.rx_duplicates},
       {"rx_out_of_sequence", c.rx_out_of_sequence},
       {"tx_packets", c.tx_packets},
       {"tx_retransmitted", c.tx_retransmitted},
       {"naks_sent", c.naks_sent},
       {"naks_received", c.naks_received},
       {"rnr_naks_sent", c.rnr_naks_sent},
       {"rnr_naks_received", c.rnr_naks_received},
       {"receive_queues_low", c.receive_queues_low},
       {"timeouts", c.timeouts},
       {"cq_overflows", c.cq_overflows},
       {"rx_raw", c.rx_raw},
       {"rx_raw_no_receive", c.rx_raw_no_receive},
       {"rx_raw_dropped_by_rule", c.rx_raw_dropped_by_rule},
       {"tx_raw", c.tx_raw},
       {"tx_raw_bad_length", c.tx_raw_bad_length}};
}

}  // namespace uroce::transport
