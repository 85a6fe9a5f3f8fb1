/* UD through the ibv_wr_* API (wr_set_ud_addr, inline), the GRH area of a UD receive, and the reply to a
 * datagram through ibv_create_ah_from_wc. The datagram goes from GID 0 to GID 1 of the port (two
 * addresses), so the reply's address handle must swap them: sgid_index 1, dgid = GID 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "ext_verbs.h"

enum { GRH = 40, TTL = 33, TOS = 0x28 };
enum { U2_RECV = 200 * 1024, U1_RECV = 70 * 1024, U1_SEND = 64 * 1024, U2_SEND = 210 * 1024 };

static struct ibv_wc as_wc(const struct wc_ex *w) {
  struct ibv_wc wc = {.wr_id = w->wr_id, .status = w->status, .opcode = w->opcode, .vendor_err = w->vendor_err,
                      .byte_len = w->byte_len, .imm_data = w->imm, .qp_num = w->qp_num, .src_qp = w->src_qp,
                      .wc_flags = w->wc_flags, .slid = (uint16_t)w->slid, .sl = w->sl,
                      .dlid_path_bits = w->dlid_path_bits};
  return wc;
}

/* The GRH area of a RoCE v2 datagram over IPv4: 20 zero bytes, then its IPv4 header. */
static void check_grh(const uint8_t *g, const union ibv_gid *from, const union ibv_gid *to) {
  for (int i = 0; i < 20; ++i) CHECK_EQ(g[i], 0);
  CHECK_EQ(g[20], 0x45);
  CHECK_EQ(g[21], TOS);
  CHECK_EQ(g[28], TTL);
  CHECK_EQ(g[29], 17); /* UDP */
  CHECK(memcmp(g + 32, from->raw + 12, 4) == 0, "IPv4 source is not the sender's GID");
  CHECK(memcmp(g + 36, to->raw + 12, 4) == 0, "IPv4 destination is not the receiver's GID");
}

static uint16_t ipv4_checksum(const uint8_t *h) {
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (uint32_t)(h[i] << 8 | h[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return (uint16_t)~sum;
}

/* A GRH area as a datagram from 192.0.2.1 to `daddr` would leave it, checksum and all. */
static void synthetic_grh(uint8_t *g, const uint8_t daddr[4]) {
  memset(g, 0, GRH);
  uint8_t *h = g + 20;
  h[0] = 0x45;
  h[8] = 64;
  h[9] = 17;
  const uint8_t saddr[4] = {192, 0, 2, 1};
  memcpy(h + 12, saddr, 4);
  memcpy(h + 16, daddr, 4);
  const uint16_t c = ipv4_checksum(h);
  h[10] = (uint8_t)(c >> 8);
  h[11] = (uint8_t)c;
}

static void refused_grh(struct env *e, struct ibv_wc *wc, const uint8_t daddr[4], int want, const char *what) {
  uint8_t g[GRH];
  synthetic_grh(g, daddr);
  struct ibv_ah_attr attr;
  errno = 0;
  CHECK(ibv_init_ah_from_wc(e->ctx, 1, wc, (struct ibv_grh *)g, &attr) != 0 && errno == want, "%s: errno %d", what,
        errno);
}

static void ud_errors(struct env *e, struct ibv_qp *u1, struct ibv_cq_ex *cq1, struct ibv_ah *ah, struct ibv_wc *wc) {
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(u1);
  ibv_wr_start(x);
  ibv_wr_send(x); /* no wr_set_ud_addr: a datagram without an address */
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
  CHECK_EQ(ibv_wr_complete(x), EINVAL);
  ibv_wr_start(x);
  ibv_wr_rdma_write(x, e->remote_mr->rkey, (uintptr_t)e->remote); /* UD does not WRITE */
  ibv_wr_set_ud_addr(x, ah, 1, QKEY);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)e->local, 8);
  CHECK_EQ(ibv_wr_complete(x), EOPNOTSUPP);
  expect_nothing(cq1);

  /* Without IBV_WC_GRH the attributes are a LID route, which a RoCE port cannot use. */
  struct ibv_wc no_grh = *wc;
  no_grh.wc_flags &= ~(unsigned)IBV_WC_GRH;
  struct ibv_ah_attr attr;
  CHECK_EQ(ibv_init_ah_from_wc(e->ctx, 1, &no_grh, (struct ibv_grh *)(e->remote + U2_RECV), &attr), 0);
  CHECK_EQ(attr.is_global, 0);
  errno = 0;
  CHECK(ibv_create_ah_from_wc(e->pd, &no_grh, (struct ibv_grh *)(e->remote + U2_RECV), 1) == NULL && errno == EINVAL,
        "an AH without a GRH (errno %d)", errno);
  const uint8_t multicast[4] = {224, 0, 0, 5}, elsewhere[4] = {10, 9, 9, 9};
  refused_grh(e, wc, multicast, EINVAL, "a multicast destination");
  refused_grh(e, wc, elsewhere, ENOENT, "a destination that is not the port's");
  uint8_t zero[GRH] = {0};
  errno = 0;
  CHECK(ibv_init_ah_from_wc(e->ctx, 1, wc, (struct ibv_grh *)zero, &attr) != 0 && errno == EPROTONOSUPPORT,
        "a GRH area with no IP header (errno %d)", errno);
}

void test_ud_and_ah_from_wc(struct env *e) {
  struct ibv_cq_ex *cq1 = make_cq_ex(e, 16, NULL), *cq2 = make_cq_ex(e, 16, NULL);
  struct ibv_qp *u1 = make_qp(e, IBV_QPT_UD, cq1, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
  struct ibv_qp *u2 = make_qp(e, IBV_QPT_UD, cq2, 0);
  ready_ud(u1);
  ready_ud(u2);
  struct ibv_ah_attr to_u2 = {.is_global = 1, .port_num = 1};
  to_u2.grh.dgid = e->gid[1];
  to_u2.grh.sgid_index = 0;
  to_u2.grh.hop_limit = TTL;
  to_u2.grh.traffic_class = TOS;
  struct ibv_ah *ah1 = ibv_create_ah(e->pd, &to_u2);
  CHECK(ah1 != NULL, "ibv_create_ah: %s", strerror(errno));

  uint8_t *L = e->local, *R = e->remote;
  fill_pattern(L + U1_SEND, 200, 9);
  post_recv(u2, 600, R + U2_RECV, GRH + 256, e->remote_mr->lkey);
  post_recv(u2, 601, R + U2_RECV + 1024, GRH + 256, e->remote_mr->lkey);
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(u1);
  ibv_wr_start(x);
  x->wr_flags = IBV_SEND_SIGNALED;
  x->wr_id = 90;
  ibv_wr_send_imm(x, htonl(0xCAFEBABE));
  ibv_wr_set_ud_addr(x, ah1, u2->qp_num, QKEY);
  ibv_wr_set_sge(x, e->local_mr->lkey, (uintptr_t)L + U1_SEND, 200);
  x->wr_id = 91;
  ibv_wr_send(x);
  ibv_wr_set_ud_addr(x, ah1, u2->qp_num, QKEY);
  ibv_wr_set_inline_data(x, "datagram inline", 15);
  CHECK_EQ(ibv_wr_complete(x), 0);

  struct wc_ex w[2];
  poll_n(cq1, w, 2);
  expect_success(&w[0], 90, IBV_WC_SEND);
  expect_success(&w[1], 91, IBV_WC_SEND);
  CHECK_EQ(w[0].qp_num, u1->qp_num);
  poll_n(cq2, w, 2);
  expect_success(&w[0], 600, IBV_WC_RECV);
  expect_success(&w[1], 601, IBV_WC_RECV);
  for (int i = 0; i < 2; ++i) {
    CHECK(w[i].wc_flags & IBV_WC_GRH, "a UD receive without IBV_WC_GRH");
    CHECK_EQ(w[i].src_qp, u1->qp_num);
    CHECK_EQ(w[i].qp_num, u2->qp_num);
    CHECK_EQ(w[i].sl, 0x0a); /* the packet type, as ConnectX reports it: RoCE v2 (UDP) over IPv4 */
  }
  CHECK_EQ(w[0].byte_len, GRH + 200);
  CHECK_EQ(w[1].byte_len, GRH + 15);
  CHECK(w[0].wc_flags & IBV_WC_WITH_IMM, "SEND_IMM without IBV_WC_WITH_IMM");
  CHECK(!(w[1].wc_flags & IBV_WC_WITH_IMM), "IBV_WC_WITH_IMM on a plain SEND");
  CHECK_EQ(w[0].imm, htonl(0xCAFEBABE));
  check_grh(R + U2_RECV, &e->gid[0], &e->gid[1]);
  CHECK(memcmp(R + U2_RECV + GRH, L + U1_SEND, 200) == 0, "datagram data");
  CHECK(memcmp(R + U2_RECV + 1024 + GRH, "datagram inline", 15) == 0, "inline datagram data");

  /* The address back to the sender. */
  struct ibv_wc wc = as_wc(&w[0]);
  struct ibv_grh *grh = (struct ibv_grh *)(R + U2_RECV);
  struct ibv_ah_attr back;
  memset(&back, 0xa5, sizeof back);
  CHECK_EQ(ibv_init_ah_from_wc(e->ctx, 1, &wc, grh, &back), 0);
  CHECK_EQ(back.is_global, 1);
  CHECK(memcmp(back.grh.dgid.raw, e->gid[0].raw, 16) == 0, "dgid is not the sender's GID (v4-mapped)");
  CHECK_EQ(back.grh.sgid_index, 1);
  CHECK_EQ(back.grh.hop_limit, TTL);
  CHECK_EQ(back.grh.traffic_class, TOS);
  CHECK_EQ(back.grh.flow_label, 0);
  CHECK_EQ(back.dlid, 0);
  CHECK_EQ(back.sl, 0x0a); /* rdma-core's ibv_init_ah_from_wc copies wc->sl */
  CHECK_EQ(back.src_path_bits, 0);
  CHECK_EQ(back.port_num, 1);
  struct ibv_ah *ah2 = ibv_create_ah_from_wc(e->pd, &wc, grh, 1);
  CHECK(ah2 != NULL, "ibv_create_ah_from_wc: %s", strerror(errno));

  /* The reply with that AH, the classic way: it leaves from GID 1 for GID 0, with the same TTL and TOS. */
  fill_pattern(R + U2_SEND, 32, 11);
  post_recv(u1, 700, L + U1_RECV, GRH + 64, e->local_mr->lkey);
  struct ibv_sge s = {(uintptr_t)R + U2_SEND, 32, e->remote_mr->lkey};
  struct ibv_send_wr reply = {.wr_id = 92, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED},
                     *bad = NULL;
  reply.wr.ud.ah = ah2;
  reply.wr.ud.remote_qpn = wc.src_qp;
  reply.wr.ud.remote_qkey = QKEY;
  CHECK(ibv_post_send(u2, &reply, &bad) == 0, "ibv_post_send");
  w[0] = expect_delivered(cq2, 92, cq1, 700);
  CHECK_EQ(w[0].src_qp, u2->qp_num);
  CHECK_EQ(w[0].byte_len, GRH + 32);
  check_grh(L + U1_RECV, &e->gid[1], &e->gid[0]);
  CHECK(memcmp(L + U1_RECV + GRH, R + U2_SEND, 32) == 0, "reply data");

  ud_errors(e, u1, cq1, ah1, &wc);
  CHECK(ibv_destroy_ah(ah1) == 0 && ibv_destroy_ah(ah2) == 0, "destroy ah");
  CHECK(ibv_destroy_qp(u1) == 0 && ibv_destroy_qp(u2) == 0, "destroy qp");
  CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq1)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cq2)) == 0, "destroy cq");
  printf("PASS UD through qp_ex (ud addr, inline); GRH area; create_ah_from_wc and the reply through it\n");
}
