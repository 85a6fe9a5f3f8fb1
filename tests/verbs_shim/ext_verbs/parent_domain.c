/* Thread domains and parent domains (ibv_alloc_td, ibv_alloc_parent_domain). A parent domain stands for its
 * protection domain in every verb: a region registered through it is the PD's (a QP on the plain PD
 * writes into it by its rkey), and QPs, SRQs and CQs made with it report it as theirs. What holds what:
 * ibv_dealloc_pd is EBUSY on a parent domain objects were made with and on a PD with a parent domain over
 * it, ibv_dealloc_td on a thread domain a parent domain names. What the verbs refuse. And the allocators
 * are never called: uroce's queues are rings uroced shares, so its provider allocates no buffer in the
 * process's memory (verbs_shim/parent_domain.cpp). */
#include <errno.h>
#include <string.h>

#include "ext_verbs.h"

static int allocator_calls;

static void *counting_alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment, uint64_t type) {
  (void)pd, (void)pd_context, (void)size, (void)alignment, (void)type;
  ++allocator_calls;
  return IBV_ALLOCATOR_USE_DEFAULT;
}

static void counting_free(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t type) {
  (void)pd, (void)pd_context, (void)ptr, (void)type;
  ++allocator_calls;
}

static void refused_parent(struct env *e, struct ibv_parent_domain_init_attr a, const char *what) {
  errno = 0;
  CHECK(ibv_alloc_parent_domain(e->ctx, &a) == NULL && errno == EINVAL, "%s: errno %d", what, errno);
}

static void send_one(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t length, uint32_t lkey) {
  struct ibv_sge s = {.addr = (uintptr_t)addr, .length = length, .lkey = lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post the SEND");
}

void test_parent_domain(struct env *e) {
  struct ibv_td_init_attr ta = {.comp_mask = 1};
  errno = 0;
  CHECK(ibv_alloc_td(e->ctx, &ta) == NULL && errno == EINVAL, "a thread domain with an unknown field");
  ta.comp_mask = 0;
  struct ibv_td *td = ibv_alloc_td(e->ctx, &ta);
  CHECK(td != NULL && td->context == e->ctx, "ibv_alloc_td: %s", strerror(errno));

  const struct ibv_parent_domain_init_attr good = {
      .pd = e->pd,
      .td = td,
      .comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
      .alloc = counting_alloc,
      .free = counting_free,
      .pd_context = e};
  struct ibv_parent_domain_init_attr bad = good;
  bad.pd = NULL;
  refused_parent(e, bad, "no PD");
  bad = good;
  bad.comp_mask |= 1u << 2;
  refused_parent(e, bad, "an unknown comp_mask bit");
  bad = good;
  bad.free = NULL;
  refused_parent(e, bad, "an allocator without its free");
  struct ibv_pd *parent = ibv_alloc_parent_domain(e->ctx, (struct ibv_parent_domain_init_attr *)&good);
  CHECK(parent != NULL && parent->context == e->ctx, "ibv_alloc_parent_domain: %s", strerror(errno));
  bad = good;
  bad.pd = parent;
  refused_parent(e, bad, "a parent domain over a parent domain");

  /* A CQ made with the parent domain; IBV_CQ_INIT_ATTR_MASK_PD with a plain PD is refused. */
  struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = STANDARD_WC_FLAGS,
                                   .comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = e->pd};
  errno = 0;
  CHECK(ibv_create_cq_ex(e->ctx, &ca) == NULL && errno == EINVAL, "a CQ with a plain PD as parent domain");
  ca.parent_domain = parent;
  struct ibv_cq_ex *cqa = ibv_create_cq_ex(e->ctx, &ca);
  CHECK(cqa != NULL, "ibv_create_cq_ex with a parent domain: %s", strerror(errno));
  struct ibv_cq_ex *cqb = make_cq_ex(e, 16, NULL);

  /* A on the parent domain (its own QP, SRQ and region), B on the plain PD. */
  enum { LEN = 4096 };
  uint8_t *buf = aligned_alloc(4096, LEN);
  CHECK(buf != NULL, "out of memory");
  memset(buf, 0, LEN);
  struct ibv_mr *mr = ibv_reg_mr(parent, buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(mr != NULL && mr->pd == parent, "ibv_reg_mr on a parent domain: %s", strerror(errno));
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
  struct ibv_srq *srq = ibv_create_srq(parent, &sa);
  CHECK(srq != NULL && srq->pd == parent, "ibv_create_srq on a parent domain: %s", strerror(errno));
  struct ibv_qp_init_attr qa = {.send_cq = ibv_cq_ex_to_cq(cqa), .recv_cq = ibv_cq_ex_to_cq(cqa), .srq = srq,
                                .cap = {.max_send_wr = 16, .max_send_sge = 1}, .qp_type = IBV_QPT_RC};
  struct ibv_qp *a = ibv_create_qp(parent, &qa);
  CHECK(a != NULL && a->pd == parent, "ibv_create_qp on a parent domain: %s", strerror(errno));
  struct ibv_qp *b = make_qp(e, IBV_QPT_RC, cqb, 0);
  connect_rc(e, a, b);

  /* A sends from the parent domain's region; B's SEND lands in A's SRQ, in that region. */
  fill_pattern(buf, 256, 7);
  post_recv(b, 10, e->local, 256, e->local_mr->lkey);
  send_one(a, 11, buf, 256, mr->lkey);
  expect_delivered(cqa, 11, cqb, 10);
  CHECK(memcmp(e->local, buf, 256) == 0, "A's SEND from its parent domain's region arrived changed");
  struct ibv_recv_wr rw = {.wr_id = 12, .num_sge = 1}, *bad_rw = NULL;
  struct ibv_sge rs = {.addr = (uintptr_t)buf + 1024, .length = 512, .lkey = mr->lkey};
  rw.sg_list = &rs;
  CHECK(ibv_post_srq_recv(srq, &rw, &bad_rw) == 0, "ibv_post_srq_recv");
  fill_pattern(e->remote, 512, 8);
  send_one(b, 13, e->remote, 512, e->remote_mr->lkey);
  expect_delivered(cqb, 13, cqa, 12);
  CHECK(memcmp(buf + 1024, e->remote, 512) == 0, "B's SEND into the parent domain's SRQ arrived changed");
  /* B (plain PD) writes into the region registered through the parent domain: it is the PD's. */
  struct rc_pair p = {.cqa = cqb, .cqb = cqa, .a = b, .b = a};
  fill_pattern(e->local, 256, 9);
  rdma_and_wait(&p, IBV_WR_RDMA_WRITE, 14, e->local, e->local_mr->lkey, buf + 2048, mr->rkey, 256);
  CHECK(memcmp(buf + 2048, e->local, 256) == 0, "the WRITE into the parent domain's region");

  /* What holds what. */
  CHECK_EQ(ibv_dealloc_pd(e->pd), EBUSY);   /* a parent domain is over it */
  CHECK_EQ(ibv_dealloc_td(td), EBUSY);      /* the parent domain names it */
  CHECK_EQ(ibv_dealloc_pd(parent), EBUSY);  /* its QP, SRQ and CQ */
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy the QPs");
  CHECK_EQ(ibv_dealloc_pd(parent), EBUSY);  /* its SRQ and CQ */
  CHECK(ibv_destroy_srq(srq) == 0, "destroy the SRQ");
  CHECK_EQ(ibv_dealloc_pd(parent), EBUSY);  /* its CQ */
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqa)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cqb)) == 0, "destroy CQs");
  CHECK(ibv_dereg_mr(mr) == 0, "dereg the parent domain's region");
  CHECK_EQ(ibv_dealloc_pd(parent), 0);
  CHECK_EQ(ibv_dealloc_td(td), 0);
  free(buf);
  CHECK_EQ(allocator_calls, 0);
  printf("PASS parent domains: thread domain, CQ, SRQ, QP and region through one; EBUSY while held\n");
}
