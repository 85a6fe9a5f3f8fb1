/* ibv_create_cq_ex's attributes, and ibv_resize_cq up and down with completions outstanding: none lost,
 * none twice, their order kept, and an armed CQ stays armed across a resize. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "ext_verbs.h"

static void refused_cq(struct env *e, struct ibv_cq_init_attr_ex a, int want, const char *what) {
  errno = 0;
  struct ibv_cq_ex *cq = ibv_create_cq_ex(e->ctx, &a);
  CHECK(cq == NULL && errno == want, "%s: got %p, errno %d (expected %d)", what, (void *)cq, errno, want);
}

void test_cq_ex_attributes(struct env *e) {
  /* What a completion cannot carry here is refused (timestamps it can: cq_ex_timestamps.c). */
  const struct ibv_cq_init_attr_ex base = {.cqe = 16, .wc_flags = STANDARD_WC_FLAGS};
  struct ibv_cq_init_attr_ex a = base;
  a.wc_flags |= IBV_WC_EX_WITH_FLOW_TAG;
  refused_cq(e, a, EOPNOTSUPP, "flow tags");
  a = base;
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  refused_cq(e, a, EOPNOTSUPP, "IGNORE_OVERRUN");
  a = base;
  a.comp_mask = 1u << 7;
  refused_cq(e, a, EINVAL, "an undefined comp_mask bit");

  struct ibv_comp_channel *channel = ibv_create_comp_channel(e->ctx);
  CHECK(channel != NULL, "ibv_create_comp_channel: %s", strerror(errno));
  a = base;
  a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  a.channel = channel;
  a.cq_context = e;
  struct ibv_cq_ex *cq = ibv_create_cq_ex(e->ctx, &a);
  CHECK(cq != NULL, "ibv_create_cq_ex: %s", strerror(errno));
  CHECK(cq->channel == channel && cq->cq_context == e && cq->cqe >= 16 && cq->context == e->ctx, "CQ fields");
  /* Empty: ENOENT, and the CQ is not left locked (a second poll of either kind returns at once). */
  struct ibv_poll_cq_attr pa = {.comp_mask = 0};
  CHECK_EQ(ibv_start_poll(cq, &pa), ENOENT);
  CHECK_EQ(ibv_start_poll(cq, &pa), ENOENT);
  struct ibv_wc wc;
  CHECK_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc), 0);
  pa.comp_mask = 1;
  CHECK_EQ(ibv_start_poll(cq, &pa), EINVAL);
  /* A channel with a CQ on it cannot go. */
  CHECK_EQ(ibv_destroy_comp_channel(channel), EBUSY);
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");
  CHECK(ibv_destroy_comp_channel(channel) == 0, "destroy channel");
  printf("PASS cq_ex attributes (no timestamps, flags, comp_mask, empty poll)\n");
}

/* `count` signalled 8-byte WRITEs, wr_ids from `first`, each writing its wr_id at remote + 192 KiB +
 * 8 * (wr_id - base); returns once the last one's data has landed and its completion had time to. */
enum { RESIZE_AREA = 192 * 1024, RESIZE_BASE = 2000 };

static void writes(struct env *e, struct ibv_qp *qp, uint64_t first, int count, int batched) {
  uint64_t *src = (uint64_t *)(e->local + RESIZE_AREA);
  uint64_t *dst = (uint64_t *)(e->remote + RESIZE_AREA);
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
  struct ibv_sge sge[64];
  struct ibv_send_wr wr[64], *bad = NULL;
  if (batched) ibv_wr_start(x);
  for (int i = 0; i < count; ++i) {
    const uint64_t id = first + (uint64_t)i, slot = id - RESIZE_BASE;
    src[slot] = id;
    sge[i] = (struct ibv_sge){(uintptr_t)&src[slot], 8, e->local_mr->lkey};
    if (batched) {
      x->wr_id = id;
      x->wr_flags = IBV_SEND_SIGNALED;
      ibv_wr_rdma_write(x, e->remote_mr->rkey, (uintptr_t)&dst[slot]);
      ibv_wr_set_sge(x, sge[i].lkey, sge[i].addr, 8);
    } else {
      wr[i] = (struct ibv_send_wr){.wr_id = id, .next = i + 1 < count ? &wr[i + 1] : NULL, .sg_list = &sge[i],
                                   .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED};
      wr[i].wr.rdma.remote_addr = (uintptr_t)&dst[slot];
      wr[i].wr.rdma.rkey = e->remote_mr->rkey;
    }
  }
  if (batched) {
    CHECK_EQ(ibv_wr_complete(x), 0);
  } else {
    CHECK(ibv_post_send(qp, wr, &bad) == 0, "ibv_post_send");
  }
  const uint64_t last = first + (uint64_t)count - 1;
  for (int ms = 0; __atomic_load_n(&dst[last - RESIZE_BASE], __ATOMIC_ACQUIRE) != last; ++ms) {
    CHECK(ms < TIMEOUT_MS, "WRITE %llu never landed", (unsigned long long)last);
    usleep(1000);
  }
  usleep(200 * 1000);  /* its ACK, and the completion, follow the data */
}

static void expect_ids(struct ibv_cq_ex *cq, uint64_t first, int count) {
  struct wc_ex w[64];
  poll_n(cq, w, count);
  for (int i = 0; i < count; ++i) expect_success(&w[i], first + (uint64_t)i, IBV_WC_RDMA_WRITE);
}

void test_resize(struct env *e) {
  struct ibv_comp_channel *channel = ibv_create_comp_channel(e->ctx);
  CHECK(channel != NULL, "ibv_create_comp_channel: %s", strerror(errno));
  struct ibv_cq_ex *cq = make_cq_ex(e, 4, channel), *cqd = make_cq_ex(e, 16, NULL);
  struct ibv_cq *base = ibv_cq_ex_to_cq(cq);
  CHECK_EQ(base->cqe, 4);
  struct ibv_qp *c = make_qp(e, IBV_QPT_RC, cq, IBV_QP_EX_WITH_RDMA_WRITE);
  struct ibv_qp *d = make_qp(e, IBV_QPT_RC, cqd, 0);
  connect_rc(e, c, d);

  /* A full CQ grows, keeping its completions in order; then 22 more, posted the classic way. */
  writes(e, c, RESIZE_BASE, 4, 1);
  CHECK_EQ(ibv_resize_cq(base, 64), 0);
  CHECK_EQ(base->cqe, 64);
  writes(e, c, RESIZE_BASE + 4, 22, 0);
  /* 26 outstanding do not fit in 16: refused, nothing changed. */
  CHECK_EQ(ibv_resize_cq(base, 16), EINVAL);
  CHECK_EQ(base->cqe, 64);
  CHECK_EQ(ibv_resize_cq(base, 0), EINVAL);
  CHECK_EQ(ibv_resize_cq(base, 1 << 30), EINVAL);
  expect_ids(cq, RESIZE_BASE, 12);
  /* 14 do fit: shrink with them outstanding. */
  CHECK_EQ(ibv_resize_cq(base, 16), 0);
  CHECK_EQ(base->cqe, 16);
  expect_ids(cq, RESIZE_BASE + 12, 14);
  expect_nothing(cq);

  /* Armed before a resize, the CQ signals its channel after it. */
  CHECK_EQ(ibv_req_notify_cq(base, 0), 0);
  CHECK_EQ(ibv_resize_cq(base, 8), 0);
  CHECK_EQ(base->cqe, 8);
  writes(e, c, RESIZE_BASE + 26, 1, 1);
  struct pollfd p = {.fd = channel->fd, .events = POLLIN};
  CHECK(poll(&p, 1, TIMEOUT_MS) == 1, "no completion event after the resize");
  struct ibv_cq *fired = NULL;
  void *context = NULL;
  CHECK(ibv_get_cq_event(channel, &fired, &context) == 0, "ibv_get_cq_event");
  CHECK(fired == base && context == e, "the event names another CQ");
  ibv_ack_cq_events(fired, 1);
  expect_ids(cq, RESIZE_BASE + 26, 1);

  CHECK(ibv_destroy_qp(c) == 0 && ibv_destroy_qp(d) == 0, "destroy qp");
  CHECK(ibv_destroy_cq(base) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cqd)) == 0, "destroy cq");
  CHECK(ibv_destroy_comp_channel(channel) == 0, "destroy channel");
  printf("PASS resize_cq up and down with completions outstanding; armed across a resize\n");
}
