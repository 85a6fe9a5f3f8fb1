// The rules ibv_modify_qp() is held to: which state transitions exist, which attribute-mask bits each
// one requires and allows, and which attribute values are in range.
//
// The transition rules are the Linux kernel's (ib_modify_qp_is_ok() and its qp_state_table in
// drivers/infiniband/core/verbs.c), restricted to RC, UC, UD and XRC and re-expressed as a table in
// qp_rules.cpp, so that an application which works on rxe or a hardware RNIC sees the same EINVALs
// here. The value rules are those of rxe_qp_chk_attr(), uverbs' modify_qp() and the IBA field widths.
// Everything here is pure: no QP object, no locking; the device applies the checks under its own lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "transport/verbs/types.hpp"
#include "transport/verbs/work.hpp"

namespace uroce::verbs {

// What the device reports about itself (ibv_device_attr / ibv_port_attr) and the value checks need.
struct AttrLimits {
  uint8_t max_qp_rd_atom;    // bounds both max_rd_atomic and max_dest_rd_atomic
  uint16_t pkey_table_size;  // pkey_index must be below it
  uint8_t gid_table_size;    // ah_attr.sgid_index must be below it
  Mtu active_mtu;            // path_mtu may not exceed the port's active MTU
  uint32_t max_qp_wr, max_sge, max_inline_data;  // bounds for cap (IBV_QP_CAP)
};

// Every mask bit rdma-core 44 names (IBV_QP_STATE .. IBV_QP_DEST_QPN, and IBV_QP_RATE_LIMIT).
inline constexpr uint32_t known_attr_mask = ((1u << 21) - 1) | attr_rate_limit;

// One transition of one QP type: IBV_QP_STATE is implied, `required` must all be in the mask, and
// nothing outside required | optional | IBV_QP_STATE may be.
struct QpTransition {
  QpState from;
  QpState to;
  QpType type;
  uint32_t required;
  uint32_t optional;
};

// The rule for from -> to on `type`, or nullopt when that transition does not exist.
std::optional<QpTransition> find_transition(QpType type, QpState from, QpState to);

// Whether ibv_modify_qp(qp, attr, mask) may move a QP of `type` from `current` to `next`, looking at the
// mask only (values are check_qp_attr_values' business). Returns 0 or EINVAL.
//  - `current` is the state the transition starts from. The kernel (rxe) takes it from attr.cur_qp_state
//    when the mask has IBV_QP_CUR_STATE, from the QP otherwise; the caller decides which to pass.
//  - Without IBV_QP_STATE in the mask, `next` is ignored: the QP stays where it is (next = current), and
//    that "transition" must exist too (INIT->INIT, RTS->RTS and SQD->SQD do; RTR->RTR does not).
//  - IBV_QP_CUR_STATE is refused unless `current` is RTR, RTS, SQD or SQE, as the kernel does, and
//    otherwise counts as an ordinary optional bit.
//  - Any state may move to RESET or ERR, with IBV_QP_STATE and nothing else.
int check_modify_qp(QpType type, QpState current, QpState next, uint32_t mask);

// The mask bits ibv_modify_qp drops for a QP type before anything checks them, as Linux's uverbs does
// (modify_qp_mask in drivers/infiniband/core/uverbs_cmd.c): an XRC initiator has no receive side, so
// IBV_QP_MAX_DEST_RD_ATOMIC and IBV_QP_MIN_RNR_TIMER mean nothing to it; an XRC target sends nothing of its
// own, so IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_RETRY_CNT and IBV_QP_RNR_RETRY mean nothing to it. Programs
// written for RC pass them anyway (perftest -c XRC does), and on Linux that works.
uint32_t ignored_attr_mask(QpType type);

// Why check_modify_qp refuses, e.g. "INIT->RTR on RC requires IBV_QP_PATH_MTU"; empty when it accepts.
// The text lives in a thread-local buffer, valid until the next explain_* call on the same thread.
std::string_view explain_modify_qp(QpType type, QpState current, QpState next, uint32_t mask);

// Whether the attributes the mask selects are in range. Returns 0, EINVAL, or EPERM for a controlled
// Q_Key (high bit set), which the kernel refuses to unprivileged users. Only fields whose mask bit is
// set are looked at, as the kernel does.
int check_qp_attr_values(QpType type, const QpAttr& attr, uint32_t mask, const AttrLimits& limits);

// Why check_qp_attr_values refuses, e.g. "timeout 32 is above 31"; empty when it accepts. Same buffer
// rules as explain_modify_qp.
std::string_view explain_qp_attr_values(QpType type, const QpAttr& attr, uint32_t mask,
                                        const AttrLimits& limits);

// "IBV_QP_PATH_MTU" for attr_path_mtu; empty for a value that is not exactly one known bit.
std::string_view attr_mask_bit_name(uint32_t bit);

}  // namespace uroce::verbs
