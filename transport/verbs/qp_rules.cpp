#include "transport/verbs/qp_rules.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

namespace uroce::verbs {

namespace {

using S = QpState;
using T = QpType;

// Short names for the mask bits, so that a row of the table reads on one line.
namespace m {
constexpr uint32_t cur_state = attr_cur_state;
constexpr uint32_t sqd_notify = attr_en_sqd_async_notify;
constexpr uint32_t access = attr_access_flags;
constexpr uint32_t pkey = attr_pkey_index;
constexpr uint32_t port = attr_port;
constexpr uint32_t qkey = attr_qkey;
constexpr uint32_t av = attr_av;
constexpr uint32_t path_mtu = attr_path_mtu;
constexpr uint32_t timeout = attr_timeout;
constexpr uint32_t retry = attr_retry_cnt;
constexpr uint32_t rnr_retry = attr_rnr_retry;
constexpr uint32_t rq_psn = attr_rq_psn;
constexpr uint32_t rd_atomic = attr_max_qp_rd_atomic;
constexpr uint32_t alt_path = attr_alt_path;
constexpr uint32_t rnr_timer = attr_min_rnr_timer;
constexpr uint32_t sq_psn = attr_sq_psn;
constexpr uint32_t dest_rd_atomic = attr_max_dest_rd_atomic;
constexpr uint32_t mig_state = attr_path_mig_state;
constexpr uint32_t dest_qpn = attr_dest_qpn;
}  // namespace m

// The kernel's qp_state_table for RC, UC and UD, one row per (from, to, type): {from, to, type, required,
// optional}. A (from, to, type) with no row is not a transition. The rows for "any state -> RESET" and
// "any state -> ERR" (valid, nothing required or allowed besides IBV_QP_STATE) are added by build_table.
//
// One deliberate difference: the kernel marks SQE->RTS valid for every QP type and gives RC an empty
// required/optional set, so it would accept SQE->RTS on RC with IBV_QP_STATE alone. An RC QP never enters
// SQE (IBA 10.3.1: a send error takes RC to ERR), so that row is left out and the transition is refused.
constexpr QpTransition explicit_rows[] = {
    // Bring-up: RESET -> INIT -> RTR -> RTS.
    {S::reset, S::init, T::rc, m::pkey | m::port | m::access, 0},
    {S::reset, S::init, T::uc, m::pkey | m::port | m::access, 0},
    {S::reset, S::init, T::ud, m::pkey | m::port | m::qkey, 0},

    {S::init, S::init, T::rc, 0, m::pkey | m::port | m::access},
    {S::init, S::init, T::uc, 0, m::pkey | m::port | m::access},
    {S::init, S::init, T::ud, 0, m::pkey | m::port | m::qkey},

    {S::init, S::rtr, T::rc, m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::dest_rd_atomic | m::rnr_timer,
     m::alt_path | m::access | m::pkey},
    {S::init, S::rtr, T::uc, m::av | m::path_mtu | m::dest_qpn | m::rq_psn,
     m::alt_path | m::access | m::pkey},
    {S::init, S::rtr, T::ud, 0, m::pkey | m::qkey},

    {S::rtr, S::rts, T::rc, m::sq_psn | m::timeout | m::retry | m::rnr_retry | m::rd_atomic,
     m::cur_state | m::alt_path | m::access | m::rnr_timer | m::mig_state},
    {S::rtr, S::rts, T::uc, m::sq_psn, m::cur_state | m::alt_path | m::access | m::mig_state},
    {S::rtr, S::rts, T::ud, m::sq_psn, m::cur_state | m::qkey},

    // Changes while running.
    {S::rts, S::rts, T::rc, 0, m::cur_state | m::access | m::alt_path | m::mig_state | m::rnr_timer},
    {S::rts, S::rts, T::uc, 0, m::cur_state | m::access | m::alt_path | m::mig_state},
    {S::rts, S::rts, T::ud, 0, m::cur_state | m::qkey},

    // Send queue drain and back.
    {S::rts, S::sqd, T::rc, 0, m::sqd_notify},
    {S::rts, S::sqd, T::uc, 0, m::sqd_notify},
    {S::rts, S::sqd, T::ud, 0, m::sqd_notify},

    {S::sqd, S::rts, T::rc, 0, m::cur_state | m::alt_path | m::access | m::rnr_timer | m::mig_state},
    {S::sqd, S::rts, T::uc, 0, m::cur_state | m::alt_path | m::access | m::mig_state},
    {S::sqd, S::rts, T::ud, 0, m::cur_state | m::qkey},

    {S::sqd, S::sqd, T::rc, 0,
     m::port | m::av | m::timeout | m::retry | m::rnr_retry | m::rd_atomic | m::dest_rd_atomic | m::alt_path |
         m::access | m::pkey | m::rnr_timer | m::mig_state},
    {S::sqd, S::sqd, T::uc, 0, m::av | m::alt_path | m::access | m::pkey | m::mig_state},
    {S::sqd, S::sqd, T::ud, 0, m::pkey | m::qkey},

    // XRC, as the kernel's table has it: the initiator is RC's sending half (no receive attributes), the
    // target RC's receiving half (RTR->RTS still takes a timeout and an SQ PSN, as the kernel requires).
    {S::reset, S::init, T::xrc_send, m::pkey | m::port | m::access, 0},
    {S::reset, S::init, T::xrc_recv, m::pkey | m::port | m::access, 0},
    {S::init, S::init, T::xrc_send, 0, m::pkey | m::port | m::access},
    {S::init, S::init, T::xrc_recv, 0, m::pkey | m::port | m::access},
    {S::init, S::rtr, T::xrc_send, m::av | m::path_mtu | m::dest_qpn | m::rq_psn, m::alt_path | m::access | m::pkey},
    {S::init, S::rtr, T::xrc_recv,
     m::av | m::path_mtu | m::dest_qpn | m::rq_psn | m::dest_rd_atomic | m::rnr_timer, m::alt_path | m::access | m::pkey},
    {S::rtr, S::rts, T::xrc_send, m::timeout | m::retry | m::rnr_retry | m::sq_psn | m::rd_atomic,
     m::cur_state | m::alt_path | m::access | m::mig_state},
    {S::rtr, S::rts, T::xrc_recv, m::timeout | m::sq_psn,
     m::cur_state | m::alt_path | m::access | m::rnr_timer | m::mig_state},
    {S::rts, S::rts, T::xrc_send, 0, m::cur_state | m::access | m::alt_path | m::mig_state},
    {S::rts, S::rts, T::xrc_recv, 0, m::cur_state | m::access | m::alt_path | m::mig_state | m::rnr_timer},
    {S::rts, S::sqd, T::xrc_send, 0, m::sqd_notify},
    {S::rts, S::sqd, T::xrc_recv, 0, m::sqd_notify},
    {S::sqd, S::rts, T::xrc_send, 0, m::cur_state | m::alt_path | m::access | m::mig_state},
    {S::sqd, S::rts, T::xrc_recv, 0, m::cur_state | m::alt_path | m::access | m::rnr_timer | m::mig_state},
    {S::sqd, S::sqd, T::xrc_send, 0,
     m::port | m::av | m::timeout | m::retry | m::rnr_retry | m::rd_atomic | m::alt_path | m::access | m::pkey |
         m::mig_state},
    {S::sqd, S::sqd, T::xrc_recv, 0,
     m::port | m::av | m::timeout | m::dest_rd_atomic | m::alt_path | m::access | m::pkey | m::rnr_timer |
         m::mig_state},

    // Raw packet QPs, as the kernel's table has them: a port to go to INIT, nothing for RTR, a rate limit
    // allowed from RTR on; no SQD. (The rate limit is accepted and not enforced.)
    {S::reset, S::init, T::raw_packet, m::port, 0},
    {S::init, S::init, T::raw_packet, 0, m::port},
    {S::init, S::rtr, T::raw_packet, 0, 0},
    {S::rtr, S::rts, T::raw_packet, 0, attr_rate_limit},
    {S::rts, S::rts, T::raw_packet, 0, attr_rate_limit},

    // Recovery from a send queue error (UC and UD only, see above).
    {S::sqe, S::rts, T::uc, 0, m::cur_state | m::access},
    {S::sqe, S::rts, T::ud, 0, m::cur_state | m::qkey},
};

constexpr QpState all_states[] = {S::reset, S::init, S::rtr, S::rts, S::sqd, S::sqe, S::err};
constexpr QpType all_types[] = {T::rc, T::uc, T::ud, T::raw_packet, T::xrc_send, T::xrc_recv};

constexpr auto build_table() {
  std::array<QpTransition, std::size(explicit_rows) + std::size(all_states) * 2 * std::size(all_types)> t{};
  size_t n = 0;
  for (const QpTransition& r : explicit_rows) t[n++] = r;
  for (QpState from : all_states)
    for (QpState to : {S::reset, S::err})
      for (QpType type : all_types) t[n++] = QpTransition{from, to, type, 0, 0};
  return t;
}

constexpr auto table = build_table();

constexpr bool table_is_consistent() {
  for (size_t i = 0; i < table.size(); ++i) {
    if ((table[i].required & table[i].optional) != 0) return false;
    if (((table[i].required | table[i].optional) & (attr_state | ~known_attr_mask)) != 0) return false;
    for (size_t j = i + 1; j < table.size(); ++j)
      if (table[i].from == table[j].from && table[i].to == table[j].to && table[i].type == table[j].type)
        return false;
  }
  return true;
}
static_assert(table_is_consistent(), "a (from, to, type) appears twice, or a row's bit sets overlap");

bool valid_type(QpType t) {
  return t == T::rc || t == T::uc || t == T::ud || t == T::raw_packet || t == T::xrc_send || t == T::xrc_recv;
}
bool valid_state(QpState s) { return static_cast<unsigned>(s) <= static_cast<unsigned>(S::err); }

std::string_view type_name(QpType t) {
  switch (t) {
    case T::rc: return "RC";
    case T::uc: return "UC";
    case T::ud: return "UD";
    case T::raw_packet: return "RAW_PACKET";
    case T::xrc_send: return "XRC_SEND";
    case T::xrc_recv: return "XRC_RECV";
  }
  return "?";
}

constexpr std::string_view bit_names[32] = {
    "IBV_QP_STATE",     "IBV_QP_CUR_STATE",          "IBV_QP_EN_SQD_ASYNC_NOTIFY", "IBV_QP_ACCESS_FLAGS",
    "IBV_QP_PKEY_INDEX", "IBV_QP_PORT",              "IBV_QP_QKEY",                "IBV_QP_AV",
    "IBV_QP_PATH_MTU",  "IBV_QP_TIMEOUT",            "IBV_QP_RETRY_CNT",           "IBV_QP_RNR_RETRY",
    "IBV_QP_RQ_PSN",    "IBV_QP_MAX_QP_RD_ATOMIC",   "IBV_QP_ALT_PATH",            "IBV_QP_MIN_RNR_TIMER",
    "IBV_QP_SQ_PSN",    "IBV_QP_MAX_DEST_RD_ATOMIC", "IBV_QP_PATH_MIG_STATE",      "IBV_QP_CAP",
    "IBV_QP_DEST_QPN",  "", "", "", "", "IBV_QP_RATE_LIMIT", "", "", "", "", "", "",
};

// "IBV_QP_AV, IBV_QP_PATH_MTU"; bits rdma-core does not name read "mask bit 22".
std::string bits_text(uint32_t bits) {
  std::string out;
  for (unsigned b = 0; b < 32; ++b) {
    if ((bits & (1u << b)) == 0) continue;
    if (!out.empty()) out += ", ";
    if (!bit_names[b].empty())
      out += bit_names[b];
    else
      out += "mask bit " + std::to_string(b);
  }
  return out;
}

std::string transition_text(QpState from, QpState to) {
  return std::string(to_string(from)) + "->" + std::string(to_string(to));
}

// The explanation buffer behind the string_views the explain_* functions return.
std::string& explanation() {
  thread_local std::string text;
  return text;
}

// check_modify_qp and explain_modify_qp in one: `why`, when given, receives the reason for a refusal.
int evaluate_modify(QpType type, QpState current, QpState next, uint32_t mask, std::string* why) {
  auto refuse = [why](std::string reason) {
    if (why) *why = std::move(reason);
    return EINVAL;
  };
  if (!valid_type(type))
    return refuse("QP type " + std::to_string(unsigned(type)) + " is not RC, UC, UD, RAW_PACKET, XRC_SEND or XRC_RECV");
  if (!valid_state(current))
    return refuse("current QP state " + std::to_string(unsigned(current)) + " does not exist");
  const bool stays = (mask & attr_state) == 0;
  if (stays) next = current;
  // uverbs' modify_qp() refuses a qp_state above IBV_QPS_ERR before anything else looks at it.
  if (!valid_state(next)) return refuse("QP state " + std::to_string(unsigned(next)) + " does not exist");
  // Same order as ib_modify_qp_is_ok(): IBV_QP_CUR_STATE first, then the table, then required, then extra.
  if ((mask & attr_cur_state) && current != S::rtr && current != S::rts && current != S::sqd &&
      current != S::sqe)
    return refuse("IBV_QP_CUR_STATE is only accepted from RTR, RTS, SQD or SQE, not from " +
                  std::string(to_string(current)));
  const std::optional<QpTransition> rule = find_transition(type, current, next);
  if (!rule) {
    std::string reason = transition_text(current, next) + " is not a valid transition";
    if (next == S::sqe)
      reason += " (only a send queue error moves a QP to SQE, never ibv_modify_qp)";
    else if (current == S::sqe && type == T::rc)
      reason += " on RC (an RC QP never enters SQE: a send error takes it to ERR)";
    else if (stays)
      reason += " (without IBV_QP_STATE the QP stays in " + std::string(to_string(current)) + ")";
    return refuse(std::move(reason));
  }
  const uint32_t missing = rule->required & ~mask;
  const uint32_t extra = mask & ~(rule->required | rule->optional | attr_state);
  if (missing == 0 && extra == 0) return 0;
  const std::string where = transition_text(current, next) + " on " + std::string(type_name(type));
  if (missing != 0) return refuse(where + " requires " + bits_text(missing));
  return refuse(where + " does not accept " + bits_text(extra));
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

// check_qp_attr_values and explain_qp_attr_values in one. Checks run in mask-bit order, so the first
// offending attribute by bit number is the one reported.
int evaluate_values(QpType type, const QpAttr& a, uint32_t mask, const AttrLimits& lim, std::string* why) {
  auto refuse = [why](std::string reason, int err = EINVAL) {
    if (why) *why = std::move(reason);
    return err;
  };
  auto n = [](unsigned v) { return std::to_string(v); };
  // "<field> <value> is above <limit>"; `whose` names the device limit, empty for an IBA field width.
  auto above = [&](const char* field, unsigned v, unsigned max, const char* whose = "") {
    return refuse(std::string(field) + " " + n(v) + " is above " + whose + n(max));
  };
  auto over24 = [&](const char* field, uint32_t v) {
    return refuse(std::string(field) + " " + hex(v) + " does not fit in 24 bits");
  };
  constexpr uint32_t field24 = 0xffffff;  // PSNs and QPNs are 24-bit BTH fields

  // uverbs' modify_qp() refuses state values beyond IBV_QPS_ERR.
  if ((mask & attr_state) && !valid_state(a.qp_state))
    return refuse("qp_state " + n(unsigned(a.qp_state)) + " does not exist");
  if ((mask & attr_cur_state) && !valid_state(a.cur_qp_state))
    return refuse("cur_qp_state " + n(unsigned(a.cur_qp_state)) + " does not exist");
  // rxe_qp_chk_attr(): access flags only mean something on RC and UC.
  if ((mask & attr_access_flags) && type == T::ud)
    return refuse("IBV_QP_ACCESS_FLAGS is not accepted on a UD QP");
  // ib_security_modify_qp() looks the index up in the P_Key table (ib_get_cached_pkey).
  if ((mask & attr_pkey_index) && a.pkey_index >= lim.pkey_table_size)
    return refuse("pkey_index " + n(a.pkey_index) + " is not below the P_Key table size " +
                  n(lim.pkey_table_size));
  // rdma_is_port_valid(): uroce has one port, number 1.
  if ((mask & attr_port) && a.port_num != 1)
    return refuse("port_num " + n(a.port_num) + " does not exist: the device has port 1 only");
  // uverbs refuses a controlled Q_Key (IB_QP_SET_QKEY, the high bit) with EPERM unless the administrator
  // allowed it (rdma_nl_get_privileged_qkey); uroce has no such switch.
  if ((mask & attr_qkey) && (a.qkey & 0x80000000u))
    return refuse("qkey " + hex(a.qkey) + " is a controlled Q_Key (high bit set), which needs privilege", EPERM);
  // rdma_fill_sgid_attr(): the source GID index must name an entry of the GID table.
  if ((mask & attr_av) && a.ah_attr.sgid_index >= lim.gid_table_size)
    return refuse("ah_attr.sgid_index " + n(a.ah_attr.sgid_index) + " is not below the GID table size " +
                  n(lim.gid_table_size));
  if (mask & attr_path_mtu) {
    const unsigned mtu = unsigned(a.path_mtu);
    if (mtu < unsigned(Mtu::mtu_256) || mtu > unsigned(Mtu::mtu_4096))
      return refuse("path_mtu " + n(mtu) + " is not an IBV_MTU_* value (1..5)");
    if (mtu > unsigned(lim.active_mtu))
      return refuse("path_mtu " + n(mtu_bytes(a.path_mtu)) + " is above the port's active MTU " +
                    n(mtu_bytes(lim.active_mtu)));
  }
  // IBA field widths: Local ACK Timeout and Minimum RNR NAK Timer are 5 bits, the retry counters 3.
  if ((mask & attr_timeout) && a.timeout > 31) return above("timeout", a.timeout, 31);
  if ((mask & attr_retry_cnt) && a.retry_cnt > 7) return above("retry_cnt", a.retry_cnt, 7);
  if ((mask & attr_rnr_retry) && a.rnr_retry > 7) return above("rnr_retry", a.rnr_retry, 7);
  if ((mask & attr_rq_psn) && a.rq_psn > field24) return over24("rq_psn", a.rq_psn);
  if ((mask & attr_max_qp_rd_atomic) && a.max_rd_atomic > lim.max_qp_rd_atom)
    return above("max_rd_atomic", a.max_rd_atomic, lim.max_qp_rd_atom, "the device's max_qp_rd_atom ");
  // _ib_modify_qp(): alternate paths (APM) are InfiniBand-only; the kernel refuses them on RoCE ports.
  if (mask & attr_alt_path)
    return refuse("IBV_QP_ALT_PATH is not supported on RoCE (alternate paths are InfiniBand-only)");
  if ((mask & attr_min_rnr_timer) && a.min_rnr_timer > 31) return above("min_rnr_timer", a.min_rnr_timer, 31);
  if ((mask & attr_sq_psn) && a.sq_psn > field24) return over24("sq_psn", a.sq_psn);
  if ((mask & attr_max_dest_rd_atomic) && a.max_dest_rd_atomic > lim.max_qp_rd_atom)
    return above("max_dest_rd_atomic", a.max_dest_rd_atomic, lim.max_qp_rd_atom, "the device's max_qp_rd_atom ");
  // rxe_qp_chk_cap().
  if (mask & attr_cap) {
    const QpCap& c = a.cap;
    const char* wr = "the device's max_qp_wr ";
    const char* sge = "the device's max_sge ";
    if (c.max_send_wr > lim.max_qp_wr) return above("cap.max_send_wr", c.max_send_wr, lim.max_qp_wr, wr);
    if (c.max_recv_wr > lim.max_qp_wr) return above("cap.max_recv_wr", c.max_recv_wr, lim.max_qp_wr, wr);
    if (c.max_send_sge > lim.max_sge) return above("cap.max_send_sge", c.max_send_sge, lim.max_sge, sge);
    if (c.max_recv_sge > lim.max_sge) return above("cap.max_recv_sge", c.max_recv_sge, lim.max_sge, sge);
    if (c.max_inline_data > lim.max_inline_data)
      return above("cap.max_inline_data", c.max_inline_data, lim.max_inline_data, "the device's max_inline_data ");
  }
  if ((mask & attr_dest_qpn) && a.dest_qp_num > field24) return over24("dest_qp_num", a.dest_qp_num);
  return 0;
}

}  // namespace

std::optional<QpTransition> find_transition(QpType type, QpState from, QpState to) {
  for (const QpTransition& r : table)
    if (r.type == type && r.from == from && r.to == to) return r;
  return std::nullopt;
}

uint32_t ignored_attr_mask(QpType type) {
  switch (type) {
    case T::xrc_send: return m::dest_rd_atomic | m::rnr_timer;
    case T::xrc_recv: return m::rd_atomic | m::retry | m::rnr_retry;
    default: return 0;
  }
}

int check_modify_qp(QpType type, QpState current, QpState next, uint32_t mask) {
  return evaluate_modify(type, current, next, mask, nullptr);
}

std::string_view explain_modify_qp(QpType type, QpState current, QpState next, uint32_t mask) {
  std::string& text = explanation();
  text.clear();
  evaluate_modify(type, current, next, mask, &text);
  return text;
}

int check_qp_attr_values(QpType type, const QpAttr& attr, uint32_t mask, const AttrLimits& limits) {
  return evaluate_values(type, attr, mask, limits, nullptr);
}

std::string_view explain_qp_attr_values(QpType type, const QpAttr& attr, uint32_t mask,
                                        const AttrLimits& limits) {
  std::string& text = explanation();
  text.clear();
  evaluate_values(type, attr, mask, limits, &text);
  return text;
}

std::string_view attr_mask_bit_name(uint32_t bit) {
  if (bit == 0 || (bit & (bit - 1)) != 0) return {};
  for (unsigned b = 0; b < 32; ++b)
    if (bit == (1u << b)) return bit_names[b];
  return {};
}

}  // namespace uroce::verbs
