// Queue pairs, shared receive queues and address handles: ibv_* attributes converted field by field to
// the transport's (transport/verbs), whose numeric values (states, masks, access flags, MTUs) are
// rdma-core's, so flags and masks pass through unchanged.
#include <cstring>

#include "shim.hpp"
#include "transport/packet_pacing.hpp"

namespace uroce::shim {
namespace {

bool av_from(const Context& c, const ibv_ah_attr& a, verbs::AddressVector& av) {
  // RoCE addresses by GID. A path without a GRH names a LID, which only uroce's LID extension reaches
  // (shim.hpp: lid_route; qperf needs it): the GRH's fields then keep their defaults.
  if (!a.is_global) {
    av.service_level = a.sl;
    return lid_route(c, a.dlid, av.dgid);
  }
  av.dgid = wire::IpAddress::from_v6_bytes(a.grh.dgid.raw);
  av.sgid_index = a.grh.sgid_index;
  av.flow_label = a.grh.flow_label;
  av.hop_limit = a.grh.hop_limit;
  av.traffic_class = a.grh.traffic_class;
  av.service_level = a.sl;
  return true;
}

void av_to(const verbs::AddressVector& av, ibv_ah_attr& a) {
  std::memset(&a, 0, sizeof a);
  a.is_global = 1;
  std::memcpy(a.grh.dgid.raw, av.dgid.bytes.data(), 16);
  a.grh.sgid_index = av.sgid_index;
  a.grh.flow_label = av.flow_label;
  a.grh.hop_limit = av.hop_limit;
  a.grh.traffic_class = av.traffic_class;
  a.sl = av.service_level;
  a.port_num = 1;
}

verbs::QpCap cap_from(const ibv_qp_cap& c) {
  return {c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data};
}

void cap_to(const verbs::QpCap& c, ibv_qp_cap& o) {
  o.max_send_wr = c.max_send_wr;
  o.max_recv_wr = c.max_recv_wr;
  o.max_send_sge = c.max_send_sge;
  o.max_recv_sge = c.max_recv_sge;
  o.max_inline_data = c.max_inline_data;
}

// An RSS QP's table and hash, from ibv_create_qp_ex's attributes. Toeplitz is the one hash function (as on
// every provider that has RSS); uroced checks the key's length and the fields.
int rss_fields(const ibv_qp_init_attr_ex& a, client::QpCreate& create) {
  const ibv_rx_hash_conf& h = a.rx_hash_conf;
  if (!a.rwq_ind_tbl || h.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ || (h.rx_hash_key_len && !h.rx_hash_key)) {
    return EINVAL;
  }
  if (h.rx_hash_fields_mask & (IBV_RX_HASH_IPSEC_SPI | IBV_RX_HASH_INNER)) return EOPNOTSUPP;
  create.ind_table = uint32_t(a.rwq_ind_tbl->ind_tbl_num);
  create.rx_hash_fields = h.rx_hash_fields_mask;
  create.rx_hash_key.assign(h.rx_hash_key, h.rx_hash_key + h.rx_hash_key_len);
  create.cap = {};
  return 0;
}

// `xrcd`: the domain of an XRC target (IBV_QPT_XRC_RECV), which has no PD, CQs or SRQ of its own; an XRC
// initiator (IBV_QPT_XRC_SEND) has a PD and a send CQ only. `rss`: an RSS QP's table and hash (ibv_create_qp_ex
// with IBV_QP_INIT_ATTR_IND_TABLE and RX_HASH): a raw packet QP with a PD and no CQs or queues.
ibv_qp* create_qp(ibv_context* context, ibv_pd* pd, const ibv_qp_init_attr& attr, ibv_qp_cap& cap_out,
                  ibv_xrcd* xrcd = nullptr, const ibv_qp_init_attr_ex* rss = nullptr) {
  Context* c = to_shim(context);
  const bool target = attr.qp_type == IBV_QPT_XRC_RECV, initiator = attr.qp_type == IBV_QPT_XRC_SEND;
  if (attr.qp_type != IBV_QPT_RC && attr.qp_type != IBV_QPT_UC && attr.qp_type != IBV_QPT_UD &&
      attr.qp_type != IBV_QPT_RAW_PACKET && !target && !initiator) {
    errno = EOPNOTSUPP;  // driver QPs
    return nullptr;
  }
  if (target ? !xrcd : rss ? !pd : (!pd || !attr.send_cq || (!initiator && !attr.recv_cq))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* q = new (std::nothrow) Qp{};
  if (!q) {
    errno = ENOMEM;
    return nullptr;
  }
  client::QpCreate create;
  create.cap = cap_from(attr.cap);
  if (target) {
    create.xrcd = xrcd_number(xrcd);
  } else if (rss) {
    create.pd = pd->handle;
    if (int rc = rss_fields(*rss, create)) {
      delete q;
      errno = rc;
      return nullptr;
    }
  } else {
    create.pd = pd->handle;
    create.send_cq = attr.send_cq->handle;
  }
  if (!target && !initiator && !rss) {
    create.recv_cq = attr.recv_cq->handle;
    create.srq = attr.srq ? attr.srq->handle : 0;
  }
  create.type = verbs::QpType(attr.qp_type);
  create.sq_sig_all = attr.sq_sig_all != 0;
  if (guarded("create_qp", [&] { q->impl = c->impl->create_qp(create); })) {
    delete q;
    return nullptr;
  }
  q->sq_sig_all = create.sq_sig_all;
  if (!target) q->parent = hold_parent(pd);
  ibv_qp& qp = q->qp;
  qp.context = context;
  qp.qp_context = attr.qp_context;
  qp.pd = target ? nullptr : pd;
  qp.send_cq = target || rss ? nullptr : attr.send_cq;
  qp.recv_cq = target || initiator || rss ? nullptr : attr.recv_cq;
  qp.srq = target || initiator || rss ? nullptr : attr.srq;
  qp.handle = q->impl->qpn;
  qp.qp_num = q->impl->qpn;
  qp.state = IBV_QPS_RESET;
  qp.qp_type = attr.qp_type;
  pthread_mutex_init(&qp.mutex, nullptr);
  pthread_cond_init(&qp.cond, nullptr);
  cap_to(q->impl->cap, cap_out);  // as providers do: the application learns what it got
  std::lock_guard g(*c->objects_lock);
  c->qps->emplace(qp.qp_num, q);
  return &qp;
}

}  // namespace

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  // The ibv_wr_* API (send_ops_flags) and XRC are there; RSS, TSO and creation flags are not. An XRC
  // target names its domain instead of a PD.
  const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                         IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
  const bool target = attr->qp_type == IBV_QPT_XRC_RECV;
  const uint32_t needed = target ? IBV_QP_INIT_ATTR_XRCD : IBV_QP_INIT_ATTR_PD;
  if ((attr->comp_mask & ~known) || !(attr->comp_mask & needed) ||
      ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool wr_api = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (wr_api) {
    if (int rc = check_send_ops(attr->qp_type, attr->send_ops_flags)) {
      errno = rc;
      return nullptr;
    }
  }
  ibv_qp_init_attr basic{};
  basic.qp_context = attr->qp_context;
  basic.send_cq = attr->send_cq;
  basic.recv_cq = attr->recv_cq;
  basic.srq = attr->srq;
  basic.cap = attr->cap;
  basic.qp_type = attr->qp_type;
  basic.sq_sig_all = attr->sq_sig_all;
  // RSS: both the table and the hash, on a raw packet QP (the kernel refuses one without the other).
  const uint32_t rss_mask = IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
  const bool rss = attr->comp_mask & rss_mask;
  if (rss && ((attr->comp_mask & rss_mask) != rss_mask || attr->qp_type != IBV_QPT_RAW_PACKET || wr_api)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp* qp = create_qp(context, target ? nullptr : attr->pd, basic, attr->cap, target ? attr->xrcd : nullptr,
                         rss ? attr : nullptr);
  if (qp && wr_api) {
    if (int rc = enable_wr_api(*to_shim(qp))) {
      ibv_destroy_qp(qp);
      errno = rc;
      return nullptr;
    }
  }
  return qp;
}

// A raw packet QP's pacing (transport/packet_pacing.hpp): the rate and burst go to the daemon as
// IBV_QP_RATE_LIMIT, as libmlx5 sends them to the kernel. typical_pkt_sz is taken and not needed: the bucket
// counts each frame's own bytes. As mlx5, a burst needs a rate, and unknown comp_mask bits are EINVAL.
int modify_qp_rate_limit(ibv_qp* qp, ibv_qp_rate_limit_attr* attr) {
  if (attr->comp_mask != 0) return EINVAL;
  if ((attr->max_burst_sz != 0 || attr->typical_pkt_sz != 0) && attr->rate_limit == 0) return EINVAL;
  uroce::verbs::QpAttr a;
  a.rate_limit = attr->rate_limit;
  a.max_burst_sz = attr->max_burst_sz;
  return guarded("modify_qp_rate_limit",
                 [&] { to_shim(qp->context)->impl->modify_qp(*to_shim(qp)->impl, a, IBV_QP_RATE_LIMIT); });
}

void fill_packet_pacing_caps(ibv_packet_pacing_caps& caps) {
  caps.qp_rate_limit_min = transport::PacingLimits::min_kbps;
  caps.qp_rate_limit_max = transport::PacingLimits::max_kbps;
  caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
}

}  // namespace uroce::shim

using namespace uroce::shim;
namespace verbs = uroce::verbs;

SHIM_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  return create_qp(pd->context, pd, *attr, attr->cap);
}

SHIM_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  Context* c = to_shim(qp->context);
  Qp* q = to_shim(qp);
  if (int rc = guarded("destroy_qp", [&] { c->impl->destroy_qp(*q->impl); })) return rc;
  uint32_t reported;
  {
    std::lock_guard g(*c->objects_lock);
    auto [first, last] = c->qps->equal_range(qp->qp_num);
    for (auto it = first; it != last; ++it) {
      if (it->second == q) {  // this handle only: others on the same QP number stay
        c->qps->erase(it);
        break;
      }
    }
    reported = q->events_reported;
  }
  wait_for_acks(&qp->mutex, &qp->cond, &qp->events_completed, reported);
  pthread_mutex_destroy(&qp->mutex);
  pthread_cond_destroy(&qp->cond);
  release_parent(q->parent);
  delete q;
  return 0;
}

SHIM_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  verbs::QpAttr a;
  a.qp_state = verbs::QpState(attr->qp_state);
  a.cur_qp_state = verbs::QpState(attr->cur_qp_state);
  a.path_mtu = verbs::Mtu(attr->path_mtu);
  a.qkey = attr->qkey;
  a.rq_psn = attr->rq_psn;
  a.sq_psn = attr->sq_psn;
  a.dest_qp_num = attr->dest_qp_num;
  a.qp_access_flags = uint32_t(attr->qp_access_flags);
  a.cap = cap_from(attr->cap);
  if ((attr_mask & IBV_QP_AV) && !av_from(*to_shim(qp->context), attr->ah_attr, a.ah_attr)) return EINVAL;
  a.pkey_index = attr->pkey_index;
  a.en_sqd_async_notify = attr->en_sqd_async_notify;
  a.max_rd_atomic = attr->max_rd_atomic;
  a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  a.min_rnr_timer = attr->min_rnr_timer;
  a.port_num = attr->port_num;
  a.timeout = attr->timeout;
  a.retry_cnt = attr->retry_cnt;
  a.rnr_retry = attr->rnr_retry;
  a.rate_limit = attr->rate_limit;
  Qp* q = to_shim(qp);
  if (int rc = guarded("modify_qp", [&] { to_shim(qp->context)->impl->modify_qp(*q->impl, a, uint32_t(attr_mask)); })) {
    return rc;
  }
  if (attr_mask & IBV_QP_STATE) qp->state = attr->qp_state;
  if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
    // The daemon dropped the QP's completions it still held; those already in the rings go here, as
    // libmlx5 cleans its CQs (a QP brought back from an error must not meet its old flush completions).
    for (ibv_cq* cq : {qp->send_cq, qp->recv_cq != qp->send_cq ? qp->recv_cq : nullptr}) {
      if (cq == nullptr) continue;
      Cq& c = *to_shim(cq);
      std::lock_guard lock(c.lock);
      c.impl->ring.remove_qp(qp->qp_num);
    }
    if (qp->qp_type == IBV_QPT_XRC_RECV) {  // no CQ of its own: its receives completed to its SRQs' CQs
      Context& ctx = *to_shim(qp->context);
      std::lock_guard objects(*ctx.objects_lock);
      for (const auto& [number, c] : *ctx.cqs) {
        std::lock_guard lock(c->lock);
        c->impl->ring.remove_qp(qp->qp_num);
      }
    }
  }
  return 0;
}

SHIM_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  (void)attr_mask;  // everything is filled, as providers do
  Qp* q = to_shim(qp);
  verbs::QpAttr a;
  if (int rc = guarded("query_qp", [&] { a = to_shim(qp->context)->impl->query_qp(*q->impl); })) return rc;
  std::memset(attr, 0, sizeof *attr);
  attr->qp_state = ibv_qp_state(a.qp_state);
  attr->cur_qp_state = ibv_qp_state(a.cur_qp_state);
  attr->path_mtu = ibv_mtu(a.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = a.qkey;
  attr->rq_psn = a.rq_psn;
  attr->sq_psn = a.sq_psn;
  attr->dest_qp_num = a.dest_qp_num;
  attr->qp_access_flags = int(a.qp_access_flags);
  cap_to(q->impl->cap, attr->cap);
  av_to(a.ah_attr, attr->ah_attr);
  attr->pkey_index = a.pkey_index;
  attr->en_sqd_async_notify = a.en_sqd_async_notify;
  attr->sq_draining = a.sq_draining;
  attr->max_rd_atomic = a.max_rd_atomic;
  attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
  attr->min_rnr_timer = a.min_rnr_timer;
  attr->port_num = a.port_num;
  attr->timeout = a.timeout;
  attr->retry_cnt = a.retry_cnt;
  attr->rnr_retry = a.rnr_retry;
  if (init_attr) {
    std::memset(init_attr, 0, sizeof *init_attr);
    init_attr->qp_context = qp->qp_context;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    cap_to(q->impl->cap, init_attr->cap);
    init_attr->qp_type = qp->qp_type;
    init_attr->sq_sig_all = q->sq_sig_all;
  }
  qp->state = attr->qp_state;
  return 0;
}

namespace uroce::shim {

ibv_srq* new_srq(ibv_pd* pd, void* srq_context, ibv_srq_attr& attr, uint32_t xrcd, ibv_cq* cq,
                 const client::TagMatchingCap* tm) {
  Context* c = to_shim(pd->context);
  auto* s = new (std::nothrow) Srq{};
  if (!s) {
    errno = ENOMEM;
    return nullptr;
  }
  if (guarded("create_srq", [&] {
        s->impl = tm ? c->impl->create_tm_srq(pd->handle, cq->handle, attr.max_wr, attr.max_sge, attr.srq_limit, *tm)
                     : c->impl->create_srq(pd->handle, attr.max_wr, attr.max_sge, attr.srq_limit, xrcd,
                                           cq ? cq->handle : 0);
      })) {
    delete s;
    return nullptr;
  }
  s->xrc = xrcd != 0;
  s->tm = tm != nullptr;
  s->parent = hold_parent(pd);
  ibv_srq& srq = s->srq;
  srq.context = pd->context;
  srq.srq_context = srq_context;
  srq.pd = pd;
  srq.handle = s->impl->srqn;
  pthread_mutex_init(&srq.mutex, nullptr);
  pthread_cond_init(&srq.cond, nullptr);
  attr.max_wr = s->impl->max_wr;
  attr.max_sge = s->impl->max_sge;
  std::lock_guard g(*c->objects_lock);
  (*c->srqs)[srq.handle] = s;
  return &srq;
}

}  // namespace uroce::shim

SHIM_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  return new_srq(pd, attr->srq_context, attr->attr, 0, nullptr);
}

SHIM_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // resizing: not in the client library
  if (!(mask & IBV_SRQ_LIMIT)) return 0;
  return guarded("modify_srq", [&] { to_shim(srq->context)->impl->modify_srq(*to_shim(srq)->impl, attr->srq_limit); });
}

SHIM_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
  Srq* s = to_shim(srq);
  attr->max_wr = s->impl->max_wr;
  attr->max_sge = s->impl->max_sge;
  attr->srq_limit = 0;  // the client library does not report the armed limit back
  return 0;
}

SHIM_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  Context* c = to_shim(srq->context);
  Srq* s = to_shim(srq);
  if (int rc = guarded("destroy_srq", [&] { c->impl->destroy_srq(*s->impl); })) return rc;
  uint32_t reported;
  {
    std::lock_guard g(*c->objects_lock);
    c->srqs->erase(srq->handle);
    reported = s->events_reported;
  }
  wait_for_acks(&srq->mutex, &srq->cond, &srq->events_completed, reported);
  pthread_mutex_destroy(&srq->mutex);
  pthread_cond_destroy(&srq->cond);
  release_parent(s->parent);
  delete s;
  return 0;
}

SHIM_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  verbs::AddressVector av;
  if (!av_from(*to_shim(pd->context), *attr, av)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* a = new (std::nothrow) Ah{};
  if (!a) {
    errno = ENOMEM;
    return nullptr;
  }
  uint32_t handle = 0;
  if (guarded("create_ah", [&] { handle = to_shim(pd->context)->impl->create_ah(pd->handle, av); })) {
    delete a;
    return nullptr;
  }
  a->ah.context = pd->context;
  a->ah.pd = pd;
  a->ah.handle = handle;
  return &a->ah;
}

SHIM_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  if (int rc = guarded("destroy_ah", [&] { to_shim(ah->context)->impl->destroy_ah(ah->handle); })) return rc;
  delete to_shim(ah);
  return 0;
}
