/* XRC through the verbs: a domain opened through a file (twice: the second open finds the first's domain,
 * as the kernel finds it by inode), two XRC SRQs each completing to its own CQ, an initiator QP that names
 * the target SRQ per request (ibv_wr_set_xrc_srqn and wr.qp_type.xrc.remote_srqn) and a target QP in the
 * domain. Checked: the bytes that land, every completion's CQ, QP number and length, and what is refused. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "ext_verbs.h"

enum { X_SRQ1 = 0, X_SRQ2 = 16 * 1024, X_WRITE = 32 * 1024, X_READ = 48 * 1024, X_LEN = 3000 };

static struct ibv_xrcd *open_xrcd(struct env *e, int fd, int oflags) {
  struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd,
                                 .oflags = oflags};
  return ibv_open_xrcd(e->ctx, &a);
}

static struct ibv_srq *xrc_srq(struct env *e, struct ibv_xrcd *xrcd, struct ibv_cq_ex *cq) {
  struct ibv_srq_init_attr_ex a = {
      .attr = {.max_wr = 16, .max_sge = 1},
      .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
      .srq_type = IBV_SRQT_XRC,
      .pd = e->pd,
      .xrcd = xrcd,
      .cq = ibv_cq_ex_to_cq(cq),
  };
  struct ibv_srq *srq = ibv_create_srq_ex(e->ctx, &a);
  CHECK(srq != NULL, "ibv_create_srq_ex (XRC): %s", strerror(errno));
  return srq;
}

static void srq_recv(struct ibv_srq *srq, uint64_t wr_id, void *addr, uint32_t length, uint32_t lkey) {
  struct ibv_sge s = {.addr = (uintptr_t)addr, .length = length, .lkey = lkey};
  struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1}, *bad = NULL;
  CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "ibv_post_srq_recv");
}

void test_xrc(struct env *e) {
  char path[] = "/tmp/uroce-xrcd-XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
  /* A file with no domain yet: without O_CREAT nothing is opened (the kernel's EINVAL). */
  errno = 0;
  CHECK(open_xrcd(e, fd, 0) == NULL && errno == EINVAL, "an XRC domain opened without O_CREAT (errno %d)", errno);
  struct ibv_xrcd *x1 = open_xrcd(e, fd, O_CREAT);
  CHECK(x1 != NULL, "ibv_open_xrcd: %s", strerror(errno));
  struct ibv_xrcd *x2 = open_xrcd(e, fd, 0); /* the same domain, found through the file */
  CHECK(x2 != NULL, "ibv_open_xrcd of an existing domain: %s", strerror(errno));
  errno = 0;
  CHECK(open_xrcd(e, fd, O_CREAT | O_EXCL) == NULL && errno == EEXIST, "O_EXCL on an existing domain (errno %d)",
        errno);

  struct ibv_cq_ex *send_cq = make_cq_ex(e, 16, NULL), *cq1 = make_cq_ex(e, 16, NULL), *cq2 = make_cq_ex(e, 16, NULL);
  struct ibv_srq *srq1 = xrc_srq(e, x1, cq1), *srq2 = xrc_srq(e, x2, cq2);
  uint32_t n1 = 0, n2 = 0;
  CHECK(ibv_get_srq_num(srq1, &n1) == 0 && ibv_get_srq_num(srq2, &n2) == 0 && n1 != n2, "SRQ numbers %u %u", n1, n2);

  struct ibv_qp_init_attr_ex ia = {
      .send_cq = ibv_cq_ex_to_cq(send_cq),
      .cap = {.max_send_wr = 16, .max_send_sge = 1},
      .qp_type = IBV_QPT_XRC_SEND,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = e->pd,
      .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ,
  };
  struct ibv_qp *ini = ibv_create_qp_ex(e->ctx, &ia);
  CHECK(ini != NULL, "XRC initiator: %s", strerror(errno));
  /* The target is created in the domain's second handle: the SRQs of the first are in its domain too. */
  struct ibv_qp_init_attr_ex ta = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x2};
  struct ibv_qp *tgt = ibv_create_qp_ex(e->ctx, &ta);
  CHECK(tgt != NULL, "XRC target: %s", strerror(errno));
  qp_to_rts(e, ini, tgt->qp_num);
  qp_to_rts(e, tgt, ini->qp_num);

  fill_pattern(e->local, 4 * X_LEN, 41);
  fill_pattern(e->remote + X_READ, X_LEN, 42);
  srq_recv(srq1, 11, e->remote + X_SRQ1, 8192, e->remote_mr->lkey);
  srq_recv(srq2, 21, e->remote + X_SRQ2, 8192, e->remote_mr->lkey);
  srq_recv(srq2, 22, e->remote + X_SRQ2 + 8192, 8192, e->remote_mr->lkey);

  /* The work-request API: each request names its SRQ. */
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(ini);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 1;
  ibv_wr_send(x);
  ibv_wr_set_xrc_srqn(x, n1);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, X_LEN);
  x->wr_id = 2;
  ibv_wr_send(x);
  ibv_wr_set_xrc_srqn(x, n2);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local + X_LEN, 100);
  x->wr_id = 3;
  ibv_wr_rdma_write(x, e->remote_mr->rkey, (uintptr_t)e->remote + X_WRITE);
  ibv_wr_set_xrc_srqn(x, n1);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local + 2 * X_LEN, X_LEN);
  x->wr_id = 4;
  ibv_wr_rdma_read(x, e->remote_mr->rkey, (uintptr_t)e->remote + X_READ);
  ibv_wr_set_xrc_srqn(x, n2);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local + 3 * X_LEN, X_LEN);
  CHECK_EQ(ibv_wr_complete(x), 0);
  /* The classic API: wr.qp_type.xrc.remote_srqn. */
  struct ibv_sge s = {.addr = (uintptr_t)e->local, .length = 7, .lkey = e->local_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 5, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  wr.qp_type.xrc.remote_srqn = n2;
  CHECK(ibv_post_send(ini, &wr, &bad) == 0, "ibv_post_send on an XRC initiator");

  struct wc_ex w[5];
  poll_n(send_cq, w, 5);
  const enum ibv_wc_opcode sent[] = {IBV_WC_SEND, IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ, IBV_WC_SEND};
  for (int i = 0; i < 5; ++i) expect_success(&w[i], (uint64_t)i + 1, sent[i]);
  poll_n(cq1, w, 1); /* each SEND completes to the CQ of the SRQ it named, with the target's QP number */
  expect_success(&w[0], 11, IBV_WC_RECV);
  CHECK_EQ(w[0].byte_len, X_LEN);
  CHECK_EQ(w[0].qp_num, tgt->qp_num);
  poll_n(cq2, w, 2);
  expect_success(&w[0], 21, IBV_WC_RECV);
  CHECK_EQ(w[0].byte_len, 100);
  CHECK_EQ(w[0].qp_num, tgt->qp_num);
  expect_success(&w[1], 22, IBV_WC_RECV);
  CHECK_EQ(w[1].byte_len, 7);
  expect_nothing(cq1);
  CHECK(memcmp(e->remote + X_SRQ1, e->local, X_LEN) == 0, "SEND into SRQ 1: bytes differ");
  CHECK(memcmp(e->remote + X_SRQ2, e->local + X_LEN, 100) == 0, "SEND into SRQ 2: bytes differ");
  CHECK(memcmp(e->remote + X_SRQ2 + 8192, e->local, 7) == 0, "classic SEND into SRQ 2: bytes differ");
  CHECK(memcmp(e->remote + X_WRITE, e->local + 2 * X_LEN, X_LEN) == 0, "XRC RDMA WRITE: bytes differ");
  CHECK(memcmp(e->local + 3 * X_LEN, e->remote + X_READ, X_LEN) == 0, "XRC RDMA READ: bytes differ");

  /* Each half has only its side of a QP. */
  struct ibv_recv_wr rwr = {.wr_id = 9, .sg_list = &s, .num_sge = 1}, *rbad = NULL;
  CHECK(ibv_post_recv(tgt, &rwr, &rbad) == EINVAL, "ibv_post_recv on an XRC target");
  CHECK(ibv_post_recv(ini, &rwr, &rbad) == EINVAL, "ibv_post_recv on an XRC initiator");
  CHECK(ibv_post_send(tgt, &wr, &bad) == EINVAL, "ibv_post_send on an XRC target");
  /* A domain with SRQs and a target in it stays open until they are gone. */
  CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0, "destroy XRC QPs");
  CHECK(ibv_destroy_srq(srq1) == 0 && ibv_destroy_srq(srq2) == 0, "destroy XRC SRQs");
  CHECK(ibv_close_xrcd(x2) == 0 && ibv_close_xrcd(x1) == 0, "close the XRC domain's two handles");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(send_cq)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cq1)) == 0 &&
            ibv_destroy_cq(ibv_cq_ex_to_cq(cq2)) == 0,
        "destroy CQs");
  /* The last close took the domain: the file has none now. */
  errno = 0;
  CHECK(open_xrcd(e, fd, 0) == NULL && errno == EINVAL, "the domain outlived its last close (errno %d)", errno);
  close(fd);
  unlink(path);
  printf("PASS XRC (a domain shared through its file, two SRQs, initiator and target)\n");
}
