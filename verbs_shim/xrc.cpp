// XRC through the verbs: domains (ibv_open_xrcd / ibv_close_xrcd), XRC SRQs (ibv_create_srq_ex with
// IBV_SRQT_XRC) and their numbers (ibv_get_srq_num). The QPs are in qp.cpp, the XRCETH's SRQ number
// (wr.qp_type.xrc.remote_srqn) in post.cpp; uroced and the transport do the rest (transport/device.hpp).
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

ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  // ibv_create_srq_ex hands basic SRQs with a PD to ibv_create_srq; what comes here is an XRC SRQ, or a
  // kind uroce has not (tag matching).
  const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  const bool typed = attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE;
  if ((attr->comp_mask & ~known) || (typed && attr->srq_type != IBV_SRQT_BASIC && attr->srq_type != IBV_SRQT_XRC)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
  const uint32_t needed = IBV_SRQ_INIT_ATTR_PD | (xrc ? IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ : 0);
  if ((attr->comp_mask & needed) != needed || !attr->pd || (xrc && (!attr->xrcd || !attr->cq))) {
    errno = EINVAL;
    return nullptr;
  }
  (void)context;
  return new_srq(attr->pd, attr->srq_context, attr->attr, xrc ? xrcd_number(attr->xrcd) : 0, xrc ? attr->cq : nullptr);
}

int get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  Srq* s = to_shim(srq);
  if (!s->xrc) return EINVAL;  // only XRC SRQs have a number initiators name
  *srq_num = s->impl->srqn;
  return 0;
}

}  // namespace uroce::shim
