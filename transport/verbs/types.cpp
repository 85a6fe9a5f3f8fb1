#include "transport/verbs/types.hpp"

namespace uroce::verbs {

std::string_view to_string(QpState s) {
  switch (s) {
    case QpState::reset: return "RESET";
    case QpState::init: return "INIT";
    case QpState::rtr: return "RTR";
    case QpState::rts: return "RTS";
    case QpState::sqd: return "SQD";
    case QpState::sqe: return "SQE";
    case QpState::err: return "ERR";
  }
  return "UNKNOWN";  // a value cast from outside the enum (e.g. a bad ibv_qp_attr from the shim)
}

// Word for word what rdma-core 44's ibv_wc_status_str() returns (libibverbs/enum_strs.c), so a message
// printed by uroce and one printed by an application through libibverbs read the same.
// tests/unit/verbs/test_verbs_abi.cpp compares every value 0..31 against the installed library.
std::string_view to_string(WcStatus s) {
  switch (s) {
    case WcStatus::success: return "success";
    case WcStatus::loc_len_err: return "local length error";
    case WcStatus::loc_qp_op_err: return "local QP operation error";
    case WcStatus::loc_eec_op_err: return "local EE context operation error";
    case WcStatus::loc_prot_err: return "local protection error";
    case WcStatus::wr_flush_err: return "Work Request Flushed Error";
    case WcStatus::mw_bind_err: return "memory management operation error";
    case WcStatus::bad_resp_err: return "bad response error";
    case WcStatus::loc_access_err: return "local access error";
    case WcStatus::rem_inv_req_err: return "remote invalid request error";
    case WcStatus::rem_access_err: return "remote access error";
    case WcStatus::rem_op_err: return "remote operation error";
    case WcStatus::retry_exc_err: return "transport retry counter exceeded";
    case WcStatus::rnr_retry_exc_err: return "RNR retry counter exceeded";
    case WcStatus::loc_rdd_viol_err: return "local RDD violation error";
    case WcStatus::rem_inv_rd_req_err: return "remote invalid RD request";
    case WcStatus::rem_abort_err: return "aborted error";
    case WcStatus::inv_eecn_err: return "invalid EE context number";
    case WcStatus::inv_eec_state_err: return "invalid EE context state";
    case WcStatus::fatal_err: return "fatal error";
    case WcStatus::resp_timeout_err: return "response timeout error";
    case WcStatus::general_err: return "general error";
    case WcStatus::tm_err: return "TM error";
    case WcStatus::tm_rndv_incomplete: return "TM software rendezvous";
  }
  return "unknown";  // a value a shim might cast in from a real ibv_wc, as ibv_wc_status_str says
}

// rdma-core has no string function for ibv_wc_opcode; these are the enumerator names without IBV_WC_.
std::string_view to_string(WcOpcode o) {
  switch (o) {
    case WcOpcode::send: return "SEND";
    case WcOpcode::rdma_write: return "RDMA_WRITE";
    case WcOpcode::rdma_read: return "RDMA_READ";
    case WcOpcode::comp_swap: return "COMP_SWAP";
    case WcOpcode::fetch_add: return "FETCH_ADD";
    case WcOpcode::bind_mw: return "BIND_MW";
    case WcOpcode::local_inv: return "LOCAL_INV";
    case WcOpcode::atomic_write: return "ATOMIC_WRITE";
    case WcOpcode::recv: return "RECV";
    case WcOpcode::recv_rdma_with_imm: return "RECV_RDMA_WITH_IMM";
    case WcOpcode::tm_add: return "TM_ADD";
    case WcOpcode::tm_del: return "TM_DEL";
    case WcOpcode::tm_sync: return "TM_SYNC";
    case WcOpcode::tm_recv: return "TM_RECV";
    case WcOpcode::tm_no_tag: return "TM_NO_TAG";
  }
  return "UNKNOWN";
}

}  // namespace uroce::verbs
