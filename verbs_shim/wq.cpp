// Receive work queues and indirection tables (ibv_create_wq, ibv_modify_wq, ibv_destroy_wq,
// ibv_create_rwq_ind_table, ibv_destroy_rwq_ind_table: verbs_context ops that verbs.h's inline functions
// call), for RSS QPs (qp.cpp). A work queue is a receive ring uroced gives like an SRQ's; ibv_post_wq_recv
// calls the ibv_wq's post_recv, which writes it. Only IBV_WQT_RQ exists, with no creation flags (no
// VLAN stripping, FCS scatter, padding or delay drop: none is in uroce's capabilities).
#include "shim.hpp"

namespace uroce::shim {
namespace {

struct Wq {
  ibv_wq wq;  // must stay first: applications hold &wq
  std::unique_ptr<client::SharedReceiveQueue> impl;
  std::mutex lock;  // the ring is single-producer
  Pd* parent = nullptr;  // held when made with a parent domain
};
Wq* to_wq(ibv_wq* w) { return reinterpret_cast<Wq*>(w); }

struct IndTable {
  ibv_rwq_ind_table table;  // must stay first
};

int post_wq_recv(ibv_wq* wq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Wq* w = to_wq(wq);
  return post_receive_chain(w->impl->ring, w->lock, wq->context, wr, bad_wr);
}

ibv_wq* create_wq(ibv_context* context, ibv_wq_init_attr* attr) {
  if (!attr || attr->wq_type != IBV_WQT_RQ || !attr->pd || !attr->cq) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->comp_mask & ~uint32_t(IBV_WQ_INIT_ATTR_FLAGS) ||
      ((attr->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && attr->create_flags)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  auto* w = new (std::nothrow) Wq{};
  if (!w) {
    errno = ENOMEM;
    return nullptr;
  }
  Context* c = to_shim(context);
  if (guarded("create_wq", [&] {
        w->impl = c->impl->create_wq(attr->pd->handle, attr->cq->handle, attr->max_wr, attr->max_sge);
      })) {
    delete w;
    return nullptr;
  }
  w->parent = hold_parent(attr->pd);
  ibv_wq& wq = w->wq;
  wq.context = context;
  wq.pd = attr->pd;
  wq.cq = attr->cq;
  wq.wq_num = w->impl->srqn;
  wq.handle = w->impl->srqn;
  wq.state = IBV_WQS_RESET;
  wq.wq_type = IBV_WQT_RQ;
  wq.post_recv = post_wq_recv;
  attr->max_wr = w->impl->max_wr;  // as providers do: the application learns what it got
  attr->max_sge = w->impl->max_sge;
  return &wq;
}

int modify_wq(ibv_wq* wq, ibv_wq_attr* attr) {
  if (!wq || !attr) return EINVAL;
  if (attr->attr_mask & ~uint32_t(IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS)) return EINVAL;
  if ((attr->attr_mask & IBV_WQ_ATTR_FLAGS) && attr->flags_mask) return EOPNOTSUPP;
  if ((attr->attr_mask & IBV_WQ_ATTR_CURR_STATE) && attr->curr_wq_state != wq->state) return EINVAL;
  if (!(attr->attr_mask & IBV_WQ_ATTR_STATE)) return 0;
  if (attr->wq_state > IBV_WQS_ERR) return EINVAL;
  if (int rc = guarded("modify_wq", [&] { to_shim(wq->context)->impl->modify_wq(*to_wq(wq)->impl, attr->wq_state); })) {
    return rc;
  }
  wq->state = attr->wq_state;
  return 0;
}

int destroy_wq(ibv_wq* wq) {
  if (!wq) return EINVAL;
  Wq* w = to_wq(wq);
  if (int rc = guarded("destroy_wq", [&] { to_shim(wq->context)->impl->destroy_wq(*w->impl); })) return rc;
  pthread_mutex_destroy(&wq->mutex);
  pthread_cond_destroy(&wq->cond);
  release_parent(w->parent);
  delete w;
  return 0;
}

ibv_rwq_ind_table* create_rwq_ind_table(ibv_context* context, ibv_rwq_ind_table_init_attr* attr) {
  if (!attr || attr->comp_mask || attr->log_ind_tbl_size > transport::Device::log_max_ind_table || !attr->ind_tbl) {
    errno = EINVAL;
    return nullptr;
  }
  std::vector<uint32_t> wqs;
  for (size_t i = 0; i < (size_t(1) << attr->log_ind_tbl_size); ++i) {
    if (!attr->ind_tbl[i]) {
      errno = EINVAL;
      return nullptr;
    }
    wqs.push_back(attr->ind_tbl[i]->wq_num);
  }
  auto* t = new (std::nothrow) IndTable{};
  if (!t) {
    errno = ENOMEM;
    return nullptr;
  }
  uint32_t number = 0;
  if (guarded("create_rwq_ind_table", [&] { number = to_shim(context)->impl->create_rwq_ind_table(wqs); })) {
    delete t;
    return nullptr;
  }
  t->table.context = context;
  t->table.ind_tbl_handle = int(number);
  t->table.ind_tbl_num = int(number);
  return &t->table;
}

int destroy_rwq_ind_table(ibv_rwq_ind_table* table) {
  if (!table) return EINVAL;
  if (int rc = guarded("destroy_rwq_ind_table", [&] {
        to_shim(table->context)->impl->destroy_rwq_ind_table(uint32_t(table->ind_tbl_num));
      })) {
    return rc;
  }
  delete reinterpret_cast<IndTable*>(table);
  return 0;
}

}  // namespace

void install_work_queue_ops(verbs_context& v) {
  v.create_wq = create_wq;
  v.modify_wq = modify_wq;
  v.destroy_wq = destroy_wq;
  v.create_rwq_ind_table = create_rwq_ind_table;
  v.destroy_rwq_ind_table = destroy_rwq_ind_table;
}

}  // namespace uroce::shim
