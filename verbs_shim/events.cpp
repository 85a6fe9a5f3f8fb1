// Asynchronous events: uroced writes an 8-byte AsyncEventRecord {type, object number} into the
// context's async pipe (ibv_context.async_fd, pollable like the kernel's); the object number is resolved
// to the application's QP, CQ or SRQ here.
#include <unistd.h>

#include "shim.hpp"

using namespace uroce::shim;

namespace {

// Fills `event` from a record; false when the record is about a QP, CQ or SRQ this context no longer has.
bool resolve(Context* c, const uroce::emulator::protocol::AsyncEventRecord& r, ibv_async_event* event) {
  event->event_type = ibv_event_type(r.type);
  event->element = {};
  std::lock_guard g(*c->objects_lock);
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR: {
      auto it = c->cqs->find(r.object);
      if (it == c->cqs->end()) return false;
      ++it->second->async_events_reported;
      event->element.cq = &it->second->cq;
      return true;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      // With several handles on the QP (ibv_open_qp), the oldest: insertion keeps them in order.
      auto [it, last] = c->qps->equal_range(r.object);
      if (it == last) return false;
      ++it->second->events_reported;
      event->element.qp = &it->second->qp;
      return true;
    }
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED: {
      auto it = c->srqs->find(r.object);
      if (it == c->srqs->end()) return false;
      ++it->second->events_reported;
      event->element.srq = &it->second->srq;
      return true;
    }
    default:
      event->element.port_num = int(r.object);
      return true;
  }
}

}  // namespace

// An event about an object the application has destroyed since uroced raised it is passed over, as the
// kernel drops a destroyed object's pending events: a program that destroys a QP right after moving it to
// the error state (UCX does, and an SRQ's QP then raises QP_LAST_WQE_REACHED) must never be handed an
// element that is NULL (UCX's async thread read qp->qp_num through it and crashed). On a non-blocking
// async_fd that leaves nothing to read ends with EAGAIN, as with no event at all.
SHIM_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  Context* c = to_shim(context);
  for (;;) {
    uroce::emulator::protocol::AsyncEventRecord r{};
    const ssize_t n = read(context->async_fd, &r, sizeof r);
    if (n != ssize_t(sizeof r)) {
      if (n >= 0) errno = EIO;  // 0: the daemon went away
      return -1;
    }
    if (resolve(c, r, event)) return 0;
  }
}

// Counting acknowledgements is what lets destroy calls wait for the events handed out (wait_for_acks).
SHIM_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  auto bump = [](pthread_mutex_t* m, pthread_cond_t* cv, uint32_t* counter) {
    pthread_mutex_lock(m);
    ++*counter;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(m);
  };
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
      if (ibv_cq* cq = event->element.cq) bump(&cq->mutex, &cq->cond, &cq->async_events_completed);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      if (ibv_qp* qp = event->element.qp) bump(&qp->mutex, &qp->cond, &qp->events_completed);
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      if (ibv_srq* srq = event->element.srq) bump(&srq->mutex, &srq->cond, &srq->events_completed);
      break;
    default:
      break;
  }
}
