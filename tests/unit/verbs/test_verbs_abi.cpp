// The verbs vocabulary (transport/verbs/types.hpp) against the installed rdma-core header: every value
// must equal its IBV_* counterpart, because the verbs shim converts between the two with a cast. Checked
// twice on purpose: static_assert breaks the build the moment a value drifts, CHECK makes the equalities
// visible (and counted) in the test report. to_string(WcStatus) is compared against the real
// ibv_wc_status_str() from libibverbs.
#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <string_view>

#include "transport/verbs/qp_rules.hpp"
#include "transport/verbs/types.hpp"
#include "transport/verbs/work.hpp"

using namespace uroce::verbs;

namespace {

// Both sides as plain integers: the ours are scoped or fixed-type enums, rdma-core's are C enums.
template <typename A, typename B>
constexpr bool same_value(A ours, B theirs) {
  return static_cast<long long>(ours) == static_cast<long long>(theirs);
}

}  // namespace

// One X-macro per family: X(uroce value, rdma-core value).
#define QP_TYPES(X)     \
  X(QpType::rc, IBV_QPT_RC) \
  X(QpType::uc, IBV_QPT_UC) \
  X(QpType::ud, IBV_QPT_UD)

#define QP_STATES(X)               \
  X(QpState::reset, IBV_QPS_RESET) \
  X(QpState::init, IBV_QPS_INIT)   \
  X(QpState::rtr, IBV_QPS_RTR)     \
  X(QpState::rts, IBV_QPS_RTS)     \
  X(QpState::sqd, IBV_QPS_SQD)     \
  X(QpState::sqe, IBV_QPS_SQE)     \
  X(QpState::err, IBV_QPS_ERR)

#define WC_STATUSES(X)                                   \
  X(WcStatus::success, IBV_WC_SUCCESS)                   \
  X(WcStatus::loc_len_err, IBV_WC_LOC_LEN_ERR)           \
  X(WcStatus::loc_qp_op_err, IBV_WC_LOC_QP_OP_ERR)       \
  X(WcStatus::loc_eec_op_err, IBV_WC_LOC_EEC_OP_ERR)     \
  X(WcStatus::loc_prot_err, IBV_WC_LOC_PROT_ERR)         \
  X(WcStatus::wr_flush_err, IBV_WC_WR_FLUSH_ERR)         \
  X(WcStatus::mw_bind_err, IBV_WC_MW_BIND_ERR)           \
  X(WcStatus::bad_resp_err, IBV_WC_BAD_RESP_ERR)         \
  X(WcStatus::loc_access_err, IBV_WC_LOC_ACCESS_ERR)     \
  X(WcStatus::rem_inv_req_err, IBV_WC_REM_INV_REQ_ERR)   \
  X(WcStatus::rem_access_err, IBV_WC_REM_ACCESS_ERR)     \
  X(WcStatus::rem_op_err, IBV_WC_REM_OP_ERR)             \
  X(WcStatus::retry_exc_err, IBV_WC_RETRY_EXC_ERR)       \
  X(WcStatus::rnr_retry_exc_err, IBV_WC_RNR_RETRY_EXC_ERR) \
  X(WcStatus::loc_rdd_viol_err, IBV_WC_LOC_RDD_VIOL_ERR) \
  X(WcStatus::rem_inv_rd_req_err, IBV_WC_REM_INV_RD_REQ_ERR) \
  X(WcStatus::rem_abort_err, IBV_WC_REM_ABORT_ERR)       \
  X(WcStatus::inv_eecn_err, IBV_WC_INV_EECN_ERR)         \
  X(WcStatus::inv_eec_state_err, IBV_WC_INV_EEC_STATE_ERR) \
  X(WcStatus::fatal_err, IBV_WC_FATAL_ERR)               \
  X(WcStatus::resp_timeout_err, IBV_WC_RESP_TIMEOUT_ERR) \
  X(WcStatus::general_err, IBV_WC_GENERAL_ERR)             \
  X(WcStatus::tm_err, IBV_WC_TM_ERR)                       \
  X(WcStatus::tm_rndv_incomplete, IBV_WC_TM_RNDV_INCOMPLETE)

#define WC_OPCODES(X)                                       \
  X(WcOpcode::send, IBV_WC_SEND)                            \
  X(WcOpcode::rdma_write, IBV_WC_RDMA_WRITE)                \
  X(WcOpcode::rdma_read, IBV_WC_RDMA_READ)                  \
  X(WcOpcode::comp_swap, IBV_WC_COMP_SWAP)                  \
  X(WcOpcode::fetch_add, IBV_WC_FETCH_ADD)                  \
  X(WcOpcode::bind_mw, IBV_WC_BIND_MW)                      \
  X(WcOpcode::local_inv, IBV_WC_LOCAL_INV)                  \
  X(WcOpcode::atomic_write, IBV_WC_ATOMIC_WRITE)            \
  X(WcOpcode::recv, IBV_WC_RECV)                            \
  X(WcOpcode::recv_rdma_with_imm, IBV_WC_RECV_RDMA_WITH_IMM) \
  X(WcOpcode::tm_add, IBV_WC_TM_ADD)                        \
  X(WcOpcode::tm_del, IBV_WC_TM_DEL)                        \
  X(WcOpcode::tm_sync, IBV_WC_TM_SYNC)                      \
  X(WcOpcode::tm_recv, IBV_WC_TM_RECV)                      \
  X(WcOpcode::tm_no_tag, IBV_WC_TM_NO_TAG)

#define WC_FLAGS(X)                  \
  X(wc_grh, IBV_WC_GRH)             \
  X(wc_with_imm, IBV_WC_WITH_IMM)   \
  X(wc_with_inv, IBV_WC_WITH_INV)   \
  X(wc_ip_csum_ok, IBV_WC_IP_CSUM_OK) \
  X(wc_tm_sync_req, IBV_WC_TM_SYNC_REQ) \
  X(wc_tm_match, IBV_WC_TM_MATCH)   \
  X(wc_tm_data_valid, IBV_WC_TM_DATA_VALID)

// ibv_post_srq_ops' struct ibv_ops_wr: its opcodes and flags (the verbs shim casts both).
#define TAG_OPS(X)                             \
  X(TagOpcode::add, IBV_WR_TAG_ADD)            \
  X(TagOpcode::del, IBV_WR_TAG_DEL)            \
  X(TagOpcode::sync, IBV_WR_TAG_SYNC)          \
  X(tag_op_signaled, IBV_OPS_SIGNALED)         \
  X(tag_op_sync, IBV_OPS_TM_SYNC)

#define WR_OPCODES(X)                                             \
  X(WrOpcode::rdma_write, IBV_WR_RDMA_WRITE)                      \
  X(WrOpcode::rdma_write_with_imm, IBV_WR_RDMA_WRITE_WITH_IMM)    \
  X(WrOpcode::send, IBV_WR_SEND)                                  \
  X(WrOpcode::send_with_imm, IBV_WR_SEND_WITH_IMM)                \
  X(WrOpcode::rdma_read, IBV_WR_RDMA_READ)                        \
  X(WrOpcode::atomic_cmp_and_swp, IBV_WR_ATOMIC_CMP_AND_SWP)      \
  X(WrOpcode::atomic_fetch_and_add, IBV_WR_ATOMIC_FETCH_AND_ADD)  \
  X(WrOpcode::local_inv, IBV_WR_LOCAL_INV)                        \
  X(WrOpcode::bind_mw, IBV_WR_BIND_MW)                            \
  X(WrOpcode::send_with_inv, IBV_WR_SEND_WITH_INV)                \
  X(WrOpcode::atomic_write, IBV_WR_ATOMIC_WRITE)

#define SEND_FLAGS(X)                   \
  X(send_fence, IBV_SEND_FENCE)         \
  X(send_signaled, IBV_SEND_SIGNALED)   \
  X(send_solicited, IBV_SEND_SOLICITED) \
  X(send_inline, IBV_SEND_INLINE)

#define ACCESS_FLAGS(X)                             \
  X(access_local_write, IBV_ACCESS_LOCAL_WRITE)     \
  X(access_remote_write, IBV_ACCESS_REMOTE_WRITE)   \
  X(access_remote_read, IBV_ACCESS_REMOTE_READ)     \
  X(access_remote_atomic, IBV_ACCESS_REMOTE_ATOMIC) \
  X(access_mw_bind, IBV_ACCESS_MW_BIND)             \
  X(access_zero_based, IBV_ACCESS_ZERO_BASED)

#define QP_ATTR_MASK(X)                                       \
  X(attr_state, IBV_QP_STATE)                                 \
  X(attr_cur_state, IBV_QP_CUR_STATE)                         \
  X(attr_en_sqd_async_notify, IBV_QP_EN_SQD_ASYNC_NOTIFY)     \
  X(attr_access_flags, IBV_QP_ACCESS_FLAGS)                   \
  X(attr_pkey_index, IBV_QP_PKEY_INDEX)                       \
  X(attr_port, IBV_QP_PORT)                                   \
  X(attr_qkey, IBV_QP_QKEY)                                   \
  X(attr_av, IBV_QP_AV)                                       \
  X(attr_path_mtu, IBV_QP_PATH_MTU)                           \
  X(attr_timeout, IBV_QP_TIMEOUT)                             \
  X(attr_retry_cnt, IBV_QP_RETRY_CNT)                         \
  X(attr_rnr_retry, IBV_QP_RNR_RETRY)                         \
  X(attr_rq_psn, IBV_QP_RQ_PSN)                               \
  X(attr_max_qp_rd_atomic, IBV_QP_MAX_QP_RD_ATOMIC)           \
  X(attr_alt_path, IBV_QP_ALT_PATH)                           \
  X(attr_min_rnr_timer, IBV_QP_MIN_RNR_TIMER)                 \
  X(attr_sq_psn, IBV_QP_SQ_PSN)                               \
  X(attr_max_dest_rd_atomic, IBV_QP_MAX_DEST_RD_ATOMIC)       \
  X(attr_path_mig_state, IBV_QP_PATH_MIG_STATE)               \
  X(attr_cap, IBV_QP_CAP)                                     \
  X(attr_dest_qpn, IBV_QP_DEST_QPN)                           \
  X(attr_rate_limit, IBV_QP_RATE_LIMIT)

#define EVENTS(X)                                                   \
  X(EventType::cq_err, IBV_EVENT_CQ_ERR)                            \
  X(EventType::qp_fatal, IBV_EVENT_QP_FATAL)                        \
  X(EventType::qp_req_err, IBV_EVENT_QP_REQ_ERR)                    \
  X(EventType::qp_access_err, IBV_EVENT_QP_ACCESS_ERR)              \
  X(EventType::comm_est, IBV_EVENT_COMM_EST)                        \
  X(EventType::sq_drained, IBV_EVENT_SQ_DRAINED)                    \
  X(EventType::path_mig, IBV_EVENT_PATH_MIG)                        \
  X(EventType::path_mig_err, IBV_EVENT_PATH_MIG_ERR)                \
  X(EventType::device_fatal, IBV_EVENT_DEVICE_FATAL)                \
  X(EventType::port_active, IBV_EVENT_PORT_ACTIVE)                  \
  X(EventType::port_err, IBV_EVENT_PORT_ERR)                        \
  X(EventType::srq_err, IBV_EVENT_SRQ_ERR)                          \
  X(EventType::srq_limit_reached, IBV_EVENT_SRQ_LIMIT_REACHED)      \
  X(EventType::qp_last_wqe_reached, IBV_EVENT_QP_LAST_WQE_REACHED)

#define MTUS(X)                      \
  X(Mtu::mtu_256, IBV_MTU_256)       \
  X(Mtu::mtu_512, IBV_MTU_512)       \
  X(Mtu::mtu_1024, IBV_MTU_1024)     \
  X(Mtu::mtu_2048, IBV_MTU_2048)     \
  X(Mtu::mtu_4096, IBV_MTU_4096)

#define ABI_STATIC_ASSERT(ours, theirs) static_assert(same_value(ours, theirs), #ours " != " #theirs);
QP_TYPES(ABI_STATIC_ASSERT)
QP_STATES(ABI_STATIC_ASSERT)
WC_STATUSES(ABI_STATIC_ASSERT)
WC_OPCODES(ABI_STATIC_ASSERT)
WC_FLAGS(ABI_STATIC_ASSERT)
TAG_OPS(ABI_STATIC_ASSERT)
WR_OPCODES(ABI_STATIC_ASSERT)
SEND_FLAGS(ABI_STATIC_ASSERT)
ACCESS_FLAGS(ABI_STATIC_ASSERT)
QP_ATTR_MASK(ABI_STATIC_ASSERT)
EVENTS(ABI_STATIC_ASSERT)
MTUS(ABI_STATIC_ASSERT)

// qp_rules' "every bit rdma-core names" must be exactly the IBV_QP_* enumerators above.
#define ABI_OR_THEIRS(ours, theirs) | theirs
static_assert(known_attr_mask == (0u QP_ATTR_MASK(ABI_OR_THEIRS)));

#define ABI_CHECK(ours, theirs)              \
  {                                          \
    INFO(#ours " == " #theirs);              \
    CHECK(same_value(ours, theirs));         \
  }

TEST_CASE("verbs ABI: QP types and states equal rdma-core's", "[verbs][abi]") {
  QP_TYPES(ABI_CHECK)
  QP_STATES(ABI_CHECK)
}

TEST_CASE("verbs ABI: completion statuses, opcodes and flags equal rdma-core's", "[verbs][abi]") {
  WC_STATUSES(ABI_CHECK)
  WC_OPCODES(ABI_CHECK)
  WC_FLAGS(ABI_CHECK)
}

TEST_CASE("verbs ABI: tag matching list operations equal rdma-core's", "[verbs][abi]") {
  TAG_OPS(ABI_CHECK)
}

TEST_CASE("verbs ABI: work request opcodes, send and access flags equal rdma-core's", "[verbs][abi]") {
  WR_OPCODES(ABI_CHECK)
  SEND_FLAGS(ABI_CHECK)
  ACCESS_FLAGS(ABI_CHECK)
}

TEST_CASE("verbs ABI: QP attribute mask bits equal rdma-core's", "[verbs][abi]") {
  QP_ATTR_MASK(ABI_CHECK)
  CHECK(known_attr_mask == (0u QP_ATTR_MASK(ABI_OR_THEIRS)));
  // attr_mask_bit_name spells each bit the way verbs.h does.
#define ABI_NAME_CHECK(ours, theirs) CHECK(attr_mask_bit_name(ours) == std::string_view(#theirs));
  QP_ATTR_MASK(ABI_NAME_CHECK)
#undef ABI_NAME_CHECK
}

TEST_CASE("verbs ABI: async event types and MTUs equal rdma-core's", "[verbs][abi]") {
  EVENTS(ABI_CHECK)
  MTUS(ABI_CHECK)
  // mtu_bytes agrees with the IBA encoding ibv_mtu uses (256 << (mtu - 1)).
#define ABI_MTU_BYTES(ours, theirs) CHECK(mtu_bytes(ours) == 256u << (unsigned(theirs) - 1));
  MTUS(ABI_MTU_BYTES)
#undef ABI_MTU_BYTES
}

TEST_CASE("to_string(WcStatus) is ibv_wc_status_str, word for word", "[verbs][abi]") {
  // 0..31 covers every status rdma-core 44 names (0..23, the tag matching two included) and a few it does
  // not ("unknown"); 31 is the largest value the C enum's range holds.
  for (unsigned v = 0; v <= 31; ++v) {
    INFO("status " << v);
    const std::string_view theirs = ibv_wc_status_str(static_cast<ibv_wc_status>(v));
    CHECK(to_string(static_cast<WcStatus>(v)) == theirs);
  }
}

TEST_CASE("to_string names QP states and completion opcodes", "[verbs]") {
  CHECK(to_string(QpState::reset) == "RESET");
  CHECK(to_string(QpState::init) == "INIT");
  CHECK(to_string(QpState::rtr) == "RTR");
  CHECK(to_string(QpState::rts) == "RTS");
  CHECK(to_string(QpState::sqd) == "SQD");
  CHECK(to_string(QpState::sqe) == "SQE");
  CHECK(to_string(QpState::err) == "ERR");
  CHECK(to_string(static_cast<QpState>(7)) == "UNKNOWN");

  CHECK(to_string(WcOpcode::send) == "SEND");
  CHECK(to_string(WcOpcode::rdma_write) == "RDMA_WRITE");
  CHECK(to_string(WcOpcode::rdma_read) == "RDMA_READ");
  CHECK(to_string(WcOpcode::comp_swap) == "COMP_SWAP");
  CHECK(to_string(WcOpcode::fetch_add) == "FETCH_ADD");
  CHECK(to_string(WcOpcode::bind_mw) == "BIND_MW");
  CHECK(to_string(WcOpcode::local_inv) == "LOCAL_INV");
  CHECK(to_string(WcOpcode::recv) == "RECV");
  CHECK(to_string(WcOpcode::recv_rdma_with_imm) == "RECV_RDMA_WITH_IMM");
  CHECK(to_string(WcOpcode::tm_add) == "TM_ADD");
  CHECK(to_string(WcOpcode::tm_del) == "TM_DEL");
  CHECK(to_string(WcOpcode::tm_sync) == "TM_SYNC");
  CHECK(to_string(WcOpcode::tm_recv) == "TM_RECV");
  CHECK(to_string(WcOpcode::tm_no_tag) == "TM_NO_TAG");
  CHECK(to_string(static_cast<WcOpcode>(7)) == "UNKNOWN");
}
