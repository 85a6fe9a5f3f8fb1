// XRC through the verbs: domains (ibv_open_xrcd / ibv_close_xrcd), XRC SRQs (ibv_create_srq_ex with
// IBV_SRQT_XRC; it passes IBV_SRQT_TM on to tag_matching.cpp) and their numbers (ibv_get_srq_num), and
// further handles on a target QP (ibv_open_qp).
// The QPs are created in qp.cpp, the XRCETH's SRQ number (wr.qp_type.xrc.remote_srqn) in post.cpp;
// uroced and the transport do the rest (transport/device.hpp).
#include <fcntl.h>

#include "shim.hpp"

namespace uroce::shim {

ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  const uint32_t known = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  if (!attr || (attr->comp_mask & ~known) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
      (attr->oflags & ~(O_CREAT | O_EXCL))) {
    errno = EINVAL;
    return nullptr;
  }
  // With a file, every process that opens the same file shares the domain (the kernel keys it by inode);
  // fd -1 (or no fd) makes a domain of this process's own.
  const int fd = (attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ? attr->fd : -1;
  auto* x = new (std::nothrow) Xrcd{};
  if (!x) {
    errno = ENOMEM;
    return nullptr;
  }
  uint32_t number = 0;
  if (guarded("open_xrcd", [&] {
        number = to_shim(context)->impl->open_xrcd(fd, attr->oflags & O_CREAT, attr->oflags & O_EXCL);
      })) {
    delete x;
    return nullptr;
  }
  x->xrcd.context = context;
  x->number = number;
  return &x->xrcd;
}

int close_xrcd(ibv_xrcd* xrcd) {
  Xrcd* x = reinterpret_cast<Xrcd*>(xrcd);
  if (int rc = guarded("close_xrcd", [&] { to_shim(xrcd->context)->impl->close_xrcd(x->number); })) return rc;
  delete x;
  return 0;
}

// ibv_open_qp: a handle on an XRC target some context (this one, another, another process's) created in
// a domain this context opened. uroced counts the handles: ibv_destroy_qp on one closes only it, and the
// QP goes with the last; its async events reach every context holding one.
ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr* attr) {
  // As rdma-core's ibv_cmd_open_qp: unknown comp_mask bits are EOPNOTSUPP, and the number, domain and
  // type must all be given (EINVAL); the kernel's ib_open_qp opens XRC targets only (EINVAL). A domain
  // of another context is no handle of this one: EINVAL too, as the kernel's handle lookup fails.
  constexpr uint32_t needed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (attr && attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!attr || (attr->comp_mask & needed) != needed || !attr->xrcd || attr->xrcd->context != context ||
      attr->qp_type != IBV_QPT_XRC_RECV) {
    errno = EINVAL;
    return nullptr;
  }
  Context* c = to_shim(context);
  auto* q = new (std::nothrow) Qp{};
  if (!q) {
    errno = ENOMEM;
    return nullptr;
  }
  if (guarded("open_qp", [&] { q->impl = c->impl->open_qp(xrcd_number(attr->xrcd), attr->qp_num); })) {
    delete q;
    return nullptr;
  }
  // What ibv_cmd_open_qp fills: no PD, CQs or SRQ (a target has none), the caller's qp_context (copied
  // whether or not IBV_QP_OPEN_ATTR_CONTEXT is set, as rdma-core does), and an unknown state until
  // ibv_query_qp or ibv_modify_qp through this handle learns it.
  ibv_qp& qp = q->qp;
  qp.context = context;
  qp.qp_context = attr->qp_context;
  qp.handle = q->impl->qpn;
  qp.qp_num = q->impl->qpn;
  qp.state = IBV_QPS_UNKNOWN;
  qp.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&qp.mutex, nullptr);
  pthread_cond_init(&qp.cond, nullptr);
  std::lock_guard g(*c->objects_lock);
  c->qps->emplace(qp.qp_num, q);
  return &qp;
}

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  // ibv_create_srq_ex hands basic SRQs with a PD to ibv_create_srq; what comes here is an XRC SRQ, a tag
  // matching one (tag_matching.cpp), or a basic one asked for with more of the mask.
  const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                         IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  const bool typed = attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE;
  if ((attr->comp_mask & ~known) ||
      (typed && attr->srq_type != IBV_SRQT_BASIC && attr->srq_type != IBV_SRQT_XRC && attr->srq_type != IBV_SRQT_TM)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
  const bool tm = typed && attr->srq_type == IBV_SRQT_TM;
  // Both complete to a CQ of their own, which must be given (a TM SRQ's takes its list operations'
  // completions too).
  const uint32_t needed = IBV_SRQ_INIT_ATTR_PD | (xrc ? IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ : 0) |
                          (tm ? IBV_SRQ_INIT_ATTR_TM | IBV_SRQ_INIT_ATTR_CQ : 0);
  if ((attr->comp_mask & needed) != needed || !attr->pd || (xrc && (!attr->xrcd || !attr->cq)) || (tm && !attr->cq)) {
    errno = EINVAL;
    return nullptr;
  }
  (void)context;  // the PD's context is the SRQ's
  if (tm) return create_tm_srq(*attr);
  return new_srq(attr->pd, attr->srq_context, attr->attr, xrc ? xrcd_number(attr->xrcd) : 0, xrc ? attr->cq : nullptr);
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  Srq* s = to_shim(srq);
  if (!s->xrc) return EINVAL;  // only XRC SRQs have a number initiators name
  *srq_num = s->impl->srqn;
  return 0;
}

}  // namespace uroce::shim
