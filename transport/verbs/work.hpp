// Work requests, work completions and QP attributes, as the transport sees them (the verbs shim converts
// from and to the ibv_* structs field by field).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "transport/verbs/sge_list.hpp"
#include "transport/verbs/types.hpp"
#include "transport/wire/address.hpp"

namespace uroce::verbs {

// Where packets of a QP (or a UD work request, through its address handle) go.
struct AddressVector {
  wire::IpAddress dgid;       // destination GID: an IPv4-mapped or IPv6 address
  uint8_t sgid_index = 0;
  uint32_t flow_label = 0;    // 0: derived from the QP numbers, as Linux does
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint8_t service_level = 0;
};

// IBV_WR_BIND_MW: binds a memory window to part of a region (ibv_bind_mw posts one for a type 1 window).
struct MwBind {
  uint32_t mw = 0;        // the window's number: its rkey >> 8
  uint32_t rkey = 0;      // its rkey once bound (ibv_inc_rkey of the current one): the low byte is taken
  uint32_t mr_lkey = 0;   // the region; with length 0 (type 1 only) the window is unbound
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;    // AccessFlags: remote_read/write/atomic, zero_based
};

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::send;
  uint32_t send_flags = 0;        // SendFlags
  uint32_t imm_data = 0;          // the immediate as the 32-bit value on the wire
  uint32_t invalidate_rkey = 0;   // SEND_WITH_INV
  uint64_t remote_addr = 0;       // RDMA and atomics
  uint32_t rkey = 0;
  uint64_t compare_add = 0;       // atomics; ATOMIC_WRITE: the 8 bytes it places, as memory holds them
  uint64_t swap = 0;
  // UD
  uint32_t ah = 0;                // address handle number
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint32_t remote_srqn = 0;       // XRC: the SRQ at the target that takes the message (XRCETH)
  MwBind bind;                    // BIND_MW
  SgeList sg_list;
  std::vector<uint8_t> inline_data;  // filled at post time when send_flags has send_inline
};

struct RecvWr {
  uint64_t wr_id = 0;
  SgeList sg_list;
};

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::success;
  WcOpcode opcode = WcOpcode::send;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;          // immediate (wc_with_imm) or invalidated rkey (wc_with_inv)
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;            // UD
  uint32_t wc_flags = 0;          // WcFlags
  uint16_t pkey_index = 0;
  uint8_t sl = 0;
  // Not in ibv_wc (ibv_wc_read_completion_ts reads it): the device's clock, in nanoseconds, when the
  // completion was made.
  uint64_t timestamp = 0;
  // Not in ibv_wc: the message that completed this receive asked for an event (BTH SE bit). A CQ armed
  // with ibv_req_notify_cq(solicited_only) fires on such completions and on errors only.
  bool solicited = false;
  // Not in ibv_wc (ibv_wc_read_tm_info reads them): a tm_recv completion's tag and the TMH's app_ctx.
  uint32_t tm_priv = 0;
  uint64_t tm_tag = 0;
};

// ibv_post_srq_ops on a tag matching SRQ: enum ibv_ops_wr_opcode and enum ibv_ops_flags.
enum class TagOpcode : uint8_t { add = 0, del = 1, sync = 2 };
enum TagOpFlags : uint32_t {
  tag_op_signaled = 1u << 0,  // a completion on the SRQ's CQ (wr_id)
  tag_op_sync = 1u << 1,      // unexpected_cnt reports how many unexpected messages software has handled
};

struct TagOp {
  uint64_t wr_id = 0;
  TagOpcode opcode = TagOpcode::add;
  uint32_t flags = 0;           // TagOpFlags
  uint32_t unexpected_cnt = 0;
  uint32_t handle = 0;          // DEL: the entry an ADD returned
  // ADD: the tagged buffer, the wr_id its receive completions carry, and what it matches: a message
  // whose TMH tag satisfies (tag & mask) == this tag.
  uint64_t recv_wr_id = 0;
  uint64_t tag = 0;
  uint64_t mask = 0;
  SgeList sg_list;
};

struct QpCap {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

// ibv_qp_attr, the fields a RoCE QP uses.
struct QpAttr {
  QpState qp_state = QpState::reset;
  QpState cur_qp_state = QpState::reset;
  Mtu path_mtu = Mtu::mtu_1024;
  uint32_t qkey = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t dest_qp_num = 0;
  uint32_t qp_access_flags = 0;
  QpCap cap;
  AddressVector ah_attr;
  uint16_t pkey_index = 0;
  uint8_t en_sqd_async_notify = 0;
  uint8_t sq_draining = 0;
  uint8_t max_rd_atomic = 0;       // READ/atomic requests this QP may have outstanding as requester
  uint8_t max_dest_rd_atomic = 0;  // ... and accept as responder
  uint8_t min_rnr_timer = 0;       // RNR NAK timer code this QP sends when it has no receive posted
  uint8_t port_num = 1;
  uint8_t timeout = 0;             // local ACK timeout: 4.096 us * 2^timeout (0 = infinite)
  uint8_t retry_cnt = 0;           // 0-7: retries after a timeout or a NAK sequence error
  uint8_t rnr_retry = 0;           // 0-7: retries after an RNR NAK, 7 = forever
  uint32_t rate_limit = 0;         // raw packet QPs: the pacing rate, kbit/s (0 = none; packet_pacing.hpp)
  uint32_t max_burst_sz = 0;       // ... and its burst, bytes (0 = the default; ibv_modify_qp_rate_limit)
};

}  // namespace uroce::verbs
