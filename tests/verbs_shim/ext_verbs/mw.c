/* Memory windows through the verbs, as on rxe: type 1 windows bound with ibv_bind_mw, type 2 windows bound
 * with IBV_WR_BIND_MW (ibv_post_send) and ibv_wr_bind_mw, on one port with RC QP pairs connected to each
 * other. A is the QP that binds windows onto part of a region of its own; its peer B reads and writes
 * through the windows' rkeys. Checked: the bytes that land, every completion's status and opcode, what the
 * verbs refuse, and that an rkey stops working when its window is rebound, unbound, invalidated (LOCAL_INV
 * or SEND_WITH_INV) or named through a QP that did not bind it (type 2). A remote access error takes both
 * QPs of a pair to the error state, so each case that makes one gets a fresh pair. */
#include <errno.h>
#include <string.h>

#include "ext_verbs.h"

/* The region the windows open: WIN_BUF bytes, the windows WIN_LEN of them from WIN_OFF (type 1) and
 * from WIN2_OFF (type 2). B's side of every transfer is in e->local, from L_OFF. */
enum { WIN_BUF = 64 * 1024, WIN_OFF = 4096, WIN_LEN = 8192, WIN2_OFF = 32 * 1024, L_OFF = 128 * 1024, XFER = 64 };

struct pair {
  struct ibv_cq_ex *cqa, *cqb;
  struct ibv_qp *a, *b;
};

static struct pair make_pair(struct env *e) {
  struct pair p;
  p.cqa = make_cq_ex(e, 16, NULL);
  p.cqb = make_cq_ex(e, 16, NULL);
  p.a = make_qp(e, IBV_QPT_RC, p.cqa, RC_SEND_OPS);
  p.b = make_qp(e, IBV_QPT_RC, p.cqb, RC_SEND_OPS);
  connect_rc(e, p.a, p.b);
  return p;
}

static void free_pair(struct pair *p) {
  CHECK(ibv_destroy_qp(p->a) == 0 && ibv_destroy_qp(p->b) == 0, "destroy QPs");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(p->cqa)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(p->cqb)) == 0, "destroy CQs");
}

/* B's signalled RDMA WRITE or READ of XFER bytes between e->local + local_off and `remote` through
 * `rkey`; the status it completes with. */
static enum ibv_wc_status rdma(struct env *e, struct pair *p, enum ibv_wr_opcode op, uint32_t rkey, void *remote,
                               size_t local_off, uint64_t wr_id) {
  struct ibv_sge s = {.addr = (uintptr_t)e->local + local_off, .length = XFER, .lkey = e->local_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  wr.wr.rdma.remote_addr = (uintptr_t)remote;
  wr.wr.rdma.rkey = rkey;
  CHECK(ibv_post_send(p->b, &wr, &bad) == 0, "ibv_post_send of an RDMA request");
  struct wc_ex w;
  poll_n(p->cqb, &w, 1);
  CHECK_EQ(w.wr_id, wr_id);
  if (w.status == IBV_WC_SUCCESS) CHECK_EQ(w.opcode, op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE);
  return w.status;
}

/* A fresh pair whose B writes through `rkey` at `remote`: refused with a remote access error. */
static void access_refused(struct env *e, uint32_t rkey, void *remote, const char *what) {
  struct pair p = make_pair(e);
  const enum ibv_wc_status st = rdma(e, &p, IBV_WR_RDMA_WRITE, rkey, remote, L_OFF, 99);
  CHECK(st == IBV_WC_REM_ACCESS_ERR, "%s: status %s, expected a remote access error", what, ibv_wc_status_str(st));
  free_pair(&p);
}

/* A WRITE and a READ through `rkey` inside the window at `win`: both succeed and move the right bytes. */
static void access_works(struct env *e, struct pair *p, uint32_t rkey, uint8_t *win, unsigned seed) {
  fill_pattern(e->local + L_OFF, XFER, seed);
  CHECK_EQ(rdma(e, p, IBV_WR_RDMA_WRITE, rkey, win + 16, L_OFF, 1), IBV_WC_SUCCESS);
  CHECK(memcmp(win + 16, e->local + L_OFF, XFER) == 0, "WRITE through a window: bytes differ");
  fill_pattern(win + 512, XFER, seed + 1);
  CHECK_EQ(rdma(e, p, IBV_WR_RDMA_READ, rkey, win + 512, L_OFF + 4096, 2), IBV_WC_SUCCESS);
  CHECK(memcmp(e->local + L_OFF + 4096, win + 512, XFER) == 0, "READ through a window: bytes differ");
}

/* The next completion on `cq`: wr_id and status, and a BIND_MW opcode if it succeeded. */
static void expect_bind(struct ibv_cq_ex *cq, uint64_t wr_id, enum ibv_wc_status status) {
  struct wc_ex w;
  poll_n(cq, &w, 1);
  CHECK_EQ(w.wr_id, wr_id);
  CHECK(w.status == status, "bind %llu: status %s, expected %s", (unsigned long long)wr_id,
        ibv_wc_status_str(w.status), ibv_wc_status_str(status));
  if (status == IBV_WC_SUCCESS) expect_success(&w, wr_id, IBV_WC_BIND_MW);
}

static struct ibv_mw_bind bind_of(uint64_t wr_id, struct ibv_mr *mr, void *addr, uint64_t length) {
  struct ibv_mw_bind b = {.wr_id = wr_id,
                          .send_flags = IBV_SEND_SIGNALED,
                          .bind_info = {.mr = mr, .addr = (uintptr_t)addr, .length = length,
                                        .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ}};
  return b;
}

static void check_caps(struct env *e) {
  struct ibv_device_attr a;
  CHECK(ibv_query_device(e->ctx, &a) == 0, "ibv_query_device");
  CHECK(a.max_mw > 0, "max_mw %d", a.max_mw);
  CHECK((a.device_cap_flags & IBV_DEVICE_MEM_WINDOW) && (a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
        "device_cap_flags %#x lack the memory window bits", a.device_cap_flags);
  struct ibv_device_attr_ex x;
  CHECK(ibv_query_device_ex(e->ctx, NULL, &x) == 0, "ibv_query_device_ex");
  CHECK(x.orig_attr.max_mw == a.max_mw && x.orig_attr.device_cap_flags == a.device_cap_flags,
        "ibv_query_device_ex disagrees");
}

static void type1(struct env *e, struct ibv_mr *mr, uint8_t *buf) {
  uint8_t *win = buf + WIN_OFF;
  struct ibv_mw *mw = ibv_alloc_mw(e->pd, IBV_MW_TYPE_1);
  CHECK(mw != NULL, "ibv_alloc_mw (type 1): %s", strerror(errno));
  CHECK(mw->type == IBV_MW_TYPE_1 && mw->pd == e->pd && mw->context == e->ctx, "the window's fields");
  struct pair p = make_pair(e);

  /* What the verbs refuse before anything is posted (verbs.h's ibv_bind_mw, then the provider's checks). */
  struct ibv_mw_bind b = bind_of(10, NULL, win, WIN_LEN);
  CHECK_EQ(ibv_bind_mw(p.a, mw, &b), EINVAL); /* a range without a region */
  b = bind_of(10, e->local_mr, e->local, WIN_LEN);
  CHECK_EQ(ibv_bind_mw(p.a, mw, &b), EINVAL); /* a region registered without IBV_ACCESS_MW_BIND */
  b = bind_of(10, mr, win, WIN_LEN);
  b.bind_info.mw_access_flags |= IBV_ACCESS_ZERO_BASED;
  CHECK_EQ(ibv_bind_mw(p.a, mw, &b), EINVAL); /* a type 1 window is not zero-based */
  expect_nothing(p.cqa);

  const uint32_t first = mw->rkey;
  b = bind_of(10, mr, win, WIN_LEN);
  CHECK_EQ(ibv_bind_mw(p.a, mw, &b), 0);
  CHECK_EQ(mw->rkey, ibv_inc_rkey(first)); /* the window takes its new rkey at the post, as on rxe */
  expect_bind(p.cqa, 10, IBV_WC_SUCCESS);
  access_works(e, &p, mw->rkey, win, 51);
  /* A type 1 window serves any QP of its PD. */
  struct pair q = make_pair(e);
  access_works(e, &q, mw->rkey, win, 53);
  free_pair(&q);
  /* The region stays while a window is bound to it. */
  CHECK_EQ(ibv_dereg_mr(mr), EINVAL);

  access_refused(e, mw->rkey, win + WIN_LEN - XFER / 2, "a WRITE across the window's end");
  access_refused(e, mw->rkey, win - XFER, "a WRITE before the window");
  free_pair(&p);

  /* Rebound: the previous rkey stops working at once, the new one works. */
  p = make_pair(e);
  const uint32_t before = mw->rkey;
  b = bind_of(11, mr, win, WIN_LEN);
  CHECK_EQ(ibv_bind_mw(p.a, mw, &b), 0);
  expect_bind(p.cqa, 11, IBV_WC_SUCCESS);
  CHECK(mw->rkey != before, "a rebind kept the rkey");
  access_works(e, &p, mw->rkey, win, 55);
  free_pair(&p);
  access_refused(e, before, win, "the rkey from before the rebind");

  /* Bound with length 0 (and no region): unbound, under yet another rkey that grants nothing. */
  p = make_pair(e);
  b = bind_of(12, NULL, NULL, 0);
  CHECK_EQ(ibv_bind_mw(p.a, mw, &b), 0);
  expect_bind(p.cqa, 12, IBV_WC_SUCCESS);
  free_pair(&p);
  access_refused(e, mw->rkey, win, "an unbound window");
  CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw (type 1)");
}

static void type2(struct env *e, struct ibv_mr *mr, uint8_t *buf) {
  uint8_t *win = buf + WIN2_OFF;
  struct ibv_mw *mw = ibv_alloc_mw(e->pd, IBV_MW_TYPE_2);
  CHECK(mw != NULL, "ibv_alloc_mw (type 2): %s", strerror(errno));
  CHECK(mw->type == IBV_MW_TYPE_2, "type %d", mw->type);
  struct pair p = make_pair(e);
  struct ibv_mw_bind b = bind_of(20, mr, win, WIN_LEN);
  CHECK_EQ(ibv_bind_mw(p.a, mw, &b), EINVAL); /* ibv_bind_mw is for type 1 windows */

  /* IBV_WR_BIND_MW through ibv_post_send; the application keeps the window's new rkey. */
  struct ibv_send_wr wr = {.wr_id = 21, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad = NULL;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = b.bind_info;
  CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "ibv_post_send of IBV_WR_BIND_MW");
  expect_bind(p.cqa, 21, IBV_WC_SUCCESS);
  mw->rkey = wr.bind_mw.rkey;
  access_works(e, &p, mw->rkey, win, 61);
  CHECK_EQ(ibv_dereg_mr(mr), EINVAL); /* bound to the region */

  /* Only through the QP that bound it: another pair in the same PD is refused. */
  access_refused(e, mw->rkey, win, "a type 2 window through a QP that did not bind it");

  /* LOCAL_INV of its rkey unbinds it. */
  struct ibv_send_wr inv = {.wr_id = 22, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
  inv.invalidate_rkey = mw->rkey;
  CHECK(ibv_post_send(p.a, &inv, &bad) == 0, "ibv_post_send of IBV_WR_LOCAL_INV");
  struct wc_ex w;
  poll_n(p.cqa, &w, 1);
  expect_success(&w, 22, IBV_WC_LOCAL_INV);
  CHECK_EQ(rdma(e, &p, IBV_WR_RDMA_WRITE, mw->rkey, win, L_OFF, 23), IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);

  /* Bound again, with ibv_wr_bind_mw; the peer's SEND_WITH_INV of its rkey unbinds it. */
  p = make_pair(e);
  const uint32_t rkey = ibv_inc_rkey(mw->rkey);
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.a);
  ibv_wr_start(x);
  x->wr_id = 24;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, mw, rkey, &b.bind_info);
  CHECK_EQ(ibv_wr_complete(x), 0);
  expect_bind(p.cqa, 24, IBV_WC_SUCCESS);
  mw->rkey = rkey;
  access_works(e, &p, mw->rkey, win, 63);
  post_recv(p.a, 25, e->remote, 4096, e->remote_mr->lkey);
  struct ibv_sge s = {.addr = (uintptr_t)e->local + L_OFF, .length = 8, .lkey = e->local_mr->lkey};
  struct ibv_send_wr send = {.wr_id = 26, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
                             .send_flags = IBV_SEND_SIGNALED};
  send.invalidate_rkey = mw->rkey;
  CHECK(ibv_post_send(p.b, &send, &bad) == 0, "ibv_post_send of IBV_WR_SEND_WITH_INV");
  w = expect_delivered(p.cqb, 26, p.cqa, 25);
  CHECK(w.wc_flags & IBV_WC_WITH_INV, "no IBV_WC_WITH_INV (flags %#x)", w.wc_flags);
  CHECK_EQ(w.imm, mw->rkey); /* ibv_wc_read_invalidated_rkey */
  CHECK_EQ(rdma(e, &p, IBV_WR_RDMA_WRITE, mw->rkey, win, L_OFF, 27), IBV_WC_REM_ACCESS_ERR);
  free_pair(&p);

  /* A type 2 window that is bound cannot be bound again: MW_BIND_ERR, and the QP goes to error. */
  p = make_pair(e);
  wr.wr_id = 28;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "ibv_post_send of IBV_WR_BIND_MW");
  expect_bind(p.cqa, 28, IBV_WC_SUCCESS);
  mw->rkey = wr.bind_mw.rkey;
  wr.wr_id = 29;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  CHECK(ibv_post_send(p.a, &wr, &bad) == 0, "ibv_post_send of IBV_WR_BIND_MW");
  expect_bind(p.cqa, 29, IBV_WC_MW_BIND_ERR);
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  CHECK(ibv_query_qp(p.a, &attr, IBV_QP_STATE, &init) == 0 && attr.qp_state == IBV_QPS_ERR,
        "the QP is in state %d after a failed bind", attr.qp_state);
  /* Still bound by the first bind; the QP that bound it goes with its pair, and the window with it. */
  free_pair(&p);
  CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw (type 2)");
}

void test_mw(struct env *e) {
  check_caps(e);
  uint8_t *buf = aligned_alloc(4096, WIN_BUF);
  CHECK(buf != NULL, "out of memory");
  memset(buf, 0, WIN_BUF);
  struct ibv_mr *mr = ibv_reg_mr(e->pd, buf, WIN_BUF,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_MW_BIND);
  CHECK(mr != NULL, "ibv_reg_mr with IBV_ACCESS_MW_BIND: %s", strerror(errno));
  errno = 0;
  CHECK(ibv_alloc_mw(e->pd, (enum ibv_mw_type)3) == NULL && errno == EINVAL, "a window of type 3 (errno %d)", errno);
  type1(e, mr, buf);
  type2(e, mr, buf);
  CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr once no window is bound: %s", strerror(errno));
  free(buf);
  printf("PASS memory windows (type 1 and 2: bind, access, rebind, unbind, invalidate, refusals)\n");
}
