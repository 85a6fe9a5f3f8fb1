/* The extended-verbs test (ext_verbs_test): an ordinary libibverbs program, built against the real
 * <infiniband/verbs.h> and linked with -libverbs, run through uroce-run against a uroced whose loopback
 * port has two addresses (GIDs 0 and 1). Every check ends the program with a message on failure. */
#ifndef UROCE_EXT_VERBS_H
#define UROCE_EXT_VERBS_H

#include <infiniband/verbs.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);             \
      fprintf(stderr, __VA_ARGS__);                                               \
      fputc('\n', stderr);                                                        \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

/* Values compared as unsigned 64-bit, both printed on failure. */
#define CHECK_EQ(a, b)                                                                                \
  CHECK((uint64_t)(a) == (uint64_t)(b), "%s = %#llx, expected %#llx", #a, (unsigned long long)(a), \
        (unsigned long long)(b))

enum { BUF_SIZE = 256 * 1024, TIMEOUT_MS = 5000, QUIET_MS = 200, QKEY = 0x11111111 };

struct env {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  uint8_t *local, *remote; /* BUF_SIZE each, registered with every access right */
  struct ibv_mr *local_mr, *remote_mr;
  union ibv_gid gid[2];
};

/* Every field a cq_ex poll can read for one completion. */
struct wc_ex {
  uint64_t wr_id;
  enum ibv_wc_status status;
  enum ibv_wc_opcode opcode;
  uint32_t vendor_err, byte_len, qp_num, src_qp, slid;
  __be32 imm;
  unsigned int wc_flags;
  uint8_t sl, dlid_path_bits;
};

/* All the ibv_wr_* operations uroce does on an RC QP. */
#define RC_SEND_OPS                                                                                \
  (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |          \
   IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |  \
   IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV | \
   IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_ATOMIC_WRITE)

#define STANDARD_WC_FLAGS                                                                            \
  (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |   \
   IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

/* common.c */
void env_open(struct env *e);
void env_close(struct env *e);
void fill_pattern(uint8_t *p, size_t n, unsigned seed);
struct ibv_cq_ex *make_cq_ex(struct env *e, int cqe, struct ibv_comp_channel *channel);
/* send_ops 0: a classic QP (ibv_create_qp); otherwise ibv_create_qp_ex with those send_ops_flags. */
struct ibv_qp *make_qp(struct env *e, enum ibv_qp_type type, struct ibv_cq_ex *cq, uint64_t send_ops);
/* One QP to RTS facing remote_qpn on the same port (RC, or either half of XRC). */
void qp_to_rts(struct env *e, struct ibv_qp *qp, uint32_t remote_qpn);
void connect_rc(struct env *e, struct ibv_qp *a, struct ibv_qp *b);
/* Two RC QPs on e->ctx and e->pd connected to each other, each with a cq_ex of its own. */
struct rc_pair {
  struct ibv_cq_ex *cqa, *cqb;
  struct ibv_qp *a, *b;
};
struct rc_pair rc_pair_open(struct env *e);
void rc_pair_close(struct rc_pair *p);
/* One signalled RDMA WRITE or READ from p->a between `local` and `remote`; fails the test unless it
 * completes successfully. */
void rdma_and_wait(struct rc_pair *p, enum ibv_wr_opcode op, uint64_t wr_id, void *local, uint32_t lkey, void *remote,
                   uint32_t rkey, uint32_t length);
void ready_ud(struct ibv_qp *qp);
void post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t length, uint32_t lkey);
/* Collects exactly n completions within TIMEOUT_MS (reading every field through the ibv_wc_read_*
 * callbacks), and fails the test otherwise. */
void poll_n(struct ibv_cq_ex *cq, struct wc_ex *out, int n);
/* Fails if a completion arrives within QUIET_MS. */
void expect_nothing(struct ibv_cq_ex *cq);
void expect_success(const struct wc_ex *w, uint64_t wr_id, enum ibv_wc_opcode opcode);
/* A SEND's two completions: the sender's (wr_id `sent`) and the receiver's (`received`), returned. */
struct wc_ex expect_delivered(struct ibv_cq_ex *sender, uint64_t sent, struct ibv_cq_ex *receiver, uint64_t received);

/* The sections, in the order main() runs them. */
void test_cq_ex_attributes(struct env *e);
void test_completion_timestamps(struct env *e);
void test_qp_ex_creation(struct env *e);
void test_rc_sends(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa, struct ibv_qp *b, struct ibv_cq_ex *cqb);
void test_rc_rdma_and_atomics(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa, struct ibv_qp *b,
                              struct ibv_cq_ex *cqb);
void test_wr_errors(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa, struct ibv_qp *b, struct ibv_cq_ex *cqb);
void test_local_inv(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa);
void test_send_inv(struct env *e);
void test_resize(struct env *e);
void test_ud_and_ah_from_wc(struct env *e);
void test_ud_multicast(struct env *e);
void test_xrc(struct env *e);
void test_open_qp(struct env *e);
void test_mw(struct env *e);
void test_fork(struct env *e);
void test_register_under_writes(struct env *e);
void test_import(struct env *e);
void test_full_receive_queues(struct env *e);
void test_parent_domain(struct env *e);
void test_async_events_of_destroyed_objects(struct env *e);
void test_packet_pacing(struct env *e);
void test_cm_event_thread(struct env *e);

#endif
