// QPs and SRQs on rdma_cm IDs, and the rdma_create_ep / rdma_get_request convenience calls. QPs are
// created through libibverbs (uroce's shim) and moved to INIT at once (UD QPs on to RTS), as librdmacm does.
#include <fcntl.h>

#include <map>
#include <mutex>

#include "verbs_shim/rdmacm/cma.hpp"

using namespace uroce::rdmacm;

namespace {

// The XRC domain of a device's XRC QPs and SRQs made through rdma_cm: one per device, opened on first use
// and kept for the process's life, as librdmacm's ucma_get_xrcd does.
ibv_xrcd* device_xrcd(ibv_context* verbs) {
  static std::mutex lock;
  static std::map<ibv_context*, ibv_xrcd*> domains;
  std::lock_guard g(lock);
  ibv_xrcd*& x = domains[verbs];
  if (x == nullptr) {
    ibv_xrcd_init_attr attr{};
    attr.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    attr.fd = -1;
    attr.oflags = O_CREAT;
    x = ibv_open_xrcd(verbs, &attr);
  }
  return x;
}

bool connected_type(ibv_qp_type t) {
  return t == IBV_QPT_RC || t == IBV_QPT_UC || t == IBV_QPT_XRC_SEND || t == IBV_QPT_XRC_RECV;
}

// rdma_create_qp without CQs: one CQ per direction, each with its completion channel (librdmacm's
// ucma_create_cqs), destroyed with the QP.
int create_cqs(Id* id, uint32_t send_size, uint32_t recv_size) {
  ibv_context* verbs = id->id.verbs;
  id->id.recv_cq_channel = ibv_create_comp_channel(verbs);
  id->id.send_cq_channel = ibv_create_comp_channel(verbs);
  if (id->id.recv_cq_channel == nullptr || id->id.send_cq_channel == nullptr) return -1;
  id->id.recv_cq = ibv_create_cq(verbs, int(std::max(recv_size, 1u)), id, id->id.recv_cq_channel, 0);
  id->id.send_cq = ibv_create_cq(verbs, int(std::max(send_size, 1u)), id, id->id.send_cq_channel, 0);
  if (id->id.recv_cq == nullptr || id->id.send_cq == nullptr) return -1;
  id->created_cqs = true;
  return 0;
}

void destroy_cqs(Id* id) {
  if (id->id.send_cq != nullptr) ibv_destroy_cq(id->id.send_cq);
  if (id->id.recv_cq != nullptr) ibv_destroy_cq(id->id.recv_cq);
  if (id->id.send_cq_channel != nullptr) ibv_destroy_comp_channel(id->id.send_cq_channel);
  if (id->id.recv_cq_channel != nullptr) ibv_destroy_comp_channel(id->id.recv_cq_channel);
  id->id.send_cq = id->id.recv_cq = nullptr;
  id->id.send_cq_channel = id->id.recv_cq_channel = nullptr;
  id->created_cqs = false;
}

int finish_qp(Id* id, ibv_qp* qp) {
  id->id.qp = qp;
  // A connected QP waits in INIT for the connection (ucma_init_conn_qp); a UD QP needs no peer and goes
  // to RTS at once (ucma_init_ud_qp).
  const bool ud = qp->qp_type == IBV_QPT_UD;
  if (modify_qp_to(id, IBV_QPS_INIT) != 0 || (ud && (modify_qp_to(id, IBV_QPS_RTR) != 0 ||
                                                     modify_qp_to(id, IBV_QPS_RTS) != 0))) {
    const int err = errno;
    ibv_destroy_qp(qp);
    id->id.qp = nullptr;
    errno = err;
    return -1;
  }
  return 0;
}

}  // namespace

CMA_EXPORT int rdma_create_qp_ex(rdma_cm_id* cm_id, ibv_qp_init_attr_ex* attr) {
  Id* id = to_impl(cm_id);
  if (cm_id == nullptr || attr == nullptr || id->id.verbs == nullptr || id->id.qp != nullptr) {
    errno = EINVAL;
    return -1;
  }
  // The QP's type follows the port space: RC, UC or XRC on RDMA_PS_TCP and RDMA_PS_IB, UD on RDMA_PS_UDP.
  // librdmacm does not check the type itself, but moves the new QP to INIT with the attributes of the ID's
  // port space (ucma_init_conn_qp or ucma_init_ud_qp), which the kernel refuses for the other kind of QP
  // with EINVAL: refused here at once, with that errno. (DAPL's cma provider asks for a UD QP on a
  // RDMA_PS_TCP ID: dtestx -u fails here.)
  const bool datagram = id->id.qp_type == IBV_QPT_UD;
  if (datagram ? attr->qp_type != IBV_QPT_UD : !connected_type(attr->qp_type)) {
    errno = EINVAL;
    return -1;
  }
  if (attr->qp_type == IBV_QPT_XRC_RECV) {
    // An XRC target is in the device's XRC domain and has no PD, CQs or SRQ (librdmacm: ucma_get_xrcd).
    attr->xrcd = device_xrcd(id->id.verbs);
    if (attr->xrcd == nullptr) return -1;
    attr->comp_mask = (attr->comp_mask & ~uint32_t(IBV_QP_INIT_ATTR_PD)) | IBV_QP_INIT_ATTR_XRCD;
    ibv_qp* qp = ibv_create_qp_ex(id->id.verbs, attr);
    if (qp == nullptr) return -1;
    return finish_qp(id, qp);
  }
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == nullptr) {
    if (id->id.pd == nullptr && (id->id.pd = id->daemon->protection_domain()) == nullptr) return -1;
    attr->pd = id->id.pd;
    attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
  }
  if (attr->srq == nullptr) attr->srq = id->id.srq;
  if ((attr->send_cq == nullptr || attr->recv_cq == nullptr) && !id->created_cqs) {
    if (create_cqs(id, attr->cap.max_send_wr, attr->cap.max_recv_wr) != 0) {
      const int err = errno;
      destroy_cqs(id);
      errno = err;
      return -1;
    }
  }
  if (attr->send_cq == nullptr) attr->send_cq = id->id.send_cq;
  if (attr->recv_cq == nullptr) attr->recv_cq = id->id.recv_cq;
  ibv_qp* qp = ibv_create_qp_ex(id->id.verbs, attr);
  if (qp == nullptr) return -1;
  return finish_qp(id, qp);
}

CMA_EXPORT int rdma_create_qp(rdma_cm_id* cm_id, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (cm_id == nullptr || qp_init_attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  Id* id = to_impl(cm_id);
  if (pd != nullptr && id->id.verbs != nullptr && pd->context != id->id.verbs) {
    errno = EINVAL;  // a PD of another device
    return -1;
  }
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = qp_init_attr->qp_context;
  ex.send_cq = qp_init_attr->send_cq;
  ex.recv_cq = qp_init_attr->recv_cq;
  ex.srq = qp_init_attr->srq;
  ex.cap = qp_init_attr->cap;
  ex.qp_type = qp_init_attr->qp_type;
  ex.sq_sig_all = qp_init_attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  if (pd == nullptr) ex.comp_mask = 0;
  const int rc = rdma_create_qp_ex(cm_id, &ex);
  if (rc == 0) {
    qp_init_attr->cap = ex.cap;  // what the QP got, as ibv_create_qp reports it
    qp_init_attr->send_cq = ex.send_cq;
    qp_init_attr->recv_cq = ex.recv_cq;
  }
  return rc;
}

CMA_EXPORT void rdma_destroy_qp(rdma_cm_id* cm_id) {
  Id* id = to_impl(cm_id);
  if (id->id.qp != nullptr) ibv_destroy_qp(id->id.qp);
  id->id.qp = nullptr;
  // An XRC target's CQ belongs to its SRQ, which goes later (rdma_destroy_srq), as in librdmacm.
  if (id->created_cqs && !(cm_id->qp_type == IBV_QPT_XRC_RECV && id->id.srq != nullptr)) destroy_cqs(id);
}

CMA_EXPORT int rdma_create_srq_ex(rdma_cm_id* cm_id, ibv_srq_init_attr_ex* attr) {
  Id* id = to_impl(cm_id);
  if (cm_id == nullptr || attr == nullptr || id->id.verbs == nullptr) {
    errno = EINVAL;
    return -1;
  }
  const bool xrc = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type == IBV_SRQT_XRC;
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC && !xrc) {
    errno = EOPNOTSUPP;  // tag matching
    return -1;
  }
  if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || attr->pd == nullptr) {
    if (id->id.pd == nullptr && (id->id.pd = id->daemon->protection_domain()) == nullptr) return -1;
    attr->pd = id->id.pd;
    attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
  }
  if (xrc) {
    // As librdmacm: the device's XRC domain unless one is given, and the ID's receive CQ (made now if the
    // ID has none), where rdma_get_recv_comp looks.
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || attr->xrcd == nullptr) {
      if ((attr->xrcd = device_xrcd(id->id.verbs)) == nullptr) return -1;
      attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD;
    }
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || attr->cq == nullptr) {
      if (id->id.recv_cq == nullptr && create_cqs(id, 0, attr->attr.max_wr) != 0) {
        const int err = errno;
        destroy_cqs(id);
        errno = err;
        return -1;
      }
      attr->cq = id->id.recv_cq;
      attr->comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
    }
    ibv_srq* srq = ibv_create_srq_ex(id->id.verbs, attr);
    if (srq == nullptr) return -1;
    id->id.srq = srq;
    return 0;
  }
  ibv_srq_init_attr plain{};
  plain.srq_context = attr->srq_context;
  plain.attr = attr->attr;
  ibv_srq* srq = ibv_create_srq(attr->pd, &plain);
  if (srq == nullptr) return -1;
  attr->attr = plain.attr;
  id->id.srq = srq;
  return 0;
}

CMA_EXPORT int rdma_create_srq(rdma_cm_id* cm_id, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  ibv_srq_init_attr_ex ex{};
  ex.srq_context = attr->srq_context;
  ex.attr = attr->attr;
  ex.pd = pd;
  ex.comp_mask = pd != nullptr ? IBV_SRQ_INIT_ATTR_PD : 0;
  if (cm_id != nullptr && cm_id->qp_type == IBV_QPT_XRC_RECV) {  // an XRC target's ID gets an XRC SRQ
    ex.srq_type = IBV_SRQT_XRC;
    ex.comp_mask |= IBV_SRQ_INIT_ATTR_TYPE;
  }
  const int rc = rdma_create_srq_ex(cm_id, &ex);
  if (rc == 0) attr->attr = ex.attr;
  return rc;
}

CMA_EXPORT void rdma_destroy_srq(rdma_cm_id* cm_id) {
  Id* id = to_impl(cm_id);
  if (id->id.srq != nullptr) ibv_destroy_srq(id->id.srq);
  id->id.srq = nullptr;
  if (id->created_cqs && id->id.qp == nullptr) destroy_cqs(id);  // an XRC SRQ's CQ (see rdma_destroy_qp)
}

// An ID from rdma_getaddrinfo's result: bound (passive, for rdma_listen) or resolved to its destination
// (active, for rdma_connect), synchronous, with a QP if qp_init_attr is given.
CMA_EXPORT int rdma_create_ep(rdma_cm_id** id_out, rdma_addrinfo* res, ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  if (id_out == nullptr || res == nullptr) {
    errno = EINVAL;
    return -1;
  }
  rdma_cm_id* cm_id = nullptr;
  if (rdma_create_id(nullptr, &cm_id, nullptr, rdma_port_space(res->ai_port_space)) != 0) return -1;
  Id* id = to_impl(cm_id);
  // The ID takes the address's QP type (librdmacm's rdma_create_id2): XRC on RDMA_PS_IB, for one.
  if (connected_type(ibv_qp_type(res->ai_qp_type)) && cm_id->qp_type != IBV_QPT_UD) {
    cm_id->qp_type = ibv_qp_type(res->ai_qp_type);
  }
  int rc = 0;
  if (res->ai_flags & RAI_PASSIVE) {
    rc = rdma_bind_addr(cm_id, res->ai_src_addr);
    if (rc == 0 && qp_init_attr != nullptr) {
      id->listen_qp_attr = std::make_unique<ibv_qp_init_attr>(*qp_init_attr);
      id->listen_qp_attr->qp_type = ibv_qp_type(res->ai_qp_type);
      id->id.pd = pd;
    }
  } else {
    rc = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc == 0) rc = rdma_resolve_route(cm_id, 2000);
    if (rc == 0 && qp_init_attr != nullptr) {
      // The QP's type is the address's, whatever the caller left in it (librdmacm does the same: rdma_client
      // zeroes its attributes and relies on it).
      qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);
      rc = rdma_create_qp(cm_id, pd, qp_init_attr);
    }
  }
  if (rc != 0) {
    const int err = errno;
    rdma_destroy_id(cm_id);
    errno = err;
    return -1;
  }
  *id_out = cm_id;
  return 0;
}

CMA_EXPORT void rdma_destroy_ep(rdma_cm_id* cm_id) {
  if (cm_id == nullptr) return;
  rdma_destroy_qp(cm_id);
  rdma_destroy_srq(cm_id);
  rdma_destroy_id(cm_id);
}

// A synchronous listener's next connection request, as a synchronous ID of its own (with a QP when the
// listener was made by rdma_create_ep with QP attributes).
CMA_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** id_out) {
  Id* l = to_impl(listen);
  if (listen == nullptr || id_out == nullptr || !l->sync) {
    errno = EINVAL;
    return -1;
  }
  rdma_cm_event* event = nullptr;
  for (;;) {
    if (rdma_get_cm_event(listen->channel, &event) != 0) return -1;
    if (event->event == RDMA_CM_EVENT_CONNECT_REQUEST) break;
    rdma_ack_cm_event(event);
  }
  rdma_cm_id* cm_id = event->id;
  Id* id = to_impl(cm_id);
  // Its own synchronous channel, so that its events do not mix with the listener's.
  rdma_event_channel* channel = rdma_create_event_channel();
  if (channel == nullptr || rdma_migrate_id(cm_id, channel) != 0) {
    const int err = errno;
    rdma_ack_cm_event(event);
    errno = err;
    return -1;
  }
  id->sync = true;
  id->id.event = event;
  if (l->listen_qp_attr) {
    ibv_qp_init_attr attr = *l->listen_qp_attr;
    if (rdma_create_qp(cm_id, l->id.pd, &attr) != 0) return -1;
  }
  *id_out = cm_id;
  return 0;
}
