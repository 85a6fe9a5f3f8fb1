// Completion queues and completion channels. Polling and arming touch only the shared ring; an event is
// an 8-byte record (CompletionEventRecord) uroced writes into the channel's pipe when an armed CQ
// completes something, and ibv_get_cq_event reads it.
#include <unistd.h>

#include "idle_poll.hpp"
#include "shim.hpp"

namespace uroce::shim {

int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc) {
  Cq* q = to_shim(cq);
  if (num_entries <= 0) return 0;
  emulator::protocol::CompletionEntry e[32];
  int total = 0;
  std::unique_lock g(q->lock);
  while (total < num_entries) {
    const int want = std::min(num_entries - total, int(std::size(e)));
    const int n = q->impl->ring.poll({e, size_t(want)});
    for (int i = 0; i < n; ++i) {
      ibv_wc& w = wc[total + i];
      const auto& c = e[i];
      w.wr_id = c.wr_id;
      w.status = ibv_wc_status(c.status);
      w.opcode = ibv_wc_opcode(c.opcode);
      w.vendor_err = c.vendor_err;
      w.byte_len = c.byte_len;
      w.imm_data = wc_imm_field(c);
      w.qp_num = c.qp_num;
      w.src_qp = c.src_qp;
      w.wc_flags = c.wc_flags;
      w.pkey_index = c.pkey_index;
      w.slid = 0;
      w.sl = c.sl;
      w.dlid_path_bits = 0;
    }
    total += n;
    if (n < want) break;
  }
  g.unlock();  // not held across a yield
  note_poll(total != 0);
  return total;
}

int req_notify_cq(ibv_cq* cq, int solicited_only) {
  Cq* q = to_shim(cq);
  if (!cq->channel) return EINVAL;  // nowhere to deliver the event
  std::lock_guard g(q->arm_lock);
  q->impl->ring.arm(solicited_only != 0);
  return 0;
}

Cq* make_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector) {
  Context* c = to_shim(context);
  if (cqe <= 0 || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  auto* q = new (std::nothrow) Cq{};
  if (!q) {
    errno = ENOMEM;
    return nullptr;
  }
  if (guarded("create_cq", [&] {
        q->impl = c->impl->create_cq(uint32_t(cqe), channel ? to_shim(channel)->impl.get() : nullptr);
      })) {
    delete q;
    return nullptr;
  }
  ibv_cq& cq = q->cq;
  cq.context = context;
  cq.channel = channel;
  cq.cq_context = cq_context;
  cq.handle = q->impl->cqn;
  cq.cqe = int(q->impl->cqe);
  pthread_mutex_init(&cq.mutex, nullptr);
  pthread_cond_init(&cq.cond, nullptr);
  if (channel) __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
  std::lock_guard g(*c->objects_lock);
  (*c->cqs)[cq.handle] = q;
  return q;
}

}  // namespace uroce::shim

using namespace uroce::shim;

SHIM_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  auto* ch = new (std::nothrow) CompChannel{};
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  if (guarded("create_comp_channel", [&] { ch->impl = to_shim(context)->impl->create_comp_channel(); })) {
    delete ch;
    return nullptr;
  }
  ch->channel.context = context;
  ch->channel.fd = ch->impl->fd;
  ch->channel.refcnt = 0;
  return &ch->channel;
}

SHIM_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  CompChannel* ch = to_shim(channel);
  if (channel->refcnt) {
    errno = EBUSY;
    return EBUSY;  // CQs still use it
  }
  if (int rc = guarded("destroy_comp_channel", [&] { to_shim(channel->context)->impl->destroy_comp_channel(*ch->impl); })) {
    return rc;
  }
  delete ch;
  return 0;
}

SHIM_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                  int comp_vector) {
  Cq* q = make_cq(context, cqe, cq_context, channel, comp_vector);
  return q ? &q->cq : nullptr;
}

SHIM_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  Context* c = to_shim(cq->context);
  Cq* q = to_shim(cq);
  if (int rc = guarded("destroy_cq", [&] { c->impl->destroy_cq(*q->impl); })) return rc;
  uint32_t comp_reported, async_reported;
  {
    std::lock_guard g(*c->objects_lock);
    c->cqs->erase(cq->handle);
    comp_reported = q->comp_events_reported;
    async_reported = q->async_events_reported;
  }
  wait_for_acks(&cq->mutex, &cq->cond, &cq->comp_events_completed, comp_reported);
  wait_for_acks(&cq->mutex, &cq->cond, &cq->async_events_completed, async_reported);
  if (cq->channel) __atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_RELAXED);
  pthread_mutex_destroy(&cq->mutex);
  pthread_cond_destroy(&cq->cond);
  release_parent(q->parent);
  delete q;
  return 0;
}

// The CQ moves onto a new ring with the completions not yet polled (emulator/engine/queue_service.cpp);
// neither polling nor arming may touch the ring meanwhile. cq->cqe then says what the CQ holds.
SHIM_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  if (cqe <= 0) {
    errno = EINVAL;
    return EINVAL;
  }
  Cq* q = to_shim(cq);
  std::scoped_lock g(q->lock, q->arm_lock);
  const int rc = guarded("resize_cq", [&] { to_shim(cq->context)->impl->resize_cq(*q->impl, uint32_t(cqe)); });
  if (rc == 0) cq->cqe = int(q->impl->cqe);
  return rc;
}

SHIM_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  uroce::emulator::protocol::CompletionEventRecord r{};
  // Blocks unless the application made the fd non-blocking (then EAGAIN, as with the kernel's).
  const ssize_t n = read(channel->fd, &r, sizeof r);
  if (n != ssize_t(sizeof r)) {
    if (n >= 0) errno = EIO;
    return -1;
  }
  Context* c = to_shim(channel->context);
  std::lock_guard g(*c->objects_lock);
  auto it = c->cqs->find(r.cq);
  if (it == c->cqs->end()) {
    errno = EIO;  // an event for a CQ destroyed meanwhile
    return -1;
  }
  ++it->second->comp_events_reported;
  *cq = &it->second->cq;
  *cq_context = it->second->cq.cq_context;
  return 0;
}

SHIM_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}
