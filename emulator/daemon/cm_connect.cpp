// rdma_cm connections: connect/accept/reject/establish/disconnect become IB CM calls, and what the CM
// reports becomes rdma_cm events. Parameters follow Linux's rdma_cm for RoCE (cma.c), so that a Linux peer
// sees the REQ and REP it would get from another Linux host.
#include <spdlog/spdlog.h>

#include "emulator/daemon/cm_service.hpp"
#include "emulator/daemon/source_gid.hpp"
#include "emulator/protocol/cm_json.hpp"
#include "transport/cm/rdma_cm_header.hpp"

namespace uroce::emulator {

using nlohmann::json;

namespace {

constexpr uint8_t cm_response_timeout = 20;  // CMA_CM_RESPONSE_TIMEOUT (4.3 s)
constexpr uint8_t max_cm_retries = 15;       // CMA_MAX_CM_RETRIES
constexpr uint8_t packet_lifetime = 18;      // CMA_IBOE_PACKET_LIFETIME
constexpr uint8_t ca_ack_delay = 15;         // our target ACK delay in REP (rxe's value)

// Linux's cm_ack_timeout: the local ACK timeout for a path, from the CA's ACK delay and the packet life.
uint8_t ack_timeout(uint8_t ca_delay, uint8_t life) {
  unsigned t = life + 1u;
  if (t >= ca_delay) {
    t += (ca_delay >= t - 1) ? 1 : 0;
  } else {
    t = ca_delay + ((t >= ca_delay - 1u) ? 1 : 0);
  }
  return uint8_t(std::min(31u, t));
}

// The connection parameters of an event, as the receiving side sees them (rdma_conn_param): what the peer
// will issue is what we answer, and the reverse.
json conn_param(std::span<const uint8_t> data, uint8_t peer_responder_resources, uint8_t peer_initiator_depth,
                uint8_t retry, uint8_t rnr_retry, bool srq, uint32_t qpn) {
  return {{"private_data", protocol::to_hex(data)}, {"responder_resources", peer_initiator_depth},
          {"initiator_depth", peer_responder_resources}, {"retry_count", retry}, {"rnr_retry_count", rnr_retry},
          {"srq", srq}, {"qp_num", qpn}};
}

}  // namespace

std::vector<uint8_t> private_data(const json& r, size_t room) {
  const auto bytes = protocol::from_hex(r.value("private_data", std::string()));
  if (!bytes) throw ServiceError(EINVAL, "private_data is not hex");
  if (bytes->size() > room) throw ServiceError(EINVAL, "private_data longer than " + std::to_string(room) + " bytes");
  return *bytes;
}

// --- requests ---------------------------------------------------------------------------------------------

json CmService::connect(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.state != CmIdState::route_resolved) throw ServiceError(EINVAL, "the route is not resolved");
  if (is_datagram(id)) return connect_datagram(id, r);
  const auto user = private_data(r, cm::req_private_size - cm::ip_header_size);
  id.qpn = need_field(r, "qp_num") & 0xffffff;
  // The connecting QP's type, when the client says (RC 2, UC 3, XRC initiator 9): the REQ's transport.
  if (const uint32_t type = r.value("qp_type", 0u); type == 2 || type == 3 || type == 9) id.qp_type = uint8_t(type);
  // Each side picks the PSN it will receive from: as Linux's CM (and rxe's traffic, e.g. the rping
  // capture) has it, a REQ's starting PSN is what the passive side sends with, a REP's what the active
  // side sends with.
  id.rq_psn = rng_() & 0xffffff;
  id.responder_resources = uint8_t(r.value("responder_resources", 0u));
  id.initiator_depth = uint8_t(r.value("initiator_depth", 0u));
  id.retry_count = uint8_t(std::min(7u, r.value("retry_count", 7u)));
  id.rnr_retry_count = uint8_t(std::min(7u, r.value("rnr_retry_count", 7u)));
  id.local_ack_timeout = id.ack_timeout.value_or(ack_timeout(ca_ack_delay, packet_lifetime));

  cm::Req req;
  req.service_id = cm::service_id_of(id.port_space, id.dst_port);
  req.local_qpn = id.qpn;
  req.responder_resources = id.responder_resources;
  req.initiator_depth = id.initiator_depth;
  req.remote_cm_response_timeout = cm_response_timeout;
  req.local_cm_response_timeout = cm_response_timeout;
  // IBV_QPT_UC is 3, IBV_QPT_XRC_SEND 9: an XRC initiator asks for an extended transport, XRC.
  req.service_type = id.qp_type == 3   ? cm::ServiceType::uc
                     : id.qp_type == 9 ? cm::ServiceType::extended
                                       : cm::ServiceType::rc;
  if (id.qp_type == 9) req.extended_transport = cm::extended_transport_xrc;
  req.starting_psn = id.rq_psn;
  req.retry_count = id.retry_count;
  req.rnr_retry_count = id.rnr_retry_count;
  req.path_mtu = id.path_mtu;
  req.max_cm_retries = max_cm_retries;
  req.srq = r.value("srq", false);
  req.primary.local_gid = id.src;
  req.primary.remote_gid = id.dst;
  req.primary.traffic_class = id.tos;
  req.primary.sl = id.sl;
  req.primary.hop_limit = 64;
  req.primary.local_ack_timeout = id.local_ack_timeout;
  cm::write_ip_header(req.private_data.data(), {id.src_port, id.src, id.dst});
  std::copy(user.begin(), user.end(), req.private_data.begin() + cm::ip_header_size);
  id.comm_id = cm_.connect(req, {id.dst, wire::gsi_qpn, id.sl}, now());
  id.state = CmIdState::connecting;
  return json::object();
}

json CmService::accept(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.state != CmIdState::connect_request) throw ServiceError(EINVAL, "no connection request to accept");
  if (is_datagram(id)) return accept_datagram(id, r);
  const auto data = private_data(r, cm::rep_private_size);
  id.qpn = need_field(r, "qp_num") & 0xffffff;
  // What the application grants, never more than the peer asked for (the REQ's initiator depth bounds our
  // responder resources, its responder resources our initiator depth).
  id.responder_resources = uint8_t(std::min<uint32_t>(r.value("responder_resources", 0u), id.responder_resources));
  id.initiator_depth = uint8_t(std::min<uint32_t>(r.value("initiator_depth", 0u), id.initiator_depth));
  cm::Rep rep;
  if (id.qp_type == 10) {
    // An XRC target answers with its QPN as the EE context and an SRQ (Linux's cm_format_rep).
    rep.local_eecn = id.qpn;
    rep.srq = true;
  } else {
    rep.local_qpn = id.qpn;
    rep.srq = r.value("srq", false);
  }
  rep.starting_psn = id.rq_psn;
  rep.responder_resources = id.responder_resources;
  rep.initiator_depth = id.initiator_depth;
  rep.target_ack_delay = ca_ack_delay;
  rep.rnr_retry_count = uint8_t(std::min(7u, r.value("rnr_retry_count", 7u)));
  cm::set_private_data(rep.private_data, data);
  const int rc = cm_.accept(id.comm_id, rep, now());
  if (rc != 0) throw ServiceError(rc, "the connection request is gone");
  id.state = CmIdState::accepting;
  return json::object();
}

json CmService::reject(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.state != CmIdState::connect_request && id.state != CmIdState::response_received) {
    throw ServiceError(EINVAL, "nothing to reject");
  }
  if (is_datagram(id)) return reject_datagram(id, r);
  const auto data = private_data(r, cm::rej_private_size);
  const int rc = cm_.reject(id.comm_id, uint16_t(cm::RejectReason::consumer_defined), data, now());
  if (rc != 0) throw ServiceError(rc, "the connection is gone");
  id.comm_id = 0;
  id.state = CmIdState::disconnected;
  return json::object();
}

json CmService::establish(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.state != CmIdState::response_received) throw ServiceError(EINVAL, "no connection response to establish");
  const int rc = cm_.establish(id.comm_id, now());
  if (rc != 0) throw ServiceError(rc, "the connection is gone");
  id.state = CmIdState::connected;
  return json::object();
}

// rdma_notify(IBV_EVENT_COMM_EST): data came before the RTU.
json CmService::notify(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.state == CmIdState::accepting) {
    const int rc = cm_.notify_established(id.comm_id);
    if (rc != 0) throw ServiceError(rc, "the connection is gone");
  }
  return json::object();
}

json CmService::disconnect(uint64_t s, const json& r, std::vector<int>&) {
  CmId& id = id_of(s, r);
  if (id.comm_id == 0) throw ServiceError(EINVAL, "not connected");
  const int rc = cm_.disconnect(id.comm_id, now());
  if (rc != 0) throw ServiceError(rc, "not connected");
  return json::object();
}

// The attributes that move a QP to INIT, RTR or RTS for this connection (rdma_init_qp_attr; Linux:
// ib_cm_init_qp_attr), named as struct ibv_qp_attr names them.
json CmService::init_qp_attr(uint64_t s, const json& r, std::vector<int>&) {
  const CmId& id = id_of(s, r);
  const std::string state = r.value("state", std::string());
  if (is_datagram(id)) return datagram_qp_attr(state);
  if (state == "init") {
    unsigned access = 0x2;                                     // IBV_ACCESS_REMOTE_WRITE
    if (id.responder_resources != 0) access |= 0x4 | 0x8;      // REMOTE_READ | REMOTE_ATOMIC
    return {{"qp_state", "init"}, {"pkey_index", 0}, {"port_num", 1}, {"qp_access_flags", access}};
  }
  const bool known = id.state == CmIdState::connect_request || id.state == CmIdState::accepting ||
                     id.state == CmIdState::response_received || id.state == CmIdState::connected;
  if (!known) throw ServiceError(EINVAL, "the connection is not negotiated yet");
  if (state == "rtr") {
    return {{"qp_state", "rtr"},
            {"path_mtu", id.path_mtu},
            {"dest_qp_num", id.remote_qpn},
            {"rq_psn", id.rq_psn},
            {"max_dest_rd_atomic", id.responder_resources},
            {"min_rnr_timer", 0},  // as Linux's ib_cm
            {"dgid", wire::to_string(id.dst)},
            {"sgid_index", sgid_index(id.src)},
            {"hop_limit", 64},
            {"traffic_class", id.tos},
            {"sl", id.sl}};
  }
  if (state == "rts") {
    return {{"qp_state", "rts"},           {"sq_psn", id.sq_psn},
            {"timeout", id.local_ack_timeout}, {"retry_cnt", id.retry_count},
            {"rnr_retry", id.rnr_retry_count}, {"max_rd_atomic", id.initiator_depth}};
  }
  throw ServiceError(EINVAL, "state must be init, rtr or rts");
}

// --- what the CM reports ----------------------------------------------------------------------------------

void CmService::on_mad(const cm::MadAddress& from, std::span<const uint8_t> mad) {
  cm_.receive(from, mad, now());
  after_cm();
}

void CmService::after_cm() {
  for (const cm::CmEvent& e : cm_.take_events()) on_cm_event(e);
  arm_timer();
}

void CmService::arm_timer() {
  const cm::Nanos deadline = cm_.next_deadline();
  if (deadline == cm::never) {
    timer_.cancel();
    return;
  }
  const cm::Nanos t = now();
  timer_.expires_after(std::chrono::nanoseconds(deadline > t ? deadline - t : 0));
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // cancelled or re-armed
    cm_.run(now());
    after_cm();
  });
}

uint32_t CmService::find_by_comm_id(uint32_t comm_id) const {
  for (const auto& [n, id] : ids_) {
    if (id.comm_id == comm_id) return n;
  }
  return 0;
}

void CmService::on_cm_event(const cm::CmEvent& e) {
  if (e.type == cm::CmEventType::req_received) {
    on_connect_request(e);
    return;
  }
  if (e.type == cm::CmEventType::sidr_req_received) {
    on_sidr_request(e);
    return;
  }
  const uint32_t n = find_by_comm_id(e.comm_id);
  if (n == 0) return;
  CmId& id = ids_.at(n);
  switch (e.type) {
    case cm::CmEventType::sidr_rep_received:
      on_sidr_response(n, e);
      return;
    case cm::CmEventType::rep_received: {
      const cm::Rep& rep = e.rep;
      id.remote_qpn = id.qp_type == 9 ? rep.local_eecn : rep.local_qpn;  // an XRC target's QPN is its EECN
      id.sq_psn = rep.starting_psn;  // what we send with (see connect())
      id.responder_resources = std::min(id.responder_resources, rep.initiator_depth);
      id.initiator_depth = std::min(id.initiator_depth, rep.responder_resources);
      id.rnr_retry_count = rep.rnr_retry_count;
      id.state = CmIdState::response_received;
      queue_event(n, RdmaCmEvent::connect_response, 0,
                  {{"conn", conn_param(rep.private_data, rep.responder_resources, rep.initiator_depth,
                                       id.retry_count, rep.rnr_retry_count, rep.srq, id.remote_qpn)}});
      return;
    }
    case cm::CmEventType::established:
      id.state = CmIdState::connected;
      queue_event(n, RdmaCmEvent::established, 0);
      return;
    case cm::CmEventType::rejected:
      id.comm_id = 0;
      id.state = CmIdState::disconnected;
      queue_event(n, RdmaCmEvent::rejected, e.rej.reason,
                  {{"conn", conn_param(e.rej.private_data, 0, 0, 0, 0, false, 0)}});
      return;
    case cm::CmEventType::unreachable:
      id.comm_id = 0;
      id.state = CmIdState::disconnected;
      queue_event(n, RdmaCmEvent::unreachable, -ETIMEDOUT);
      return;
    case cm::CmEventType::dreq_received:
    case cm::CmEventType::disconnected:
      id.state = CmIdState::disconnected;
      queue_event(n, RdmaCmEvent::disconnected, e.timed_out ? -ETIMEDOUT : 0);
      return;
    case cm::CmEventType::req_received:
    case cm::CmEventType::sidr_req_received:
      return;
  }
}

uint32_t CmService::find_listener(uint64_t service_id, std::span<const uint8_t> private_data, cm::IpHeader& ip) const {
  const auto header = cm::read_ip_header(private_data);
  if (!header || !is_local(header->destination)) return 0;
  ip = *header;
  const uint16_t port_space = uint16_t(service_id >> 16), port = uint16_t(service_id);
  uint32_t wildcard = 0;
  for (const auto& [n, id] : ids_) {
    if (id.state != CmIdState::listening || id.port_space != port_space || id.src_port != port) continue;
    if (id.src == ip.destination) return n;
    // A wildcard takes the other family too unless it is afonly, as Linux's cma_match_private_data has it.
    const bool family_ok = !id.afonly.value_or(id.src.is_v4()) || id.src.is_v4() == ip.destination.is_v4();
    if (is_wildcard(id.src) && family_ok && wildcard == 0) wildcard = n;
  }
  return wildcard;
}

json CmService::connect_request_event(uint32_t n) const {
  const CmId& id = ids_.at(n);
  return {{"listen_id", id.listener},
          {"src", wire::to_string(id.src)},
          {"dst", wire::to_string(id.dst)},
          {"src_port", id.src_port},
          {"dst_port", id.dst_port},
          {"sgid_index", sgid_index(id.src)},
          {"path_mtu", id.path_mtu},
          {"traffic_class", id.tos},
          {"sl", id.sl}};
}

uint32_t CmService::new_passive_id(uint32_t listener, uint32_t comm_id, const cm::IpHeader& ip, uint16_t port) {
  const CmId& l = ids_.at(listener);
  const uint32_t n = next_id_++;
  CmId& id = ids_[n];
  id.session = l.session;
  id.channel = l.channel;
  id.port_space = l.port_space;
  id.qp_type = l.qp_type;
  id.state = CmIdState::connect_request;
  id.src = ip.destination;
  id.dst = ip.source;
  id.src_port = port;
  id.dst_port = ip.source_port;
  id.comm_id = comm_id;
  id.listener = listener;
  id.path_mtu = uint8_t(port_.active_mtu);
  return n;
}

// A REQ for a service someone listens on: find the listening ID that matches the address the peer wants,
// make a new ID for the connection, and tell the listener's channel. No match (or no rdma_cm header):
// rejected, as Linux's rdma_cm does.
void CmService::on_connect_request(const cm::CmEvent& e) {
  const cm::Req& req = e.req;
  cm::IpHeader ip;
  const uint32_t listener = find_listener(req.service_id, req.private_data, ip);
  if (listener == 0) {
    spdlog::debug("rdma_cm: REQ for port {} from {}: nobody listens", uint16_t(req.service_id),
                  wire::to_string(e.peer.gid));
    cm_.reject(e.comm_id, uint16_t(cm::RejectReason::invalid_service_id), {}, now());
    return;
  }
  const uint32_t n = new_passive_id(listener, e.comm_id, ip, uint16_t(req.service_id));
  CmId& id = ids_.at(n);
  // The QP type the application must give the connection: UC, an XRC target (IBV_QPT_XRC_RECV) or RC.
  id.qp_type = req.service_type == cm::ServiceType::uc                     ? 3
               : cm::is_xrc(req.service_type, req.extended_transport) ? 10
                                                                        : 2;
  id.tos = req.primary.traffic_class;
  id.sl = req.primary.sl & 7;  // (Linux's passive side too takes the REQ's path; PCP has 3 bits)
  id.remote_qpn = req.local_qpn;
  id.sq_psn = req.starting_psn;  // what we send with; our receive PSN goes in the REP (see connect())
  id.rq_psn = rng_() & 0xffffff;
  id.responder_resources = req.initiator_depth;  // upper bounds until accept
  id.initiator_depth = req.responder_resources;
  id.retry_count = req.retry_count;
  id.rnr_retry_count = req.rnr_retry_count;
  id.path_mtu = std::min<uint8_t>(req.path_mtu, uint8_t(port_.active_mtu));
  id.local_ack_timeout = req.primary.local_ack_timeout != 0 ? req.primary.local_ack_timeout
                                                            : ack_timeout(ca_ack_delay, packet_lifetime);
  const std::span<const uint8_t> user(req.private_data.data() + cm::ip_header_size,
                                      cm::req_private_size - cm::ip_header_size);
  json event = connect_request_event(n);
  event["conn"] = conn_param(user, req.responder_resources, req.initiator_depth, req.retry_count,
                             req.rnr_retry_count, req.srq, req.local_qpn);
  queue_event(n, RdmaCmEvent::connect_request, 0, std::move(event));
}

}  // namespace uroce::emulator
