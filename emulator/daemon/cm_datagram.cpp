// UD rdma_cm IDs (RDMA_PS_UDP): no connection, only Service ID Resolution. The active side's rdma_connect
// sends a SIDR_REQ (rdma_cm's IP header at the front of its private data, as in a REQ); the listener's
// application sees CONNECT_REQUEST and answers with rdma_accept (SIDR_REP with its QPN and Q_Key) or
// rdma_reject; the active side then sees ESTABLISHED with the peer's QPN, Q_Key and an address handle, or
// UNREACHABLE. Parameters are Linux's rdma_cm (cma.c): Q_Key RDMA_UDP_QKEY, a SIDR_REQ every 4096 ms, 15
// times.
#include <spdlog/spdlog.h>

#include "emulator/daemon/cm_service.hpp"
#include "emulator/protocol/cm_json.hpp"

namespace uroce::emulator {

using nlohmann::json;

namespace {

constexpr cm::Nanos sidr_retry_interval = 4096ull * 1'000'000;    // 1 << (CMA_CM_RESPONSE_TIMEOUT - 8) ms
constexpr uint8_t sidr_max_retries = 15;                          // CMA_MAX_CM_RETRIES

}  // namespace

json CmService::connect_datagram(CmId& id, const json& r) {
  const auto user = private_data(r, cm::sidr_req_private_size - cm::ip_header_size);
  id.qpn = need_field(r, "qp_num") & 0xffffff;
  cm::SidrReq req;
  req.service_id = cm::service_id_of(id.port_space, id.dst_port);
  cm::write_ip_header(req.private_data.data(), {id.src_port, id.src, id.dst});
  std::copy(user.begin(), user.end(), req.private_data.begin() + cm::ip_header_size);
  id.comm_id = cm_.sidr_request(req, {id.dst, wire::gsi_qpn, id.sl}, sidr_retry_interval, sidr_max_retries, now());
  id.state = CmIdState::connecting;
  return json::object();
}

json CmService::accept_datagram(CmId& id, const json& r) {
  cm::SidrRep rep;
  rep.status = cm::SidrStatus::valid;
  rep.qpn = need_field(r, "qp_num") & 0xffffff;
  rep.qkey = rdma_udp_qkey;
  cm::set_private_data(rep.private_data, private_data(r, cm::sidr_rep_private_size));
  const int rc = cm_.sidr_reply(id.comm_id, rep, now());
  if (rc != 0) throw ServiceError(rc, "the request is gone");
  id.qpn = rep.qpn;
  id.comm_id = 0;
  id.state = CmIdState::connected;  // nothing follows on the wire: the peer sends when it has our QPN
  return json::object();
}

json CmService::reject_datagram(CmId& id, const json& r) {
  cm::SidrRep rep;
  rep.status = cm::SidrStatus::rejected;
  cm::set_private_data(rep.private_data, private_data(r, cm::sidr_rep_private_size));
  const int rc = cm_.sidr_reply(id.comm_id, rep, now());
  if (rc != 0) throw ServiceError(rc, "the request is gone");
  id.comm_id = 0;
  id.state = CmIdState::disconnected;
  return json::object();
}

// What librdmacm's ucma_init_ud_qp moves a UD QP with: INIT with the port's P_Key index and the Q_Key, RTR,
// RTS from PSN 0. Any time after the ID has a device; nothing depends on the peer.
json CmService::datagram_qp_attr(const std::string& state) const {
  if (state == "init") return {{"qp_state", "init"}, {"pkey_index", 0}, {"port_num", 1}, {"qkey", rdma_udp_qkey}};
  if (state == "rtr") return {{"qp_state", "rtr"}};
  if (state == "rts") return {{"qp_state", "rts"}, {"sq_psn", 0}};
  throw ServiceError(EINVAL, "state must be init, rtr or rts");
}

// A SIDR_REQ for a service someone listens on: as a REQ, a new ID and CONNECT_REQUEST for the listener,
// with the private data after rdma_cm's header. No listener for its address: SIDR_REP "rejected", as
// Linux's CM answers a SIDR_REQ its rdma_cm refused.
void CmService::on_sidr_request(const cm::CmEvent& e) {
  const cm::SidrReq& req = e.sidr_req;
  cm::IpHeader ip;
  const uint32_t listener = find_listener(req.service_id, req.private_data, ip);
  if (listener == 0) {
    spdlog::debug("rdma_cm: SIDR_REQ for port {} from {}: nobody listens", uint16_t(req.service_id),
                  wire::to_string(e.peer.gid));
    cm::SidrRep rep;
    rep.status = cm::SidrStatus::rejected;
    cm_.sidr_reply(e.comm_id, rep, now());
    return;
  }
  const uint32_t n = new_passive_id(listener, e.comm_id, ip, uint16_t(req.service_id));
  const std::span<const uint8_t> user(req.private_data.data() + cm::ip_header_size,
                                      cm::sidr_req_private_size - cm::ip_header_size);
  json event = connect_request_event(n);
  event["ud"] = {{"private_data", protocol::to_hex(user)}};
  queue_event(n, RdmaCmEvent::connect_request, 0, std::move(event));
}

// The answer to our SIDR_REQ: ESTABLISHED with what the application needs to send to the peer (its QPN and
// Q_Key, and the address: the client builds ah_attr from it), or UNREACHABLE with the SIDR status, as
// Linux's cma_sidr_rep_handler reports a refusal.
void CmService::on_sidr_response(uint32_t n, const cm::CmEvent& e) {
  CmId& id = ids_.at(n);
  const cm::SidrRep& rep = e.sidr_rep;
  id.comm_id = 0;
  if (rep.status != cm::SidrStatus::valid) {
    id.state = CmIdState::disconnected;
    queue_event(n, RdmaCmEvent::unreachable, int(rep.status),
                {{"ud", {{"private_data", protocol::to_hex(rep.private_data)}}}});
    return;
  }
  id.remote_qpn = rep.qpn;
  id.state = CmIdState::connected;
  queue_event(n, RdmaCmEvent::established, 0,
              {{"ud",
                {{"private_data", protocol::to_hex(rep.private_data)},
                 {"qp_num", rep.qpn},
                 {"qkey", rep.qkey},
                 {"dgid", wire::to_string(id.dst)},
                 {"sgid_index", sgid_index(id.src)},
                 {"hop_limit", 64},
                 {"traffic_class", id.tos},
                 {"sl", id.sl}}}});
}

}  // namespace uroce::emulator
