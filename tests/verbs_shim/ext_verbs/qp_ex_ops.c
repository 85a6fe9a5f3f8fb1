/* The ibv_qp_ex work-request API on an RC QP: every operation uroce does, in batches, with the bytes that
 * land and every completion field checked. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "ext_verbs.h"

/* Where things go in the remote buffer. */
enum { R_RECV = 0, R_WRITE = 64 * 1024, R_WRITE_IMM = 72 * 1024, R_READ = 80 * 1024, R_ATOMIC = 88 * 1024,
       R_IMM_RECV = 96 * 1024 };

void test_qp_ex_creation(struct env *e) {
  struct ibv_cq_ex *cq = make_cq_ex(e, 16, NULL);
  struct ibv_qp_init_attr_ex a = {
      .send_cq = ibv_cq_ex_to_cq(cq),
      .recv_cq = ibv_cq_ex_to_cq(cq),
      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = e->pd,
      .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO,
  };
  /* TSO is an operation uroce cannot do: creation says so. ATOMIC WRITE exists on RC alone. */
  errno = 0;
  CHECK(ibv_create_qp_ex(e->ctx, &a) == NULL && errno == EOPNOTSUPP, "TSO accepted (errno %d)", errno);
  a.qp_type = IBV_QPT_UC;
  a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_ATOMIC_WRITE;
  errno = 0;
  CHECK(ibv_create_qp_ex(e->ctx, &a) == NULL && errno == EOPNOTSUPP, "ATOMIC WRITE on UC accepted (errno %d)", errno);
  a.qp_type = IBV_QPT_RC;
  struct ibv_qp *with_atomic_write = ibv_create_qp_ex(e->ctx, &a);
  CHECK(with_atomic_write != NULL, "ATOMIC WRITE on RC refused: %s", strerror(errno));
  CHECK(ibv_destroy_qp(with_atomic_write) == 0, "destroy");
  /* A UD QP only sends (memory windows are bound on RC, UC and XRC initiators, mw.c). */
  a.qp_type = IBV_QPT_UD;
  a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  errno = 0;
  CHECK(ibv_create_qp_ex(e->ctx, &a) == NULL && errno == EOPNOTSUPP, "RDMA WRITE on UD accepted (errno %d)", errno);
  a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW;
  errno = 0;
  CHECK(ibv_create_qp_ex(e->ctx, &a) == NULL && errno == EOPNOTSUPP, "BIND_MW on UD accepted (errno %d)", errno);
  /* An XRC target names its XRC domain (IBV_QP_INIT_ATTR_XRCD), not a PD. */
  a.qp_type = IBV_QPT_XRC_RECV;
  a.send_ops_flags = IBV_QP_EX_WITH_SEND;
  errno = 0;
  CHECK(ibv_create_qp_ex(e->ctx, &a) == NULL && errno == EOPNOTSUPP, "XRC target without a domain accepted (errno %d)",
        errno);

  a.qp_type = IBV_QPT_RC;
  struct ibv_qp *ex = ibv_create_qp_ex(e->ctx, &a);
  CHECK(ex != NULL, "ibv_create_qp_ex: %s", strerror(errno));
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(ex);
  CHECK(x != NULL && &x->qp_base == ex, "ibv_qp_to_qp_ex of an extended QP");
  CHECK(x->wr_start && x->wr_complete && x->wr_abort && x->wr_send && x->wr_set_sge, "function pointers missing");
  struct ibv_qp *classic = make_qp(e, IBV_QPT_RC, cq, 0);
  CHECK(ibv_qp_to_qp_ex(classic) == NULL, "a QP created without send_ops_flags has no ibv_qp_ex");
  CHECK(ibv_destroy_qp(classic) == 0 && ibv_destroy_qp(ex) == 0, "destroy");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "destroy cq");
  printf("PASS qp_ex creation\n");
}

void test_rc_sends(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa, struct ibv_qp *b, struct ibv_cq_ex *cqb) {
  uint8_t *L = e->local, *R = e->remote;
  const uint32_t lkey = e->local_mr->lkey;
  fill_pattern(L, 8192, 1);
  for (int i = 0; i < 4; ++i) post_recv(b, 100 + i, R + R_RECV + i * 4096, 4096, e->remote_mr->lkey);

  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
  uint8_t inline_one[11];
  memcpy(inline_one, "inline-one!", 11);
  uint8_t inline_two[40];
  fill_pattern(inline_two, sizeof inline_two, 7);
  const struct ibv_data_buf list[2] = {{(void *)"abc", 3}, {inline_two, sizeof inline_two}};
  const struct ibv_sge gather[3] = {{(uintptr_t)L + 1000, 10, lkey}, {(uintptr_t)L + 2000, 300, lkey},
                                    {(uintptr_t)L + 5000, 1, lkey}};
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 1;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, lkey, (uintptr_t)L, 1000);
  x->wr_id = 2;
  ibv_wr_send_imm(x, htonl(0xA1B2C3D4));
  ibv_wr_set_sge_list(x, 3, gather);
  x->wr_id = 3;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, inline_one, sizeof inline_one);
  memset(inline_one, 0, sizeof inline_one); /* inline data is copied by the setter */
  x->wr_id = 4;
  x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  ibv_wr_send(x);
  ibv_wr_set_inline_data_list(x, 2, list);
  CHECK_EQ(ibv_wr_complete(x), 0);

  struct wc_ex w[4];
  poll_n(cqa, w, 4);
  for (int i = 0; i < 4; ++i) {
    expect_success(&w[i], 1 + i, IBV_WC_SEND);
    CHECK_EQ(w[i].qp_num, a->qp_num);
  }
  poll_n(cqb, w, 4);
  const uint32_t lengths[4] = {1000, 311, 11, 43};
  for (int i = 0; i < 4; ++i) {
    expect_success(&w[i], 100 + i, IBV_WC_RECV);
    CHECK_EQ(w[i].byte_len, lengths[i]);
    CHECK_EQ(w[i].qp_num, b->qp_num);
    CHECK_EQ(w[i].sl, 0);
    CHECK_EQ((w[i].wc_flags & IBV_WC_WITH_IMM) != 0, i == 1);
  }
  CHECK_EQ(w[1].imm, htonl(0xA1B2C3D4));
  CHECK(memcmp(R + R_RECV, L, 1000) == 0, "SEND data");
  uint8_t want[311];
  memcpy(want, L + 1000, 10);
  memcpy(want + 10, L + 2000, 300);
  want[310] = L[5000];
  CHECK(memcmp(R + R_RECV + 4096, want, sizeof want) == 0, "gathered SEND data");
  CHECK(memcmp(R + R_RECV + 2 * 4096, "inline-one!", 11) == 0, "inline SEND data");
  CHECK(memcmp(R + R_RECV + 3 * 4096, "abc", 3) == 0 && memcmp(R + R_RECV + 3 * 4096 + 3, inline_two, 40) == 0,
        "inline list data");
  /* The same CQ polled the classic way in between: nothing left over. */
  struct ibv_wc wc;
  CHECK_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(cqa), 1, &wc), 0);
  printf("PASS qp_ex SEND, SEND_IMM, SGE list, inline, inline list (cq_ex fields)\n");
}

void test_rc_rdma_and_atomics(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa, struct ibv_qp *b,
                              struct ibv_cq_ex *cqb) {
  uint8_t *L = e->local, *R = e->remote;
  const uint32_t lkey = e->local_mr->lkey, rkey = e->remote_mr->rkey;
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
  fill_pattern(L, 8192, 2);
  fill_pattern(R + R_READ, 512, 3);
  const uint64_t initial = 0x1111111111111111ull;
  memcpy(R + R_ATOMIC, &initial, 8);
  post_recv(b, 200, R + R_IMM_RECV, 64, e->remote_mr->lkey);

  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 10;
  ibv_wr_rdma_write(x, rkey, (uintptr_t)R + R_WRITE);
  ibv_wr_set_sge(x, lkey, (uintptr_t)L, 2048);
  x->wr_id = 11;
  ibv_wr_rdma_write_imm(x, rkey, (uintptr_t)R + R_WRITE_IMM, htonl(0x01020304));
  ibv_wr_set_sge(x, lkey, (uintptr_t)L + 3000, 777);
  x->wr_id = 12;
  ibv_wr_rdma_read(x, rkey, (uintptr_t)R + R_READ);
  ibv_wr_set_sge(x, lkey, (uintptr_t)L + 40000, 512);
  x->wr_id = 13; /* matches: swaps */
  ibv_wr_atomic_cmp_swp(x, rkey, (uintptr_t)R + R_ATOMIC, initial, 0x2222222222222222ull);
  ibv_wr_set_sge(x, lkey, (uintptr_t)L + 48 * 1024, 8);
  x->wr_id = 14;
  ibv_wr_atomic_fetch_add(x, rkey, (uintptr_t)R + R_ATOMIC, 5);
  ibv_wr_set_sge(x, lkey, (uintptr_t)L + 48 * 1024 + 8, 8);
  x->wr_id = 15; /* does not match: leaves the word alone */
  ibv_wr_atomic_cmp_swp(x, rkey, (uintptr_t)R + R_ATOMIC, initial, 0x3333333333333333ull);
  ibv_wr_set_sge(x, lkey, (uintptr_t)L + 48 * 1024 + 16, 8);
  x->wr_id = 16; /* its 8 bytes are taken by the call: changing them before wr_complete changes nothing */
  uint8_t word[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
  const uint8_t placed[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
  ibv_wr_atomic_write(x, rkey, (uintptr_t)R + R_ATOMIC + 8, word);
  memset(word, 0, sizeof word);
  CHECK_EQ(ibv_wr_complete(x), 0);

  struct wc_ex w[7];
  poll_n(cqa, w, 7);
  const enum ibv_wc_opcode ops[7] = {IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,   IBV_WC_COMP_SWAP,
                                     IBV_WC_FETCH_ADD,  IBV_WC_COMP_SWAP,  IBV_WC_ATOMIC_WRITE};
  for (int i = 0; i < 7; ++i) {
    expect_success(&w[i], 10 + i, ops[i]);
    CHECK_EQ(w[i].qp_num, a->qp_num);
  }
  CHECK_EQ(w[2].byte_len, 512);
  CHECK_EQ(w[3].byte_len, 8);
  poll_n(cqb, w, 1);
  expect_success(&w[0], 200, IBV_WC_RECV_RDMA_WITH_IMM);
  CHECK(w[0].wc_flags & IBV_WC_WITH_IMM, "WRITE_IMM without IBV_WC_WITH_IMM");
  CHECK_EQ(w[0].imm, htonl(0x01020304));
  CHECK_EQ(w[0].byte_len, 777);
  CHECK_EQ(w[0].qp_num, b->qp_num);

  CHECK(memcmp(R + R_WRITE, L, 2048) == 0, "RDMA WRITE data");
  CHECK(memcmp(R + R_WRITE_IMM, L + 3000, 777) == 0, "RDMA WRITE_IMM data");
  CHECK(memcmp(L + 40000, R + R_READ, 512) == 0, "RDMA READ data");
  uint64_t got[3], remote;
  memcpy(got, L + 48 * 1024, sizeof got);
  memcpy(&remote, R + R_ATOMIC, 8);
  CHECK_EQ(got[0], initial);                /* CMP_SWP returns the old value */
  CHECK_EQ(got[1], 0x2222222222222222ull);  /* FETCH_ADD sees the swapped one */
  CHECK_EQ(got[2], 0x2222222222222227ull);  /* the failed CMP_SWP returns the current one */
  CHECK_EQ(remote, 0x2222222222222227ull);
  CHECK(memcmp(R + R_ATOMIC + 8, placed, 8) == 0, "ATOMIC WRITE data");
  printf("PASS qp_ex RDMA WRITE, WRITE_IMM, READ, CMP_SWP, FETCH_ADD, ATOMIC_WRITE\n");
}

/* LOCAL_INV of a local key, then a SEND gathering from it fails: the invalidation really happened. The QP
 * ends in the error state. */
void test_local_inv(struct env *e, struct ibv_qp *a, struct ibv_cq_ex *cqa) {
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
  uint8_t *area = e->local + 128 * 1024;
  struct ibv_mr *mr = ibv_reg_mr(e->pd, area, 4096, IBV_ACCESS_LOCAL_WRITE);
  CHECK(mr != NULL, "ibv_reg_mr: %s", strerror(errno));
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 70;
  ibv_wr_local_inv(x, mr->lkey);
  CHECK_EQ(ibv_wr_complete(x), 0);
  struct wc_ex w;
  poll_n(cqa, &w, 1);
  expect_success(&w, 70, IBV_WC_LOCAL_INV);

  ibv_wr_start(x);
  x->wr_id = 71;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, mr->lkey, (uintptr_t)area, 8);
  CHECK_EQ(ibv_wr_complete(x), 0);
  poll_n(cqa, &w, 1);
  CHECK_EQ(w.wr_id, 71);
  CHECK(w.status == IBV_WC_LOC_PROT_ERR, "SEND from an invalidated key: %s", ibv_wc_status_str(w.status));
  CHECK(ibv_dereg_mr(mr) == 0, "dereg");
  printf("PASS qp_ex LOCAL_INV\n");
}

/* SEND with invalidate: the receiver's completion names the key, and the key is dead afterwards (a WRITE
 * to it fails with a remote access error). Uses a pair of its own, which ends in the error state. */
void test_send_inv(struct env *e) {
  struct ibv_cq_ex *cqc = make_cq_ex(e, 16, NULL), *cqd = make_cq_ex(e, 16, NULL);
  struct ibv_qp *c = make_qp(e, IBV_QPT_RC, cqc, IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE);
  struct ibv_qp *d = make_qp(e, IBV_QPT_RC, cqd, 0);
  connect_rc(e, c, d);
  uint8_t *area = e->remote + 160 * 1024;
  struct ibv_mr *mr = ibv_reg_mr(e->pd, area, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  CHECK(mr != NULL, "ibv_reg_mr: %s", strerror(errno));
  post_recv(d, 500, e->remote + 104 * 1024, 64, e->remote_mr->lkey);
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(c);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 80;
  ibv_wr_send_inv(x, mr->rkey);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 24);
  CHECK_EQ(ibv_wr_complete(x), 0);
  struct wc_ex w = expect_delivered(cqc, 80, cqd, 500);
  CHECK(w.wc_flags & IBV_WC_WITH_INV, "no IBV_WC_WITH_INV (flags %#x)", w.wc_flags);
  CHECK(!(w.wc_flags & IBV_WC_WITH_IMM), "IBV_WC_WITH_IMM on a SEND with invalidate");
  CHECK_EQ(w.imm, mr->rkey); /* ibv_wc_read_invalidated_rkey: the key as it is */
  CHECK_EQ(w.byte_len, 24);

  ibv_wr_start(x);
  x->wr_id = 81;
  ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)area);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
  CHECK_EQ(ibv_wr_complete(x), 0);
  poll_n(cqc, &w, 1);
  CHECK_EQ(w.wr_id, 81);
  CHECK(w.status == IBV_WC_REM_ACCESS_ERR, "WRITE to an invalidated key: %s", ibv_wc_status_str(w.status));
  CHECK(ibv_destroy_qp(c) == 0 && ibv_destroy_qp(d) == 0 && ibv_dereg_mr(mr) == 0, "destroy");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqc)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cqd)) == 0, "destroy cq");
  printf("PASS qp_ex SEND_INV (remote invalidation)\n");
}
