// Connecting: rdma_connect/accept/reject/establish/disconnect/notify, and the QP transitions with the
// attributes uroced negotiated (rdma_init_qp_attr), done in this process as librdmacm does them.
#include <arpa/inet.h>

#include "emulator/protocol/cm_json.hpp"
#include "verbs_shim/rdmacm/cma.hpp"

using namespace uroce::rdmacm;
using nlohmann::json;
using uroce::emulator::client::ControlError;

namespace {

const char* state_name(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_INIT: return "init";
    case IBV_QPS_RTR: return "rtr";
    case IBV_QPS_RTS: return "rts";
    default: return "";
  }
}

// The device's limits bound what an application asks for; RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH
// (0xff) mean "as many as the device allows", as in librdmacm.
uint8_t clamp_depth(uint8_t asked, ibv_context* verbs, bool responder) {
  ibv_device_attr attr{};
  if (verbs == nullptr || ibv_query_device(verbs, &attr) != 0) return asked;
  const int max = responder ? attr.max_qp_rd_atom : attr.max_qp_init_rd_atom;
  return uint8_t(std::min<int>(asked, max));
}

std::string hex_of(const void* data, uint8_t len) {
  if (data == nullptr || len == 0) return {};
  return uroce::emulator::protocol::to_hex({static_cast<const uint8_t*>(data), len});
}

}  // namespace

namespace uroce::rdmacm {

void set_ah_attr(ibv_ah_attr& ah, const json& r) {
  ah = {};
  ah.is_global = 1;
  ah.port_num = 1;
  set_gid(ah.grh.dgid, r.value("dgid", std::string()));
  ah.grh.sgid_index = r.value("sgid_index", uint8_t(0));
  ah.grh.hop_limit = r.value("hop_limit", uint8_t(64));
  ah.grh.traffic_class = r.value("traffic_class", uint8_t(0));
  ah.sl = r.value("sl", uint8_t(0));
}

int init_qp_attr(Id* id, ibv_qp_attr& attr, int& mask) {
  return guarded([&] {
    const char* name = state_name(attr.qp_state);
    if (*name == '\0') throw ControlError(EINVAL, "rdma_init_qp_attr: INIT, RTR or RTS only");
    const json r = call(id, {{"op", "cm_init_qp_attr"}, {"cm_id", id->handle}, {"state", name}});
    mask = IBV_QP_STATE;
    const ibv_qp_type type = id->id.qp != nullptr ? id->id.qp->qp_type : id->id.qp_type;
    if (attr.qp_state == IBV_QPS_INIT) {
      attr.pkey_index = r.value("pkey_index", uint16_t(0));
      attr.port_num = r.value("port_num", uint8_t(1));
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    }
    if (type == IBV_QPT_UD) {  // INIT with the Q_Key, RTR, RTS with a PSN: nothing about a peer
      if (attr.qp_state == IBV_QPS_INIT) {
        attr.qkey = r.value("qkey", 0u);
        mask |= IBV_QP_QKEY;
      } else if (attr.qp_state == IBV_QPS_RTS) {
        attr.sq_psn = r.value("sq_psn", 0u);
        mask |= IBV_QP_SQ_PSN;
      }
      return 0;
    }
    if (attr.qp_state == IBV_QPS_INIT) {
      attr.qp_access_flags = r.value("qp_access_flags", 0u);
      mask |= IBV_QP_ACCESS_FLAGS;
    } else if (attr.qp_state == IBV_QPS_RTR) {
      attr.path_mtu = ibv_mtu(r.value("path_mtu", 3));
      attr.dest_qp_num = r.value("dest_qp_num", 0u);
      attr.rq_psn = r.value("rq_psn", 0u);
      attr.max_dest_rd_atomic = r.value("max_dest_rd_atomic", uint8_t(0));
      attr.min_rnr_timer = r.value("min_rnr_timer", uint8_t(0));
      set_ah_attr(attr.ah_attr, r);
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
              IBV_QP_MIN_RNR_TIMER;
    } else {
      attr.sq_psn = r.value("sq_psn", 0u);
      attr.timeout = r.value("timeout", uint8_t(19));
      attr.retry_cnt = r.value("retry_cnt", uint8_t(7));
      attr.rnr_retry = r.value("rnr_retry", uint8_t(7));
      attr.max_rd_atomic = r.value("max_rd_atomic", uint8_t(0));
      mask |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    // UC has no acknowledgements, READs or atomics: what only RC takes is left out (ib_cm does the same).
    // XRC's halves each take their side of RC's: an initiator nothing of a responder's, a target nothing of
    // a requester's but its timeout (ib_cm's cm_init_qp_rtr_attr / cm_init_qp_rts_attr).
    if (type == IBV_QPT_UC) {
      mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    } else if (type == IBV_QPT_XRC_SEND) {
      mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    } else if (type == IBV_QPT_XRC_RECV) {
      mask &= ~(IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    }
    return 0;
  });
}

int modify_qp_to(Id* id, ibv_qp_state state, int depth) {
  ibv_qp* qp = id->id.qp;
  if (qp == nullptr) return 0;
  if (state == IBV_QPS_RTR) {
    // librdmacm's ucma_modify_qp_rtr: INIT again first, so the access flags follow the responder
    // resources that were negotiated after the QP was created.
    if (modify_qp_to(id, IBV_QPS_INIT) != 0) return -1;
  }
  ibv_qp_attr attr{};
  attr.qp_state = state;
  int mask = 0;
  if (init_qp_attr(id, attr, mask) != 0) return -1;
  if (depth >= 0 && state == IBV_QPS_RTR) attr.max_dest_rd_atomic = uint8_t(depth);
  if (depth >= 0 && state == IBV_QPS_RTS) attr.max_rd_atomic = uint8_t(depth);
  const int rc = ibv_modify_qp(qp, &attr, mask);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return 0;
}

}  // namespace uroce::rdmacm

CMA_EXPORT int rdma_init_qp_attr(rdma_cm_id* cm_id, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (cm_id == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) {
    errno = EINVAL;
    return -1;
  }
  return init_qp_attr(to_impl(cm_id), *qp_attr, *qp_attr_mask);
}

CMA_EXPORT int rdma_connect(rdma_cm_id* cm_id, rdma_conn_param* param) {
  Id* id = to_impl(cm_id);
  rdma_conn_param defaults{};
  defaults.retry_count = 7;
  defaults.rnr_retry_count = 7;
  const rdma_conn_param& p = param != nullptr ? *param : defaults;
  // What a REQ (SIDR_REQ for UD) leaves after rdma_cm's 36-byte header.
  if (p.private_data_len > (id->id.qp_type == IBV_QPT_UD ? 180 : 56)) {
    errno = EINVAL;
    return -1;
  }
  const int rc = guarded([&] {
    const uint32_t qpn = id->id.qp != nullptr ? id->id.qp->qp_num : p.qp_num;
    call(id, {{"op", "cm_connect"},
          {"cm_id", id->handle},
          {"qp_num", qpn},
          {"qp_type", int(id->id.qp != nullptr ? id->id.qp->qp_type : id->id.qp_type)},
          {"srq", id->id.srq != nullptr || (id->id.qp != nullptr && id->id.qp->srq != nullptr) || p.srq != 0},
          {"responder_resources", clamp_depth(p.responder_resources, id->id.verbs, true)},
          {"initiator_depth", clamp_depth(p.initiator_depth, id->id.verbs, false)},
          {"retry_count", std::min<int>(p.retry_count, 7)},
          {"rnr_retry_count", std::min<int>(p.rnr_retry_count, 7)},
          {"private_data", hex_of(p.private_data, p.private_data_len)}});
    return 0;
  });
  return rc != 0 ? rc : complete(id);
}

CMA_EXPORT int rdma_accept(rdma_cm_id* cm_id, rdma_conn_param* param) {
  Id* id = to_impl(cm_id);
  rdma_conn_param defaults{};
  defaults.responder_resources = id->peer_responder_resources;
  defaults.initiator_depth = id->peer_initiator_depth;
  defaults.rnr_retry_count = 7;
  const rdma_conn_param& p = param != nullptr ? *param : defaults;
  const bool ud = id->id.qp_type == IBV_QPT_UD;
  if (p.private_data_len > (ud ? 136 : 196)) {  // a REP's or a SIDR_REP's room
    errno = EINVAL;
    return -1;
  }
  // Never more than the peer's REQ allows: its initiator depth bounds our responder resources, and the
  // reverse.
  const uint8_t resp = std::min(clamp_depth(p.responder_resources, id->id.verbs, true), id->peer_responder_resources);
  const uint8_t init = std::min(clamp_depth(p.initiator_depth, id->id.verbs, false), id->peer_initiator_depth);
  // The QP is ready before the REP leaves (librdmacm: RTR and RTS, then accept), so the peer may send as
  // soon as it has the REP.
  // (A UD QP is in RTS since it was created.)
  if (!ud && (modify_qp_to(id, IBV_QPS_RTR, resp) != 0 || modify_qp_to(id, IBV_QPS_RTS, init) != 0)) return -1;
  const int rc = guarded([&] {
    call(id, {{"op", "cm_accept"},
          {"cm_id", id->handle},
          {"qp_num", id->id.qp != nullptr ? id->id.qp->qp_num : p.qp_num},
          {"srq", id->id.srq != nullptr || (id->id.qp != nullptr && id->id.qp->srq != nullptr) || p.srq != 0},
          {"responder_resources", resp},
          {"initiator_depth", init},
          {"rnr_retry_count", std::min<int>(p.rnr_retry_count, 7)},
          {"private_data", hex_of(p.private_data, p.private_data_len)}});
    return 0;
  });
  return rc != 0 ? rc : (ud ? 0 : complete(id));  // nothing follows a SIDR_REP (librdmacm: UD returns at once)
}

CMA_EXPORT int rdma_reject(rdma_cm_id* cm_id, const void* private_data, uint8_t private_data_len) {
  Id* id = to_impl(cm_id);
  if (private_data_len > (id->id.qp_type == IBV_QPT_UD ? 136 : 148)) {  // a REJ's or a SIDR_REP's room
    errno = EINVAL;
    return -1;
  }
  return guarded([&] {
    call(id, {{"op", "cm_reject"}, {"cm_id", id->handle}, {"private_data", hex_of(private_data, private_data_len)}});
    return 0;
  });
}

CMA_EXPORT int rdma_establish(rdma_cm_id* cm_id) {
  Id* id = to_impl(cm_id);
  if (modify_qp_to(id, IBV_QPS_RTR) != 0 || modify_qp_to(id, IBV_QPS_RTS) != 0) return -1;
  return guarded([&] { return call(id, {{"op", "cm_establish"}, {"cm_id", id->handle}}), 0; });
}

CMA_EXPORT int rdma_notify(rdma_cm_id* cm_id, ibv_event_type event) {
  if (event != IBV_EVENT_COMM_EST) {
    errno = EINVAL;  // the CM acts on communication established only (no path migration)
    return -1;
  }
  return guarded([&] { return call(to_impl(cm_id), {{"op", "cm_notify"}, {"cm_id", to_impl(cm_id)->handle}}), 0; });
}

CMA_EXPORT int rdma_disconnect(rdma_cm_id* cm_id) {
  Id* id = to_impl(cm_id);
  // librdmacm on an IB/RoCE device: the QP goes to the error state first (its work requests flush).
  if (id->id.qp != nullptr) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(id->id.qp, &attr, IBV_QP_STATE);
  }
  const int rc = guarded([&] { return call(id, {{"op", "cm_disconnect"}, {"cm_id", id->handle}}), 0; });
  return rc != 0 ? rc : complete(id);
}
