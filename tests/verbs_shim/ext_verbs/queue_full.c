/* Full receive queues: ibv_post_recv and ibv_post_srq_recv fail with ENOMEM once max_recv_wr (max_wr)
 * requests are outstanding, however long uroced has had to take them from the ring, and succeed again once
 * a message consumed one, as on a NIC (and rdma-core's test_qpex full_rq_bad_flow). uroced frees a ring
 * slot only when its request leaves the transport's queue. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "ext_verbs.h"

static int try_recv(struct ibv_qp *qp, struct ibv_srq *srq, struct env *e, uint64_t wr_id) {
  struct ibv_sge s = {.addr = (uintptr_t)e->local, .length = 64, .lkey = e->local_mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad = NULL;
  return srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

/* Fills the queue (qp's own, or srq) with `depth` receives, waits for uroced to have taken them, checks
 * the next post is ENOMEM; then one SEND from `sender` consumes one, and a post succeeds again. */
static void fill_and_free(struct env *e, struct ibv_qp *receiver, struct ibv_srq *srq, uint32_t depth,
                          struct ibv_qp *sender, struct ibv_cq_ex *sender_cq, struct ibv_cq_ex *receiver_cq,
                          const char *what) {
  for (uint32_t i = 0; i < depth; ++i) CHECK(try_recv(receiver, srq, e, i) == 0, "%s: receive %u of %u", what, i, depth);
  usleep(50 * 1000);
  int rc = try_recv(receiver, srq, e, 1000);
  CHECK(rc == ENOMEM, "%s: a receive past %u: %s, expected ENOMEM", what, depth, rc ? strerror(rc) : "posted");
  struct ibv_sge s = {.addr = (uintptr_t)e->local + 4096, .length = 16, .lkey = e->local_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  CHECK(ibv_post_send(sender, &wr, &bad) == 0, "%s: post the SEND", what);
  struct wc_ex w;
  poll_n(sender_cq, &w, 1);
  expect_success(&w, 1, IBV_WC_SEND);
  poll_n(receiver_cq, &w, 1);
  CHECK(w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_RECV, "%s: the receive", what);
  rc = try_recv(receiver, srq, e, 1001);
  CHECK(rc == 0, "%s: a receive after one was consumed: %s", what, strerror(rc));
}

void test_full_receive_queues(struct env *e) {
  struct ibv_cq_ex *cqa = make_cq_ex(e, 64, NULL), *cqb = make_cq_ex(e, 64, NULL);
  struct ibv_qp *a = make_qp(e, IBV_QPT_RC, cqa, 0), *b = make_qp(e, IBV_QPT_RC, cqb, 0);
  connect_rc(e, a, b);
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  CHECK(ibv_query_qp(b, &attr, IBV_QP_CAP, &init) == 0, "ibv_query_qp");
  fill_and_free(e, b, NULL, attr.cap.max_recv_wr, a, cqa, cqb, "a QP's receive queue");
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy qp");

  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
  struct ibv_srq *srq = ibv_create_srq(e->pd, &sa);
  CHECK(srq != NULL, "ibv_create_srq: %s", strerror(errno));
  struct ibv_srq_attr got;
  CHECK(ibv_query_srq(srq, &got) == 0, "ibv_query_srq");
  struct ibv_qp_init_attr qa = {.send_cq = ibv_cq_ex_to_cq(cqb), .recv_cq = ibv_cq_ex_to_cq(cqb), .srq = srq,
                                .cap = {.max_send_wr = 4, .max_send_sge = 1}, .qp_type = IBV_QPT_RC};
  b = ibv_create_qp(e->pd, &qa);
  CHECK(b != NULL, "a QP on the SRQ: %s", strerror(errno));
  a = make_qp(e, IBV_QPT_RC, cqa, 0);
  connect_rc(e, a, b);
  fill_and_free(e, NULL, srq, got.max_wr, a, cqa, cqb, "a shared receive queue");
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_srq(srq) == 0, "destroy");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqa)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cqb)) == 0, "destroy cq");
  printf("PASS full receive queues (a QP's and an SRQ's): ENOMEM at max_wr, room again once one is consumed\n");
}
