/* Packet pacing on a raw packet QP: the capabilities ibv_query_device_ex reports, what
 * ibv_modify_qp_rate_limit (the verbs_context slot, with a burst) and ibv_modify_qp with IBV_QP_RATE_LIMIT
 * accept and refuse, and frames leaving no faster than the rate once the burst is spent. The frames go to a
 * made-up MAC and leave the loopback port unclaimed. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "ext_verbs.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct ibv_qp *raw_qp(struct env *e, struct ibv_cq_ex *cq) {
  struct ibv_qp_init_attr init = {.send_cq = ibv_cq_ex_to_cq(cq),
                                  .recv_cq = ibv_cq_ex_to_cq(cq),
                                  .cap = {.max_send_wr = 64, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
                                  .qp_type = IBV_QPT_RAW_PACKET};
  struct ibv_qp *qp = ibv_create_qp(e->pd, &init);
  CHECK(qp != NULL, "create a raw packet QP: %s", strerror(errno));
  return qp;
}

static void raw_to_rts(struct ibv_qp *qp, uint32_t rate_kbps) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) == 0, "INIT");
  a.qp_state = IBV_QPS_RTR;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "RTR");
  a.qp_state = IBV_QPS_RTS;
  a.rate_limit = rate_kbps;  /* as perftest's --rate_limit_type=PP sets it, on the way to RTS */
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | (rate_kbps ? IBV_QP_RATE_LIMIT : 0)) == 0, "RTS");
}

/* Sends n frames of `size` bytes from e->local; returns the milliseconds until the last completed. */
static double send_frames(struct env *e, struct ibv_qp *qp, struct ibv_cq_ex *cq, int n, uint32_t size) {
  static const uint8_t frame_header[14] = {0x02, 0, 0, 0, 0, 0x0a, 0x02, 0, 0, 0, 0, 0x0b, 0x88, 0xb5};
  memcpy(e->local, frame_header, sizeof frame_header);
  const double start = now_ms();
  for (int i = 0; i < n; ++i) {
    struct ibv_sge sge = {.addr = (uintptr_t)e->local, .length = size, .lkey = e->local_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad = NULL;
    CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post frame %d", i);
  }
  struct wc_ex wc[64];
  poll_n(cq, wc, n);
  for (int i = 0; i < n; ++i) expect_success(&wc[i], (uint64_t)i, IBV_WC_SEND);
  return now_ms() - start;
}

void test_packet_pacing(struct env *e) {
  struct ibv_device_attr_ex dev;
  CHECK(ibv_query_device_ex(e->ctx, NULL, &dev) == 0, "query_device_ex");
  CHECK_EQ(dev.packet_pacing_caps.qp_rate_limit_min, 1);
  CHECK_EQ(dev.packet_pacing_caps.qp_rate_limit_max, 100000000);
  CHECK_EQ(dev.packet_pacing_caps.supported_qpts, 1u << IBV_QPT_RAW_PACKET);

  struct ibv_cq_ex *cq = make_cq_ex(e, 128, NULL);
  struct ibv_qp *qp = raw_qp(e, cq);
  struct ibv_qp_rate_limit_attr rl = {.rate_limit = 8000};
  CHECK_EQ(ibv_modify_qp_rate_limit(qp, &rl), EINVAL);  /* RESET: only on the way to RTS and in it */
  raw_to_rts(qp, 0);
  rl.comp_mask = 1;
  CHECK_EQ(ibv_modify_qp_rate_limit(qp, &rl), EINVAL);  /* no comp_mask bit is known */
  rl = (struct ibv_qp_rate_limit_attr){.max_burst_sz = 1000};
  CHECK_EQ(ibv_modify_qp_rate_limit(qp, &rl), EINVAL);  /* a burst without a rate, as mlx5 */
  rl = (struct ibv_qp_rate_limit_attr){.rate_limit = 100000001};
  CHECK_EQ(ibv_modify_qp_rate_limit(qp, &rl), EINVAL);  /* past qp_rate_limit_max */

  /* 8,000 kbit/s is 1,000 bytes a millisecond; the bucket holds one 1,000-byte frame: of 11 frames two
   * go at once (the first, and the one the bucket holds) and the other nine a millisecond apart, so the
   * last completes 9 ms on, not sooner. */
  rl = (struct ibv_qp_rate_limit_attr){.rate_limit = 8000, .max_burst_sz = 1000, .typical_pkt_sz = 1000};
  CHECK_EQ(ibv_modify_qp_rate_limit(qp, &rl), 0);
  double ms = send_frames(e, qp, cq, 11, 1000);
  CHECK(ms >= 8.9, "11 frames of 1,000 bytes at 8,000 kbit/s took %.2f ms, under 9", ms);
  /* The same through ibv_modify_qp on a second QP, as perftest sets it: 4,000 kbit/s, the default bucket
   * (9,018 bytes): ten frames at once (the first, and nine the bucket holds), then 2 ms apart, the 15th
   * at 9.96 ms. */
  struct ibv_qp *qp2 = raw_qp(e, cq);
  raw_to_rts(qp2, 4000);
  ms = send_frames(e, qp2, cq, 15, 1000);
  CHECK(ms >= 9.9, "15 frames of 1,000 bytes at 4,000 kbit/s took %.2f ms, under 9.96", ms);
  /* Rate 0 lifts the limit. */
  rl = (struct ibv_qp_rate_limit_attr){0};
  CHECK_EQ(ibv_modify_qp_rate_limit(qp, &rl), 0);
  send_frames(e, qp, cq, 32, 1000);

  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_qp(qp2) == 0, "destroy qp");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");
  printf("PASS packet pacing: caps, ibv_modify_qp_rate_limit's checks, paced frames\n");
}
