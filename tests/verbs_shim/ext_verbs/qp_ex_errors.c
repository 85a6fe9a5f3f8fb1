/* What the ibv_wr_* API must refuse: wr_complete returns the error and the whole batch is dropped (a good
 * SEND built before the bad request in the same batch never reaches the wire), and wr_abort drops a batch.
 * One receive is posted at the start; only the good SEND at the end may consume it. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "ext_verbs.h"

/* A batch: a good signalled SEND (wr_id 1000 + n), then what `bad` adds; wr_complete must return `want`. */
static void refused(struct env *e, struct ibv_qp_ex *x, int n, void (*bad)(struct env *, struct ibv_qp_ex *), int want,
                    const char *what) {
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 1000 + (uint64_t)n;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 16);
  bad(e, x);
  const int rc = ibv_wr_complete(x);
  CHECK(rc == want, "%s: wr_complete returned %d, expected %d", what, rc, want);
}

static void bind_without_window(struct env *e, struct ibv_qp_ex *x) {
  (void)e;
  struct ibv_mw_bind_info info = {0};
  x->wr_id = 1;
  ibv_wr_bind_mw(x, NULL, 0, &info);
}
static void tso(struct env *e, struct ibv_qp_ex *x) {
  (void)e;
  char header[16] = {0};
  ibv_wr_send_tso(x, header, sizeof header, 1000);
}
static void unaligned_atomic_write(struct env *e, struct ibv_qp_ex *x) {
  uint64_t value = 1;
  ibv_wr_atomic_write(x, e->remote_mr->rkey, (uintptr_t)e->remote + 4, &value);
}
static void xrc(struct env *e, struct ibv_qp_ex *x) {
  (void)e;
  ibv_wr_set_xrc_srqn(x, 5);
}
static void ud_addr_on_rc(struct env *e, struct ibv_qp_ex *x) {
  (void)e;
  ibv_wr_set_ud_addr(x, NULL, 1, QKEY);
}
static void too_many_sges(struct env *e, struct ibv_qp_ex *x) {
  struct ibv_sge s[5];
  for (int i = 0; i < 5; ++i) s[i] = (struct ibv_sge){(uintptr_t)e->local + 64 * i, 8, e->local_mr->lkey};
  x->wr_id = 2;
  ibv_wr_send(x);
  ibv_wr_set_sge_list(x, 5, s); /* the QP was created with max_send_sge 4 */
}
static void too_much_inline(struct env *e, struct ibv_qp_ex *x) {
  x->wr_id = 3;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, e->local, 4096);  /* far beyond max_inline_data */
}
static void checksum_offload(struct env *e, struct ibv_qp_ex *x) {
  x->wr_id = 4;
  x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_IP_CSUM;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
}
static void unknown_flag(struct env *e, struct ibv_qp_ex *x) {
  x->wr_id = 5;
  x->wr_flags = IBV_SEND_SIGNALED | (1u << 20);
  ibv_wr_send(x);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
}
static void unaligned_atomic(struct env *e, struct ibv_qp_ex *x) {
  x->wr_id = 7;
  ibv_wr_atomic_fetch_add(x, e->remote_mr->rkey, (uintptr_t)e->remote + 4, 1);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
}
static void atomic_without_buffer(struct env *e, struct ibv_qp_ex *x) {
  x->wr_id = 8;
  ibv_wr_atomic_cmp_swp(x, e->remote_mr->rkey, (uintptr_t)e->remote, 0, 1);
}
/* More requests than the send queue holds: the ring cannot take the batch. */
static uint32_t send_queue_depth;
static void overflow(struct env *e, struct ibv_qp_ex *x) {
  for (uint32_t i = 0; i < send_queue_depth; ++i) {
    x->wr_id = 6;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
  }
}

void test_wr_errors(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa, struct ibv_qp *b, struct ibv_cq_ex *cqb) {
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  CHECK(ibv_query_qp(a, &attr, IBV_QP_CAP, &init) == 0, "ibv_query_qp");
  send_queue_depth = init.cap.max_send_wr;
  post_recv(b, 400, e->remote + 100 * 1024, 64, e->remote_mr->lkey);

  static const struct {
    void (*bad)(struct env *, struct ibv_qp_ex *);
    int want;
    const char *what;
  } cases[] = {
      {bind_without_window, EINVAL, "BIND_MW without a window"},
      {tso, EOPNOTSUPP, "SEND with TSO"},
      {unaligned_atomic_write, EINVAL, "an ATOMIC_WRITE to an unaligned address"},
      {xrc, EOPNOTSUPP, "an XRC SRQ number on an RC QP"},
      {ud_addr_on_rc, EINVAL, "a UD address on an RC QP"},
      {too_many_sges, EINVAL, "5 SGEs on a QP of 4"},
      {too_much_inline, EINVAL, "4 KiB inline"},
      {checksum_offload, EOPNOTSUPP, "IBV_SEND_IP_CSUM"},
      {unknown_flag, EINVAL, "an unknown send flag"},
      {unaligned_atomic, EINVAL, "an atomic on an unaligned address"},
      {atomic_without_buffer, EINVAL, "an atomic without its 8-byte local buffer"},
      {overflow, ENOMEM, "more requests than the send queue holds"},
  };
  for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); ++i) {
    refused(e, x, i, cases[i].bad, cases[i].want, cases[i].what);
  }

  /* A setter with no operation before it. */
  ibv_wr_start(x);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
  CHECK_EQ(ibv_wr_complete(x), EINVAL);
  /* wr_abort: nothing is posted. */
  ibv_wr_start(x);
  x->wr_id = 1100;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
  ibv_wr_abort(x);
  /* An empty batch is fine. */
  ibv_wr_start(x);
  CHECK_EQ(ibv_wr_complete(x), 0);
  expect_nothing(cqa);
  expect_nothing(cqb);

  /* The QP still works, and the receive posted at the start is the one this SEND consumes. */
  memcpy(e->local, "after the errors", 16);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 1200;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 16);
  CHECK_EQ(ibv_wr_complete(x), 0);
  const struct wc_ex w = expect_delivered(cqa, 1200, cqb, 400);
  CHECK_EQ(w.byte_len, 16);
  CHECK(memcmp(e->remote + 100 * 1024, "after the errors", 16) == 0, "SEND data");
  expect_nothing(cqa);
  printf("PASS qp_ex errors: unsupported ops, bad setters, full queue, abort (batches all or nothing)\n");
}
