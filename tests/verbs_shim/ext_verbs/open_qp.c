/* ibv_open_qp: an XRC target shared between two contexts. Each ibv_open_device is a session of its own
 * with uroced (its own control connection and async pipe), as two processes' would be, so the second
 * context here stands for another process. The target, created by the first context in a domain both
 * opened through one file, must outlive its creator's handle, take the second context's modify and
 * query, go with the last handle, and report its async events to every context holding one. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "ext_verbs.h"

enum { O_LEN = 1500, O_RECV = 64 * 1024, UNKNOWN_NUM = 0xfffffe };

static struct ibv_xrcd *domain(struct ibv_context *ctx, int fd) {
  struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd,
                                 .oflags = O_CREAT};
  struct ibv_xrcd *x = ibv_open_xrcd(ctx, &a);
  CHECK(x != NULL, "ibv_open_xrcd: %s", strerror(errno));
  return x;
}

static struct ibv_qp *open_with(struct ibv_context *ctx, uint32_t comp_mask, struct ibv_xrcd *xrcd, uint32_t qpn,
                                enum ibv_qp_type type, void *qp_context) {
  struct ibv_qp_open_attr a = {
      .comp_mask = comp_mask, .qp_num = qpn, .xrcd = xrcd, .qp_context = qp_context, .qp_type = type};
  errno = 0;
  return ibv_open_qp(ctx, &a);
}

enum { OPEN_ALL = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE | IBV_QP_OPEN_ATTR_CONTEXT };

static struct ibv_qp *open_target(struct ibv_context *ctx, struct ibv_xrcd *xrcd, uint32_t qpn, void *qp_context) {
  struct ibv_qp *qp = open_with(ctx, OPEN_ALL, xrcd, qpn, IBV_QPT_XRC_RECV, qp_context);
  CHECK(qp != NULL, "ibv_open_qp of target %#x: %s", qpn, strerror(errno));
  return qp;
}

static void refused(struct ibv_context *ctx, uint32_t comp_mask, struct ibv_xrcd *xrcd, uint32_t qpn,
                    enum ibv_qp_type type, int expected, const char *what) {
  struct ibv_qp *qp = open_with(ctx, comp_mask, xrcd, qpn, type, NULL);
  CHECK(qp == NULL && errno == expected, "ibv_open_qp of %s: %s (errno %d, expected %d)", what,
        qp ? "opened" : "refused", errno, expected);
}

static struct ibv_qp *target(struct env *e, struct ibv_xrcd *xrcd) {
  struct ibv_qp_init_attr_ex a = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
  struct ibv_qp *qp = ibv_create_qp_ex(e->ctx, &a);
  CHECK(qp != NULL, "XRC target: %s", strerror(errno));
  return qp;
}

static struct ibv_qp *initiator(struct env *e, struct ibv_cq_ex *cq) {
  struct ibv_qp_init_attr_ex a = {.send_cq = ibv_cq_ex_to_cq(cq),
                                  .cap = {.max_send_wr = 8, .max_send_sge = 1},
                                  .qp_type = IBV_QPT_XRC_SEND,
                                  .comp_mask = IBV_QP_INIT_ATTR_PD,
                                  .pd = e->pd};
  struct ibv_qp *qp = ibv_create_qp_ex(e->ctx, &a);
  CHECK(qp != NULL, "XRC initiator: %s", strerror(errno));
  return qp;
}

static struct ibv_qp_attr query(struct ibv_qp *qp) {
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr init;
  const int rc = ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN, &init);
  CHECK(rc == 0, "ibv_query_qp: %s", strerror(rc));
  CHECK_EQ(init.qp_type, IBV_QPT_XRC_RECV);
  CHECK(init.qp_context == qp->qp_context, "ibv_query_qp: another qp_context");
  return a;
}

static void send_to_srq(struct ibv_qp *ini, struct env *e, uint32_t srqn, uint64_t wr_id, uint32_t length) {
  struct ibv_sge s = {.addr = (uintptr_t)e->local, .length = length, .lkey = e->local_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  wr.qp_type.xrc.remote_srqn = srqn;
  CHECK(ibv_post_send(ini, &wr, &bad) == 0, "ibv_post_send on an XRC initiator");
}

/* The next async event of `ctx` about QP number `qpn` within TIMEOUT_MS; others (earlier sections leave
 * some in the first context's pipe) are acknowledged and passed over. */
static struct ibv_async_event event_about(struct ibv_context *ctx, uint32_t qpn) {
  for (;;) {
    struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
    CHECK(poll(&p, 1, TIMEOUT_MS) == 1, "no async event about QP %#x within %d ms", qpn, TIMEOUT_MS);
    struct ibv_async_event ev;
    CHECK(ibv_get_async_event(ctx, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
    const int about_qp = ev.event_type == IBV_EVENT_QP_FATAL || ev.event_type == IBV_EVENT_QP_REQ_ERR ||
                         ev.event_type == IBV_EVENT_QP_ACCESS_ERR || ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED;
    if (about_qp && ev.element.qp && ev.element.qp->qp_num == qpn) return ev;
    ibv_ack_async_event(&ev);
  }
}

/* A request naming no SRQ of the target's domain makes the target refuse it and enter the error state
 * with IBV_EVENT_QP_REQ_ERR (transport/qp/responder.cpp): both contexts' handles must hear of it. */
static void check_events_reach_every_handle(struct env *e, struct ibv_context *ctx2, struct ibv_xrcd *x1,
                                            struct ibv_xrcd *x2, struct ibv_cq_ex *send_cq) {
  struct ibv_qp *ini = initiator(e, send_cq), *tgt = target(e, x1);
  struct ibv_qp *h2 = open_target(ctx2, x2, tgt->qp_num, NULL);
  qp_to_rts(e, ini, tgt->qp_num);
  qp_to_rts(e, tgt, ini->qp_num); /* ibv_xsrq_pingpong's masks for a target */
  send_to_srq(ini, e, UNKNOWN_NUM, 31, 8);
  struct wc_ex w;
  poll_n(send_cq, &w, 1);
  CHECK(w.status == IBV_WC_REM_INV_REQ_ERR, "a SEND to no SRQ: status %s", ibv_wc_status_str(w.status));
  struct ibv_async_event ev1 = event_about(e->ctx, tgt->qp_num), ev2 = event_about(ctx2, tgt->qp_num);
  CHECK_EQ(ev1.event_type, IBV_EVENT_QP_REQ_ERR);
  CHECK_EQ(ev2.event_type, IBV_EVENT_QP_REQ_ERR);
  CHECK(ev1.element.qp == tgt, "the creator's event names another ibv_qp");
  CHECK(ev2.element.qp == h2, "the opener's event names another ibv_qp");
  ibv_ack_async_event(&ev1);
  ibv_ack_async_event(&ev2);
  CHECK_EQ(query(h2).qp_state, IBV_QPS_ERR);
  CHECK(ibv_destroy_qp(h2) == 0 && ibv_destroy_qp(tgt) == 0 && ibv_destroy_qp(ini) == 0, "destroy QPs");
}

void test_open_qp(struct env *e) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list != NULL && n >= 1, "no device");
  struct ibv_context *ctx2 = ibv_open_device(list[0]);
  CHECK(ctx2 != NULL, "a second ibv_open_device: %s", strerror(errno));
  ibv_free_device_list(list);

  char shared_path[] = "/tmp/uroce-openqp-XXXXXX", other_path[] = "/tmp/uroce-openqp-XXXXXX";
  const int shared_fd = mkstemp(shared_path), other_fd = mkstemp(other_path);
  CHECK(shared_fd >= 0 && other_fd >= 0, "mkstemp: %s", strerror(errno));
  struct ibv_xrcd *x1 = domain(e->ctx, shared_fd), *x2 = domain(ctx2, shared_fd), *other = domain(ctx2, other_fd);

  struct ibv_cq_ex *send_cq = make_cq_ex(e, 16, NULL), *recv_cq = make_cq_ex(e, 16, NULL);
  struct ibv_srq_init_attr_ex sa = {
      .attr = {.max_wr = 8, .max_sge = 1},
      .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
      .srq_type = IBV_SRQT_XRC,
      .pd = e->pd,
      .xrcd = x1,
      .cq = ibv_cq_ex_to_cq(recv_cq),
  };
  struct ibv_srq *srq = ibv_create_srq_ex(e->ctx, &sa);
  CHECK(srq != NULL, "ibv_create_srq_ex (XRC): %s", strerror(errno));
  uint32_t srqn = 0;
  CHECK_EQ(ibv_get_srq_num(srq, &srqn), 0);
  struct ibv_qp *ini = initiator(e, send_cq), *tgt = target(e, x1);
  const uint32_t qpn = tgt->qp_num;
  qp_to_rts(e, ini, qpn);
  qp_to_rts(e, tgt, ini->qp_num); /* ibv_xsrq_pingpong's masks for a target */

  /* The second context's handle: what ibv_cmd_open_qp fills, and the QP's state through it. */
  int marker = 0;
  struct ibv_qp *h2 = open_target(ctx2, x2, qpn, &marker);
  CHECK(h2 != tgt, "ibv_open_qp gave the creator's ibv_qp");
  CHECK_EQ(h2->qp_num, qpn);
  CHECK_EQ(h2->qp_type, IBV_QPT_XRC_RECV);
  CHECK(h2->context == ctx2 && h2->qp_context == &marker, "the handle's context or qp_context");
  CHECK(!h2->pd && !h2->send_cq && !h2->recv_cq && !h2->srq, "an opened target with a PD, CQ or SRQ");
  CHECK_EQ(h2->state, IBV_QPS_UNKNOWN); /* as rdma-core: unknown until queried */
  struct ibv_qp_attr a = query(h2);
  CHECK_EQ(a.qp_state, IBV_QPS_RTS);
  CHECK_EQ(a.dest_qp_num, ini->qp_num);
  CHECK_EQ(h2->state, IBV_QPS_RTS);

  /* What is refused: rdma-core's mask checks, then the kernel's (only XRC targets of the caller's domain). */
  refused(ctx2, OPEN_ALL, x2, ini->qp_num, IBV_QPT_XRC_RECV, EINVAL, "an XRC initiator");
  refused(ctx2, OPEN_ALL, x2, UNKNOWN_NUM, IBV_QPT_XRC_RECV, EINVAL, "an unknown QP number");
  refused(ctx2, OPEN_ALL, other, qpn, IBV_QPT_XRC_RECV, EINVAL, "a target named with another domain of the context");
  refused(ctx2, OPEN_ALL, x1, qpn, IBV_QPT_XRC_RECV, EINVAL, "a domain handle of another context");
  refused(ctx2, OPEN_ALL, x2, qpn, IBV_QPT_RC, EINVAL, "qp_type RC");
  refused(ctx2, OPEN_ALL, x2, qpn, IBV_QPT_XRC_SEND, EINVAL, "qp_type XRC_SEND");
  refused(ctx2, OPEN_ALL & ~IBV_QP_OPEN_ATTR_TYPE, x2, qpn, IBV_QPT_XRC_RECV, EINVAL, "no IBV_QP_OPEN_ATTR_TYPE");
  refused(ctx2, OPEN_ALL & ~IBV_QP_OPEN_ATTR_XRCD, x2, qpn, IBV_QPT_XRC_RECV, EINVAL, "no IBV_QP_OPEN_ATTR_XRCD");
  refused(ctx2, OPEN_ALL & ~IBV_QP_OPEN_ATTR_NUM, x2, qpn, IBV_QPT_XRC_RECV, EINVAL, "no IBV_QP_OPEN_ATTR_NUM");
  refused(ctx2, OPEN_ALL | IBV_QP_OPEN_ATTR_RESERVED, x2, qpn, IBV_QPT_XRC_RECV, EOPNOTSUPP, "an unknown mask bit");

  /* A second handle in the same context, and IBV_QP_OPEN_ATTR_CONTEXT left out (still optional). */
  struct ibv_qp *h2b = open_with(ctx2, OPEN_ALL & ~IBV_QP_OPEN_ATTR_CONTEXT, x2, qpn, IBV_QPT_XRC_RECV, NULL);
  CHECK(h2b != NULL && h2b != h2, "a second ibv_open_qp in one context: %s", strerror(errno));

  /* The creator lets go, then one of the second context's two handles: the QP still takes a SEND. */
  CHECK(ibv_destroy_qp(tgt) == 0, "destroy the creator's target handle");
  CHECK(ibv_destroy_qp(h2b) == 0, "destroy one of two handles in a context");
  fill_pattern(e->local, O_LEN, 61);
  struct ibv_sge s = {.addr = (uintptr_t)e->remote + O_RECV, .length = 4096, .lkey = e->remote_mr->lkey};
  struct ibv_recv_wr rwr = {.wr_id = 41, .sg_list = &s, .num_sge = 1}, *rbad = NULL;
  CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0, "ibv_post_srq_recv");
  send_to_srq(ini, e, srqn, 40, O_LEN);
  struct wc_ex w;
  poll_n(send_cq, &w, 1);
  expect_success(&w, 40, IBV_WC_SEND);
  poll_n(recv_cq, &w, 1);
  expect_success(&w, 41, IBV_WC_RECV);
  CHECK_EQ(w.byte_len, O_LEN);
  CHECK_EQ(w.qp_num, qpn);
  CHECK(memcmp(e->remote + O_RECV, e->local, O_LEN) == 0, "SEND through an opened target: bytes differ");
  CHECK_EQ(query(h2).qp_state, IBV_QPS_RTS);

  /* The remaining handle modifies it; its destruction takes the QP. */
  struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
  CHECK_EQ(ibv_modify_qp(h2, &err, IBV_QP_STATE), 0);
  CHECK_EQ(h2->state, IBV_QPS_ERR);
  CHECK_EQ(query(h2).qp_state, IBV_QPS_ERR);
  CHECK(ibv_destroy_qp(h2) == 0, "destroy the last handle");
  refused(ctx2, OPEN_ALL, x2, qpn, IBV_QPT_XRC_RECV, EINVAL, "a target whose last handle is gone");

  check_events_reach_every_handle(e, ctx2, x1, x2, send_cq);

  CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_srq(srq) == 0, "destroy initiator and SRQ");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(send_cq)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(recv_cq)) == 0, "destroy CQs");
  CHECK(ibv_close_xrcd(x1) == 0 && ibv_close_xrcd(x2) == 0 && ibv_close_xrcd(other) == 0, "close the domains");
  CHECK(ibv_close_device(ctx2) == 0, "close the second context");
  close(shared_fd);
  close(other_fd);
  unlink(shared_path);
  unlink(other_path);
  printf("PASS ibv_open_qp (an XRC target shared by two contexts, outliving its creator's handle)\n");
}
