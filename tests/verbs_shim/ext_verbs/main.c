/* ext_verbs_test: the extended verbs through uroce — the ibv_qp_ex work-request API, ibv_cq_ex polling,
 * ibv_resize_cq, ibv_create_ah_from_wc, UD multicast, XRC (ibv_open_qp too), memory windows, fork(),
 * registering memory other threads write, ibv_import_*, parent domains, packet pacing, and rdma_cm events
 * taken on another thread than the call's — on one
 * uroced's loopback port (started with two addresses).
 * Run: uroce-run --socket SOCK ext_verbs_test. Prints a PASS line per section and "ALL PASSED"; the
 * first failed check ends it with status 1. */
#include "ext_verbs.h"

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  struct env e;
  env_open(&e);
  test_cq_ex_attributes(&e);
  test_completion_timestamps(&e);
  test_qp_ex_creation(&e);

  /* A (ibv_qp_ex) and B (classic) on the same port, each with its own cq_ex. */
  struct ibv_cq_ex *cqa = make_cq_ex(&e, 64, NULL), *cqb = make_cq_ex(&e, 64, NULL);
  struct ibv_qp *a = make_qp(&e, IBV_QPT_RC, cqa, RC_SEND_OPS);
  struct ibv_qp *b = make_qp(&e, IBV_QPT_RC, cqb, 0);
  connect_rc(&e, a, b);
  test_rc_sends(&e, a, cqa, b, cqb);
  test_rc_rdma_and_atomics(&e, a, cqa, b, cqb);
  test_wr_errors(&e, a, cqa, b, cqb);
  test_local_inv(&e, a, cqa); /* leaves A in the error state */
  CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy qp");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqa)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cqb)) == 0, "destroy cq");

  test_send_inv(&e);
  test_resize(&e);
  test_ud_and_ah_from_wc(&e);
  test_ud_multicast(&e);
  test_xrc(&e);
  test_open_qp(&e);
  test_mw(&e);
  test_full_receive_queues(&e);
  test_fork(&e);
  test_register_under_writes(&e);
  test_import(&e);
  test_parent_domain(&e);
  test_async_events_of_destroyed_objects(&e);
  test_packet_pacing(&e);
  test_cm_event_thread(&e);
  env_close(&e);
  printf("ALL PASSED\n");
  return 0;
}
