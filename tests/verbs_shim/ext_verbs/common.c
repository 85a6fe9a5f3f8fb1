/* What the sections share: the device, memory, CQs, QPs and their connection, and cq_ex polling. */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ext_verbs.h"

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

void fill_pattern(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = (uint8_t)(i * 131 + seed * 17 + (i >> 8));
}

static uint8_t *registered(struct env *e, struct ibv_mr **mr) {
  uint8_t *p = aligned_alloc(4096, BUF_SIZE);
  CHECK(p != NULL, "out of memory");
  memset(p, 0, BUF_SIZE);
  *mr = ibv_reg_mr(e->pd, p, BUF_SIZE,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC);
  CHECK(*mr != NULL, "ibv_reg_mr: %s", strerror(errno));
  return p;
}

void env_open(struct env *e) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list != NULL && n >= 1, "no RDMA device (is this running under uroce-run with a uroced?)");
  CHECK(strcmp(ibv_get_device_name(list[0]), "uroce0") == 0, "device %s is not uroce's", ibv_get_device_name(list[0]));
  e->ctx = ibv_open_device(list[0]);
  CHECK(e->ctx != NULL, "ibv_open_device: %s", strerror(errno));
  ibv_free_device_list(list);
  e->pd = ibv_alloc_pd(e->ctx);
  CHECK(e->pd != NULL, "ibv_alloc_pd: %s", strerror(errno));
  e->local = registered(e, &e->local_mr);
  e->remote = registered(e, &e->remote_mr);
  for (int i = 0; i < 2; ++i) {
    CHECK(ibv_query_gid(e->ctx, 1, i, &e->gid[i]) == 0, "GID %d missing (start uroced with two --ip)", i);
  }
}

void env_close(struct env *e) {
  CHECK(ibv_dereg_mr(e->local_mr) == 0, "dereg");
  CHECK(ibv_dereg_mr(e->remote_mr) == 0, "dereg");
  CHECK(ibv_dealloc_pd(e->pd) == 0, "dealloc_pd");
  CHECK(ibv_close_device(e->ctx) == 0, "close_device");
  free(e->local);
  free(e->remote);
}

struct ibv_cq_ex *make_cq_ex(struct env *e, int cqe, struct ibv_comp_channel *channel) {
  struct ibv_cq_init_attr_ex a = {
      .cqe = (uint32_t)cqe, .cq_context = e, .channel = channel, .wc_flags = STANDARD_WC_FLAGS};
  struct ibv_cq_ex *cq = ibv_create_cq_ex(e->ctx, &a);
  CHECK(cq != NULL, "ibv_create_cq_ex: %s", strerror(errno));
  return cq;
}

struct ibv_qp *make_qp(struct env *e, enum ibv_qp_type type, struct ibv_cq_ex *cq, uint64_t send_ops) {
  struct ibv_qp_init_attr_ex a = {
      .send_cq = ibv_cq_ex_to_cq(cq),
      .recv_cq = ibv_cq_ex_to_cq(cq),
      .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 4, .max_recv_sge = 4, .max_inline_data = 64},
      .qp_type = type,
      .comp_mask = IBV_QP_INIT_ATTR_PD,
      .pd = e->pd,
  };
  if (send_ops) {
    a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = send_ops;
  }
  struct ibv_qp *qp = send_ops ? ibv_create_qp_ex(e->ctx, &a) : ibv_create_qp(e->pd, (struct ibv_qp_init_attr *)&a);
  CHECK(qp != NULL, "creating a QP: %s", strerror(errno));
  return qp;
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  const int rc = ibv_modify_qp(qp, a, mask);
  CHECK(rc == 0, "ibv_modify_qp to state %d: %s", a->qp_state, strerror(rc));
}

/* RC with the masks ibv_rc_pingpong uses; XRC's halves with ibv_xsrq_pingpong's: an initiator takes no
 * receive attributes (and no access rights), a target no retry counts. */
void qp_to_rts(struct env *e, struct ibv_qp *qp, uint32_t remote_qpn) {
  const int initiator = qp->qp_type == IBV_QPT_XRC_SEND, target = qp->qp_type == IBV_QPT_XRC_RECV;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .port_num = 1,
                          .qp_access_flags = initiator ? 0
                                                       : IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
  modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = e->gid[0];
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                     (initiator ? 0 : IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  modify(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN |
                     (target ? 0 : IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

void connect_rc(struct env *e, struct ibv_qp *a, struct ibv_qp *b) {
  qp_to_rts(e, a, b->qp_num);
  qp_to_rts(e, b, a->qp_num);
}

struct rc_pair rc_pair_open(struct env *e) {
  struct rc_pair p;
  p.cqa = make_cq_ex(e, 16, NULL);
  p.cqb = make_cq_ex(e, 16, NULL);
  p.a = make_qp(e, IBV_QPT_RC, p.cqa, 0);
  p.b = make_qp(e, IBV_QPT_RC, p.cqb, 0);
  connect_rc(e, p.a, p.b);
  return p;
}

void rc_pair_close(struct rc_pair *p) {
  CHECK(ibv_destroy_qp(p->a) == 0 && ibv_destroy_qp(p->b) == 0, "destroy qp");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(p->cqa)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(p->cqb)) == 0, "destroy cq");
}

void rdma_and_wait(struct rc_pair *p, enum ibv_wr_opcode op, uint64_t wr_id, void *local, uint32_t lkey, void *remote,
                   uint32_t rkey, uint32_t length) {
  struct ibv_sge s = {.addr = (uintptr_t)local, .length = length, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  wr.wr.rdma.remote_addr = (uintptr_t)remote;
  wr.wr.rdma.rkey = rkey;
  CHECK(ibv_post_send(p->a, &wr, &bad) == 0, "post the %s", op == IBV_WR_RDMA_READ ? "READ" : "WRITE");
  struct wc_ex w;
  poll_n(p->cqa, &w, 1);
  expect_success(&w, wr_id, op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE);
}

void ready_ud(struct ibv_qp *qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY};
  modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  a.qp_state = IBV_QPS_RTR;
  modify(qp, &a, IBV_QP_STATE);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  modify(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

void post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t length, uint32_t lkey) {
  struct ibv_sge s = {.addr = (uintptr_t)addr, .length = length, .lkey = lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad = NULL;
  CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

static void read_current(struct ibv_cq_ex *cq, struct wc_ex *w) {
  w->wr_id = cq->wr_id;
  w->status = cq->status;
  w->opcode = ibv_wc_read_opcode(cq);
  w->vendor_err = ibv_wc_read_vendor_err(cq);
  w->byte_len = ibv_wc_read_byte_len(cq);
  w->imm = ibv_wc_read_imm_data(cq);
  w->qp_num = ibv_wc_read_qp_num(cq);
  w->src_qp = ibv_wc_read_src_qp(cq);
  w->wc_flags = ibv_wc_read_wc_flags(cq);
  w->slid = ibv_wc_read_slid(cq);
  w->sl = ibv_wc_read_sl(cq);
  w->dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
}

/* Up to n completions, waiting at most `ms`; returns how many. */
static int collect(struct ibv_cq_ex *cq, struct wc_ex *out, int n, int ms) {
  const long long deadline = now_ms() + ms;
  int got = 0;
  while (got < n && now_ms() < deadline) {
    struct ibv_poll_cq_attr attr = {.comp_mask = 0};
    int rc = ibv_start_poll(cq, &attr);
    if (rc == ENOENT) {
      usleep(50);
      continue;
    }
    CHECK(rc == 0, "ibv_start_poll: %d", rc);
    for (;;) {
      read_current(cq, &out[got++]);
      if (got == n) break;
      rc = ibv_next_poll(cq);
      if (rc == ENOENT) break;
      CHECK(rc == 0, "ibv_next_poll: %d", rc);
    }
    ibv_end_poll(cq);
  }
  return got;
}

void poll_n(struct ibv_cq_ex *cq, struct wc_ex *out, int n) {
  const int got = collect(cq, out, n, TIMEOUT_MS);
  CHECK(got == n, "%d of %d completions arrived", got, n);
}

void expect_nothing(struct ibv_cq_ex *cq) {
  struct wc_ex w;
  const int got = collect(cq, &w, 1, QUIET_MS);
  CHECK(got == 0, "an unexpected completion arrived: wr_id %#llx status %d", (unsigned long long)w.wr_id, w.status);
}

void expect_success(const struct wc_ex *w, uint64_t wr_id, enum ibv_wc_opcode opcode) {
  CHECK(w->status == IBV_WC_SUCCESS, "wr_id %#llx: status %s", (unsigned long long)w->wr_id,
        ibv_wc_status_str(w->status));
  CHECK_EQ(w->wr_id, wr_id);
  CHECK_EQ(w->opcode, opcode);
  CHECK_EQ(w->vendor_err, 0);
  CHECK_EQ(w->slid, 0);             /* RoCE has no LIDs */
  CHECK_EQ(w->dlid_path_bits, 0);
}

struct wc_ex expect_delivered(struct ibv_cq_ex *sender, uint64_t sent, struct ibv_cq_ex *receiver, uint64_t received) {
  struct wc_ex w;
  poll_n(sender, &w, 1);
  expect_success(&w, sent, IBV_WC_SEND);
  poll_n(receiver, &w, 1);
  expect_success(&w, received, IBV_WC_RECV);
  return w;
}
