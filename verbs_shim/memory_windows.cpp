// Memory windows, as rdma-core 44's rxe provider does them: ibv_alloc_mw / ibv_dealloc_mw (through
// ibv_context_ops, which verbs.h's inline wrappers call), ibv_bind_mw (type 1: a BIND_MW work request
// posted for the application), and the BIND_MW request itself as ibv_post_send and ibv_wr_bind_mw write
// it into the send ring (bind_entry). uroced and the transport check and carry out the bind and complete
// it (IBV_WC_BIND_MW, or IBV_WC_MW_BIND_ERR with the QP in error).
#include "shim.hpp"

namespace uroce::shim {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mw = new (std::nothrow) ibv_mw{};
  if (!mw) {
    errno = ENOMEM;
    return nullptr;
  }
  client::MemoryWindow w;
  if (guarded("alloc_mw", [&] { w = to_shim(pd->context)->impl->alloc_mw(pd->handle, verbs::MwType(type)); })) {
    delete mw;
    return nullptr;
  }
  mw->context = pd->context;
  mw->pd = pd;
  mw->rkey = w.rkey;
  mw->handle = w.mw;  // the window's number: what BIND_MW requests and dealloc_mw name
  mw->type = type;
  return mw;
}

int dealloc_mw(ibv_mw* mw) {
  if (int rc = guarded("dealloc_mw", [&] { to_shim(mw->context)->impl->dealloc_mw(mw->handle); })) return rc;
  delete mw;
  return 0;
}

// What ibv_bind_mw calls, after its own checks (a type 1 window; no range without a region; the region
// in the window's PD). rxe's provider checks the rest it can see here and leaves the others to the bind
// itself (its MW_BIND_ERR completion).
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind) {
  const ibv_mw_bind_info& info = mw_bind->bind_info;
  int rc = 0;
  if (!info.mr && (info.addr || info.length)) {
    rc = EINVAL;
  } else if (info.mw_access_flags & IBV_ACCESS_ZERO_BASED) {
    rc = EINVAL;  // a type 1 window has virtual addresses (IBA o10-36.2.2)
  } else if (info.mr && !(to_shim(info.mr)->access & IBV_ACCESS_MW_BIND)) {
    rc = EINVAL;  // the region was not registered for windows (C10-73)
  }
  if (rc == 0) {
    ibv_send_wr wr{};
    wr.wr_id = mw_bind->wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = mw_bind->send_flags;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info = info;
    ibv_send_wr* bad = nullptr;
    rc = post_send(qp, &wr, &bad);
    // As rxe: the window takes its new rkey when the bind is posted; an application that gets an error
    // completion for it undoes this itself.
    if (rc == 0) mw->rkey = wr.bind_mw.rkey;
  }
  errno = rc;
  return rc;
}

int bind_entry(emulator::protocol::SendEntry& e, const ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info) {
  if (!mw || (!info.mr && (info.addr || info.length))) return EINVAL;
  e.bind_mw = mw->handle;
  e.rkey = rkey;
  // No region: only a type 1 window's unbind (length 0) goes through; the transport refuses the rest.
  e.bind_mr_lkey = info.mr ? info.mr->lkey : 0;
  e.bind_addr = info.addr;
  e.bind_length = info.length;
  e.bind_access = info.mw_access_flags;
  return 0;
}

}  // namespace uroce::shim
