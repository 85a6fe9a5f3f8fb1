// Verbs-level vocabulary of the transport: states, opcodes, statuses and flags.
//
// Every numeric value equals rdma-core's (infiniband/verbs.h, rdma-core 44), so the verbs shim converts
// by a cast; tests/unit/verbs/test_verbs_abi.cpp asserts the equality against the installed header.
#pragma once

#include <cstdint>
#include <string_view>

namespace uroce::verbs {

// rdma-core's values. XRC splits a reliable connection in two: the initiator (xrc_send) only sends, each
// request naming an XRC SRQ at the target; the target (xrc_recv) only receives, into that SRQ.
// raw_packet: whole Ethernet frames, sent as posted and received by flow steering rules (transport/flow).
enum class QpType : uint8_t { rc = 2, uc = 3, ud = 4, raw_packet = 8, xrc_send = 9, xrc_recv = 10 };

// RC and both halves of XRC: acknowledged, retransmitted, with RC's protocol (XRC's opcodes are RC's + 0xA0).
constexpr bool is_reliable(QpType t) { return t == QpType::rc || t == QpType::xrc_send || t == QpType::xrc_recv; }

enum class QpState : uint8_t { reset = 0, init = 1, rtr = 2, rts = 3, sqd = 4, sqe = 5, err = 6 };

enum class WcStatus : uint8_t {
  success = 0,
  loc_len_err = 1,
  loc_qp_op_err = 2,
  loc_eec_op_err = 3,
  loc_prot_err = 4,
  wr_flush_err = 5,
  mw_bind_err = 6,
  bad_resp_err = 7,
  loc_access_err = 8,
  rem_inv_req_err = 9,
  rem_access_err = 10,
  rem_op_err = 11,
  retry_exc_err = 12,
  rnr_retry_exc_err = 13,
  loc_rdd_viol_err = 14,
  rem_inv_rd_req_err = 15,
  rem_abort_err = 16,
  inv_eecn_err = 17,
  inv_eec_state_err = 18,
  fatal_err = 19,
  resp_timeout_err = 20,
  general_err = 21,
  tm_err = 22,              // tag matching: a list operation failed (a DEL of a tag already consumed)
  tm_rndv_incomplete = 23,  // tag matching: a rendezvous too long for its tagged buffer, left to software
};

enum class WcOpcode : uint8_t {
  send = 0,
  rdma_write = 1,
  rdma_read = 2,
  comp_swap = 3,
  fetch_add = 4,
  bind_mw = 5,
  local_inv = 6,
  atomic_write = 9,
  recv = 128,
  recv_rdma_with_imm = 129,
  // Tag matching SRQs (ibv_post_srq_ops): the list operations' completions, and the receives.
  tm_add = 130,
  tm_del = 131,
  tm_sync = 132,
  tm_recv = 133,    // a tag-matching message: matched (wc_tm_match) or unexpected (no flag)
  tm_no_tag = 134,  // a message sent with IBV_TMH_NO_TAG (or a FIN), delivered whole to an SRQ receive
};

enum WcFlags : uint32_t {
  wc_grh = 1u << 0,
  wc_with_imm = 1u << 1,
  wc_ip_csum_ok = 1u << 2,  // raw packet QPs: an IPv4 frame whose IP and TCP/UDP checksums were checked
  wc_with_inv = 1u << 3,
  wc_tm_sync_req = 1u << 4,    // the SRQ's unexpected count is not in step: post a TAG_SYNC
  wc_tm_match = 1u << 5,       // a tagged buffer was matched
  wc_tm_data_valid = 1u << 6,  // all of the matched message's data is in the tagged buffer
};

// ibv_mw_type.
enum class MwType : uint8_t { type1 = 1, type2 = 2 };

enum class WrOpcode : uint8_t {
  rdma_write = 0,
  rdma_write_with_imm = 1,
  send = 2,
  send_with_imm = 3,
  rdma_read = 4,
  atomic_cmp_and_swp = 5,
  atomic_fetch_and_add = 6,
  local_inv = 7,
  bind_mw = 8,
  send_with_inv = 9,
  // IBTA 1.5's ATOMIC WRITE (RC only): 8 bytes placed at once, ordered after every earlier request.
  atomic_write = 15,
};

enum SendFlags : uint32_t {
  send_fence = 1u << 0,
  send_signaled = 1u << 1,
  send_solicited = 1u << 2,
  send_inline = 1u << 3,
  send_ip_csum = 1u << 4,  // raw packet QPs: the device fills in the IPv4 and TCP/UDP checksums
};

enum AccessFlags : uint32_t {
  access_local_write = 1u << 0,
  access_remote_write = 1u << 1,
  access_remote_read = 1u << 2,
  access_remote_atomic = 1u << 3,
  access_mw_bind = 1u << 4,
  access_zero_based = 1u << 5,
  // IBV_ACCESS_ON_DEMAND: the region's pages are faulted in at each access, and one that cannot be is
  // the requester's access error rather than the responder's failure (qp/responder.cpp).
  access_on_demand = 1u << 6,
};

enum QpAttrMask : uint32_t {
  attr_state = 1u << 0,
  attr_cur_state = 1u << 1,
  attr_en_sqd_async_notify = 1u << 2,
  attr_access_flags = 1u << 3,
  attr_pkey_index = 1u << 4,
  attr_port = 1u << 5,
  attr_qkey = 1u << 6,
  attr_av = 1u << 7,
  attr_path_mtu = 1u << 8,
  attr_timeout = 1u << 9,
  attr_retry_cnt = 1u << 10,
  attr_rnr_retry = 1u << 11,
  attr_rq_psn = 1u << 12,
  attr_max_qp_rd_atomic = 1u << 13,
  attr_alt_path = 1u << 14,
  attr_min_rnr_timer = 1u << 15,
  attr_sq_psn = 1u << 16,
  attr_max_dest_rd_atomic = 1u << 17,
  attr_path_mig_state = 1u << 18,
  attr_cap = 1u << 19,
  attr_dest_qpn = 1u << 20,
  attr_rate_limit = 1u << 25,
};

enum class EventType : uint8_t {
  cq_err = 0,
  qp_fatal = 1,
  qp_req_err = 2,
  qp_access_err = 3,
  comm_est = 4,
  sq_drained = 5,
  path_mig = 6,
  path_mig_err = 7,
  device_fatal = 8,
  port_active = 9,
  port_err = 10,
  srq_err = 14,
  srq_limit_reached = 15,
  qp_last_wqe_reached = 16,
  gid_change = 18,  // a port's GID table changed (an address added or removed)
};

// IB MTU enum (ibv_mtu): 1 = 256 ... 5 = 4096.
enum class Mtu : uint8_t { mtu_256 = 1, mtu_512 = 2, mtu_1024 = 3, mtu_2048 = 4, mtu_4096 = 5 };
constexpr unsigned mtu_bytes(Mtu m) { return 128u << unsigned(m); }

// The largest IB MTU whose RoCE packet fits an IP MTU of `ip_mtu` bytes, as Linux computes a RoCE port's
// (iboe_get_mtu, which mlx4, mlx5 and rdma_cm's route resolution use): room is kept for the largest
// headers a packet can have, an IPv6-sized (GRH) IP header, UDP, BTH, XRCETH and AtomicETH, and the ICRC,
// whatever the port's addresses are, so that adding or removing one never changes it. 0 if not even 256
// bytes fit.
inline constexpr unsigned roce_header_budget = 40 + 8 + 12 + 4 + 28 + 4;
constexpr Mtu largest_roce_mtu(unsigned ip_mtu, Mtu none = Mtu(0)) {
  Mtu best = none;
  for (Mtu m : {Mtu::mtu_256, Mtu::mtu_512, Mtu::mtu_1024, Mtu::mtu_2048, Mtu::mtu_4096}) {
    if (mtu_bytes(m) + roce_header_budget <= ip_mtu) best = m;
  }
  return best;
}

std::string_view to_string(QpState s);
std::string_view to_string(WcStatus s);   // as ibv_wc_status_str
std::string_view to_string(WcOpcode o);

}  // namespace uroce::verbs
