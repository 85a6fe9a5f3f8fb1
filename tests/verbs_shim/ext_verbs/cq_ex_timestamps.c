/* Completion timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP and its wall-clock form) and the device
 * clock (ibv_query_rt_values_ex): the device counts nanoseconds on CLOCK_MONOTONIC's scale, so every
 * timestamp must fall between this program's own clock readings around the completion, and two
 * completions 20 ms apart must be stamped 20 ms apart. */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ext_verbs.h"

enum { SLACK_NS = 2 * 1000 * 1000, GAP_NS = 20 * 1000 * 1000 };

static uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A SEND from a to b; both completions' raw and wall-clock timestamps, in the order polled (the send's,
 * then the receive's). */
static void timed_send(struct env *e, struct ibv_qp *a, struct ibv_qp *b, struct ibv_cq_ex *cq, uint64_t ts[2],
                       uint64_t wall[2]) {
  post_recv(b, 2, e->remote, 64, e->remote_mr->lkey);
  struct ibv_sge sge = {.addr = (uintptr_t)e->local, .length = 64, .lkey = e->local_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED};
  struct ibv_send_wr *bad = NULL;
  CHECK(ibv_post_send(a, &wr, &bad) == 0, "ibv_post_send");
  int got = 0;
  for (int spins = 0; got < 2 && spins < 1000000; ++spins) {
    struct ibv_poll_cq_attr attr = {.comp_mask = 0};
    if (ibv_start_poll(cq, &attr) == ENOENT) {
      usleep(20);
      continue;
    }
    do {
      CHECK(cq->status == IBV_WC_SUCCESS, "status %s", ibv_wc_status_str(cq->status));
      CHECK(got < 2, "a third completion");
      ts[got] = ibv_wc_read_completion_ts(cq);
      wall[got] = ibv_wc_read_completion_wallclock_ns(cq);
      ++got;
    } while (ibv_next_poll(cq) == 0);
    ibv_end_poll(cq);
  }
  CHECK(got == 2, "%d of 2 completions", got);
}

void test_completion_timestamps(struct env *e) {
  struct ibv_device_attr_ex dev;
  CHECK(ibv_query_device_ex(e->ctx, NULL, &dev) == 0, "ibv_query_device_ex");
  CHECK_EQ(dev.completion_timestamp_mask, ~0ull);
  CHECK_EQ(dev.hca_core_clock, 1000000); /* kHz: one tick a nanosecond */

  /* The raw clock now, as mlx5 gives it (all in tv_nsec); an undefined mask bit is EINVAL. */
  struct ibv_values_ex values = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
  const uint64_t before = clock_ns(CLOCK_MONOTONIC);
  CHECK(ibv_query_rt_values_ex(e->ctx, &values) == 0, "ibv_query_rt_values_ex");
  const uint64_t after = clock_ns(CLOCK_MONOTONIC);
  CHECK_EQ(values.comp_mask, IBV_VALUES_MASK_RAW_CLOCK);
  CHECK_EQ(values.raw_clock.tv_sec, 0);
  const uint64_t raw = (uint64_t)values.raw_clock.tv_nsec;
  CHECK(raw >= before && raw <= after, "raw clock %llu not within [%llu, %llu]", (unsigned long long)raw,
        (unsigned long long)before, (unsigned long long)after);
  values.comp_mask = IBV_VALUES_MASK_RESERVED;
  CHECK_EQ(ibv_query_rt_values_ex(e->ctx, &values), EINVAL);

  struct ibv_cq_init_attr_ex attr = {.cqe = 16,
                                     .wc_flags = STANDARD_WC_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                                                 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
  struct ibv_cq_ex *cq = ibv_create_cq_ex(e->ctx, &attr);
  CHECK(cq != NULL, "ibv_create_cq_ex with timestamps: %s", strerror(errno));
  struct ibv_qp *a = make_qp(e, IBV_QPT_RC, cq, 0), *b = make_qp(e, IBV_QPT_RC, cq, 0);
  connect_rc(e, a, b);

  uint64_t ts[2][2], wall[2][2], mono[2][2], real[2][2];
  for (int round = 0; round < 2; ++round) {
    if (round == 1) usleep(GAP_NS / 1000);
    mono[round][0] = clock_ns(CLOCK_MONOTONIC);
    real[round][0] = clock_ns(CLOCK_REALTIME);
    timed_send(e, a, b, cq, ts[round], wall[round]);
    mono[round][1] = clock_ns(CLOCK_MONOTONIC);
    real[round][1] = clock_ns(CLOCK_REALTIME);
  }
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 2; ++i) {
      /* The engine's clock is the TSC re-anchored to CLOCK_MONOTONIC every millisecond: within slack. */
      CHECK(ts[round][i] + SLACK_NS >= mono[round][0] && ts[round][i] <= mono[round][1] + SLACK_NS,
            "round %d completion %d stamped %llu, outside [%llu, %llu]", round, i, (unsigned long long)ts[round][i],
            (unsigned long long)mono[round][0], (unsigned long long)mono[round][1]);
      CHECK(wall[round][i] + SLACK_NS >= real[round][0] && wall[round][i] <= real[round][1] + SLACK_NS,
            "round %d completion %d wall clock %llu, outside [%llu, %llu]", round, i,
            (unsigned long long)wall[round][i], (unsigned long long)real[round][0], (unsigned long long)real[round][1]);
    }
  }
  CHECK(ts[1][0] - ts[0][0] >= GAP_NS - SLACK_NS, "two sends %d ms apart stamped %llu ns apart", GAP_NS / 1000000,
        (unsigned long long)(ts[1][0] - ts[0][0]));
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy qp");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");
  printf("PASS completion timestamps and the device clock\n");
}
