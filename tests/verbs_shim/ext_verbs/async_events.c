/* Asynchronous events about objects that are gone. A QP on an SRQ that enters the error state raises
 * IBV_EVENT_QP_LAST_WQE_REACHED; a program may destroy the QP before it reads the event (UCX does, from
 * its async thread). The kernel drops a destroyed object's pending events, so such a program is never
 * handed an event whose element is NULL: with uroce, where uroced's records wait in a pipe, the shim
 * passes them over (verbs_shim/events.cpp), and a non-blocking async_fd then reads as empty (EAGAIN). */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include "ext_verbs.h"

static struct ibv_qp *qp_on_srq(struct env *e, struct ibv_cq_ex *cq, struct ibv_srq *srq) {
  struct ibv_qp_init_attr a = {.send_cq = ibv_cq_ex_to_cq(cq),
                               .recv_cq = ibv_cq_ex_to_cq(cq),
                               .srq = srq,
                               .cap = {.max_send_wr = 4, .max_send_sge = 1},
                               .qp_type = IBV_QPT_RC};
  struct ibv_qp *qp = ibv_create_qp(e->pd, &a);
  CHECK(qp != NULL, "a QP on an SRQ: %s", strerror(errno));
  return qp;
}

static void to_error(struct ibv_qp *qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "ibv_modify_qp to ERR");
}

static void wait_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  CHECK(poll(&p, 1, TIMEOUT_MS) == 1, "no async event within %d ms", TIMEOUT_MS);
}

struct destroyer {
  pthread_t thread;
  struct ibv_qp *qp;
  volatile int done;
};

static void *destroy_and_mark(void *arg) {
  struct destroyer *d = arg;
  const int rc = ibv_destroy_qp(d->qp);
  d->done = 1;
  return (void *)(long)(rc == 0 ? 1 : -1);
}

void test_async_events_of_destroyed_objects(struct env *e) {
  struct ibv_cq_ex *cq = make_cq_ex(e, 16, NULL);
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
  struct ibv_srq *srq = ibv_create_srq(e->pd, &sa);
  CHECK(srq != NULL, "ibv_create_srq: %s", strerror(errno));
  const int flags = fcntl(e->ctx->async_fd, F_GETFL);
  CHECK(fcntl(e->ctx->async_fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK on async_fd");
  struct ibv_async_event ev;
  while (ibv_get_async_event(e->ctx, &ev) == 0) ibv_ack_async_event(&ev); /* what earlier sections left */
  CHECK(errno == EAGAIN, "draining async_fd: %s", strerror(errno));

  /* A live QP's event names it. */
  struct ibv_qp *kept = qp_on_srq(e, cq, srq);
  to_error(kept);
  wait_readable(e->ctx->async_fd);
  CHECK(ibv_get_async_event(e->ctx, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
  CHECK_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  CHECK(ev.element.qp == kept, "the event names another QP");
  ibv_ack_async_event(&ev);

  /* One destroyed before its event is read: nothing to read. */
  struct ibv_qp *gone = qp_on_srq(e, cq, srq);
  to_error(gone);
  wait_readable(e->ctx->async_fd);
  CHECK(ibv_destroy_qp(gone) == 0, "ibv_destroy_qp");
  errno = 0;
  const int rc = ibv_get_async_event(e->ctx, &ev);
  CHECK(rc == -1 && errno == EAGAIN, "an event about a destroyed QP was handed out (rc %d, type %d, qp %p)", rc,
        rc == 0 ? (int)ev.event_type : -1, rc == 0 ? (void *)ev.element.qp : NULL);

  /* One whose event was handed out and not yet acknowledged: ibv_destroy_qp waits for the ack, as rdma-core's
   * does (ibv_get_async_event(3)), so a thread still handling the event never meets a freed QP (DAPL's async
   * thread reads the endpoint behind the QP between get and ack; without the wait it met a freed one). */
  struct ibv_qp *held = qp_on_srq(e, cq, srq);
  to_error(held);
  wait_readable(e->ctx->async_fd);
  CHECK(ibv_get_async_event(e->ctx, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
  CHECK(ev.element.qp == held, "the event names another QP");
  struct destroyer d = {.qp = held};
  CHECK(pthread_create(&d.thread, NULL, destroy_and_mark, &d) == 0, "pthread_create");
  usleep(200 * 1000);
  CHECK(!d.done, "ibv_destroy_qp returned while an event about the QP was not acknowledged");
  ibv_ack_async_event(&ev);
  void *destroyed = NULL;
  CHECK(pthread_join(d.thread, &destroyed) == 0 && destroyed == (void *)1L, "ibv_destroy_qp after the ack");

  CHECK(fcntl(e->ctx->async_fd, F_SETFL, flags) == 0, "async_fd back to blocking");
  CHECK(ibv_destroy_qp(kept) == 0 && ibv_destroy_srq(srq) == 0, "destroy");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");
  printf("PASS async events: a destroyed QP's pending event is passed over; destroy waits for a handed-out one's ack\n");
}
