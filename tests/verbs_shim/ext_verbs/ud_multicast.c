/* UD multicast: ibv_attach_mcast / ibv_detach_mcast and the datagrams a group's members get. Three UD QPs
 * on the port: two members of 239.1.2.3 and one outsider; the sender is not a member. On the loopback port
 * the frame goes out (to 01:00:5e:01:02:03), comes back, and the transport gives each member a copy. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "ext_verbs.h"

enum { GRH = 40, MC_QPN = 0xFFFFFF, M1_RECV = 100 * 1024, M2_RECV = 110 * 1024, OUT_RECV = 120 * 1024,
       SEND_AT = 130 * 1024, SIZE = 300 };

static union ibv_gid v4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  union ibv_gid g;
  memset(&g, 0, sizeof g);
  g.raw[10] = g.raw[11] = 0xff;
  g.raw[12] = a;
  g.raw[13] = b;
  g.raw[14] = c;
  g.raw[15] = d;
  return g;
}

static void send_to_group(struct env *e, struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qkey, uint64_t wr_id,
                          uint32_t imm) {
  struct ibv_sge s = {(uintptr_t)e->local + SEND_AT, SIZE, e->local_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
                           .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(imm)},
                     *bad = NULL;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = MC_QPN;
  wr.wr.ud.remote_qkey = qkey;
  CHECK(ibv_post_send(qp, &wr, &bad) == 0, "ibv_post_send to the group");
}

static void expect_member_got(struct ibv_cq_ex *cq, uint64_t wr_id, struct ibv_qp *member, struct ibv_qp *sender,
                              const uint8_t *buffer, const uint8_t *sent, uint32_t imm) {
  struct wc_ex w;
  poll_n(cq, &w, 1);
  expect_success(&w, wr_id, IBV_WC_RECV);
  CHECK_EQ(w.qp_num, member->qp_num);
  CHECK_EQ(w.src_qp, sender->qp_num);
  CHECK_EQ(w.byte_len, GRH + SIZE);
  CHECK(w.wc_flags & IBV_WC_GRH, "no GRH flag");
  CHECK(w.wc_flags & IBV_WC_WITH_IMM, "no immediate");
  CHECK_EQ(w.imm, htonl(imm));
  const uint8_t group[4] = {239, 1, 2, 3};
  CHECK(memcmp(buffer + 20 + 16, group, 4) == 0, "the GRH's destination is not the group");
  CHECK(memcmp(buffer + GRH, sent, SIZE) == 0, "datagram data");
}

void test_ud_multicast(struct env *e) {
  struct ibv_device_attr attr;
  CHECK(ibv_query_device(e->ctx, &attr) == 0, "ibv_query_device");
  CHECK(attr.max_mcast_grp > 0 && attr.max_mcast_qp_attach > 0 && attr.max_total_mcast_qp_attach > 0,
        "multicast limits %d %d %d", attr.max_mcast_grp, attr.max_mcast_qp_attach, attr.max_total_mcast_qp_attach);

  struct ibv_cq_ex *cqs = make_cq_ex(e, 16, NULL), *cq1 = make_cq_ex(e, 16, NULL), *cq2 = make_cq_ex(e, 16, NULL),
                   *cqo = make_cq_ex(e, 16, NULL);
  struct ibv_qp *sender = make_qp(e, IBV_QPT_UD, cqs, 0), *m1 = make_qp(e, IBV_QPT_UD, cq1, 0),
                *m2 = make_qp(e, IBV_QPT_UD, cq2, 0), *outsider = make_qp(e, IBV_QPT_UD, cqo, 0);
  struct ibv_qp *rc = make_qp(e, IBV_QPT_RC, cqs, 0);
  ready_ud(sender);
  ready_ud(m1);
  ready_ud(m2);
  ready_ud(outsider);
  const union ibv_gid group = v4_gid(239, 1, 2, 3), other = v4_gid(239, 1, 2, 4);

  /* The kernel's rules (ib_attach_mcast): a UD QP and a multicast GID. */
  CHECK_EQ(ibv_attach_mcast(rc, &group, 0), EINVAL);
  CHECK_EQ(ibv_attach_mcast(m1, &e->gid[0], 0), EINVAL);
  CHECK_EQ(ibv_detach_mcast(m1, &group, 0), EINVAL); /* not attached */
  CHECK_EQ(ibv_attach_mcast(m1, &group, 0), 0);
  CHECK_EQ(ibv_attach_mcast(m1, &group, 0), 0); /* again: nothing changes */
  CHECK_EQ(ibv_attach_mcast(m2, &group, 0), 0);
  CHECK_EQ(ibv_detach_mcast(m2, &other, 0), EINVAL);

  struct ibv_ah_attr to_group = {.is_global = 1, .port_num = 1};
  to_group.grh.dgid = group;
  to_group.grh.hop_limit = 1;
  struct ibv_ah *ah = ibv_create_ah(e->pd, &to_group);
  CHECK(ah != NULL, "ibv_create_ah to a group: %s", strerror(errno));

  uint8_t *L = e->local, *R = e->remote;
  fill_pattern(L + SEND_AT, SIZE, 21);
  post_recv(m1, 1, R + M1_RECV, GRH + SIZE, e->remote_mr->lkey);
  post_recv(m2, 2, R + M2_RECV, GRH + SIZE, e->remote_mr->lkey);
  post_recv(outsider, 3, R + OUT_RECV, GRH + SIZE, e->remote_mr->lkey);
  send_to_group(e, sender, ah, QKEY, 10, 0x1234);
  struct wc_ex w;
  poll_n(cqs, &w, 1);
  expect_success(&w, 10, IBV_WC_SEND);
  expect_member_got(cq1, 1, m1, sender, R + M1_RECV, L + SEND_AT, 0x1234);
  expect_member_got(cq2, 2, m2, sender, R + M2_RECV, L + SEND_AT, 0x1234);
  expect_nothing(cqo);

  /* A datagram with another Q_Key reaches no member; the send itself succeeds (UD is unacknowledged). */
  post_recv(m1, 4, R + M1_RECV, GRH + SIZE, e->remote_mr->lkey);
  post_recv(m2, 5, R + M2_RECV, GRH + SIZE, e->remote_mr->lkey);
  send_to_group(e, sender, ah, QKEY + 1, 11, 0x5678);
  poll_n(cqs, &w, 1);
  expect_success(&w, 11, IBV_WC_SEND);
  expect_nothing(cq1);
  expect_nothing(cq2);

  /* After m1 leaves only m2 gets the next one; m1's receive stays posted. */
  CHECK_EQ(ibv_detach_mcast(m1, &group, 0), 0);
  CHECK_EQ(ibv_detach_mcast(m1, &group, 0), EINVAL);
  fill_pattern(L + SEND_AT, SIZE, 22);
  send_to_group(e, sender, ah, QKEY, 12, 0x9abc);
  poll_n(cqs, &w, 1);
  expect_success(&w, 12, IBV_WC_SEND);
  expect_member_got(cq2, 5, m2, sender, R + M2_RECV, L + SEND_AT, 0x9abc);
  expect_nothing(cq1);
  expect_nothing(cqo);

  /* Destroying a member detaches it: the group is gone, a datagram to it reaches nobody. */
  CHECK(ibv_destroy_qp(m2) == 0, "destroy an attached QP");
  send_to_group(e, sender, ah, QKEY, 13, 0xdef0);
  poll_n(cqs, &w, 1);
  expect_success(&w, 13, IBV_WC_SEND);
  expect_nothing(cq1);
  expect_nothing(cqo);

  CHECK(ibv_destroy_ah(ah) == 0, "destroy ah");
  CHECK(ibv_destroy_qp(sender) == 0 && ibv_destroy_qp(m1) == 0 && ibv_destroy_qp(outsider) == 0 &&
            ibv_destroy_qp(rc) == 0,
        "destroy qp");
  struct ibv_cq_ex *all[] = {cqs, cq1, cq2, cqo};
  for (int i = 0; i < 4; ++i) CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(all[i])) == 0, "destroy cq");
  printf("PASS UD multicast: attach/detach rules, a copy per member, Q_Key, detach, destroy detaches\n");
}
