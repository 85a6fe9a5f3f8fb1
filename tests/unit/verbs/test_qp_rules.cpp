// The ibv_modify_qp rules (transport/verbs/qp_rules.hpp): the kernel's transition table for RC, UC and
// UD, the masks real programs pass (ibv_rc/uc/ud_pingpong from rdma-core, perftest), and the value ranges.
//
// The expectations here are written independently of the table in qp_rules.cpp (the validity matrix,
// the bring-up masks, the exact messages), then a sweep over every (type, from, to) checks that each
// required bit is really required and each other bit really refused.
#include <catch2/catch.hpp>

#include <cerrno>
#include <string>

#include "transport/verbs/qp_rules.hpp"

using namespace uroce::verbs;

namespace {

using S = QpState;
using T = QpType;

constexpr QpState all_states[] = {S::reset, S::init, S::rtr, S::rts, S::sqd, S::sqe, S::err};
constexpr QpType all_types[] = {T::rc, T::uc, T::ud};

// The IBV_QP_* values, spelled as in the programs whose masks are copied below.
constexpr uint32_t IBV_QP_STATE = attr_state;
constexpr uint32_t IBV_QP_CUR_STATE = attr_cur_state;
constexpr uint32_t IBV_QP_EN_SQD_ASYNC_NOTIFY = attr_en_sqd_async_notify;
constexpr uint32_t IBV_QP_ACCESS_FLAGS = attr_access_flags;
constexpr uint32_t IBV_QP_PKEY_INDEX = attr_pkey_index;
constexpr uint32_t IBV_QP_PORT = attr_port;
constexpr uint32_t IBV_QP_QKEY = attr_qkey;
constexpr uint32_t IBV_QP_AV = attr_av;
constexpr uint32_t IBV_QP_PATH_MTU = attr_path_mtu;
constexpr uint32_t IBV_QP_TIMEOUT = attr_timeout;
constexpr uint32_t IBV_QP_RETRY_CNT = attr_retry_cnt;
constexpr uint32_t IBV_QP_RNR_RETRY = attr_rnr_retry;
constexpr uint32_t IBV_QP_RQ_PSN = attr_rq_psn;
constexpr uint32_t IBV_QP_MAX_QP_RD_ATOMIC = attr_max_qp_rd_atomic;
constexpr uint32_t IBV_QP_ALT_PATH = attr_alt_path;
constexpr uint32_t IBV_QP_MIN_RNR_TIMER = attr_min_rnr_timer;
constexpr uint32_t IBV_QP_SQ_PSN = attr_sq_psn;
constexpr uint32_t IBV_QP_MAX_DEST_RD_ATOMIC = attr_max_dest_rd_atomic;
constexpr uint32_t IBV_QP_PATH_MIG_STATE = attr_path_mig_state;
constexpr uint32_t IBV_QP_CAP = attr_cap;
constexpr uint32_t IBV_QP_DEST_QPN = attr_dest_qpn;
constexpr uint32_t IBV_QP_RATE_LIMIT = attr_rate_limit;

// The standard bring-up, as the brief for this module states it (IBV_QP_STATE included).
constexpr uint32_t rc_to_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr uint32_t rc_to_rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr uint32_t rc_to_rts =
    IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
constexpr uint32_t uc_to_init = rc_to_init;
constexpr uint32_t uc_to_rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
constexpr uint32_t uc_to_rts = IBV_QP_STATE | IBV_QP_SQ_PSN;
constexpr uint32_t ud_to_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr uint32_t ud_to_rtr = IBV_QP_STATE;
constexpr uint32_t ud_to_rts = IBV_QP_STATE | IBV_QP_SQ_PSN;

struct Step {
  QpType type;
  QpState from, to;
  uint32_t mask;  // with IBV_QP_STATE
};

constexpr Step bring_up[] = {
    {T::rc, S::reset, S::init, rc_to_init}, {T::rc, S::init, S::rtr, rc_to_rtr}, {T::rc, S::rtr, S::rts, rc_to_rts},
    {T::uc, S::reset, S::init, uc_to_init}, {T::uc, S::init, S::rtr, uc_to_rtr}, {T::uc, S::rtr, S::rts, uc_to_rts},
    {T::ud, S::reset, S::init, ud_to_init}, {T::ud, S::init, S::rtr, ud_to_rtr}, {T::ud, S::rtr, S::rts, ud_to_rts},
};

// Which transitions exist, written out by hand from the kernel's qp_state_table: row = from, column = to,
// both in the order RESET INIT RTR RTS SQD SQE ERR; 'Y' = valid.
constexpr const char* rc_matrix[7] = {
    "YY....Y",  // RESET -> RESET, INIT, ERR
    "YYY...Y",  // INIT  -> RESET, INIT, RTR, ERR
    "Y..Y..Y",  // RTR   -> RESET, RTS, ERR
    "Y..YY.Y",  // RTS   -> RESET, RTS, SQD, ERR
    "Y..YY.Y",  // SQD   -> RESET, RTS, SQD, ERR
    "Y.....Y",  // SQE   -> RESET, ERR (an RC QP never is in SQE; see qp_rules.cpp)
    "Y.....Y",  // ERR   -> RESET, ERR
};
constexpr const char* uc_ud_matrix[7] = {
    "YY....Y", "YYY...Y", "Y..Y..Y", "Y..YY.Y", "Y..YY.Y",
    "Y..Y..Y",  // SQE -> RESET, RTS, ERR
    "Y.....Y",
};

bool expected_valid(QpType type, QpState from, QpState to) {
  const char* const* matrix = type == T::rc ? rc_matrix : uc_ud_matrix;
  return matrix[unsigned(from)][unsigned(to)] == 'Y';
}

std::string name(QpType t) { return t == T::rc ? "RC" : t == T::uc ? "UC" : "UD"; }

std::string step_name(QpType t, QpState from, QpState to) {
  return name(t) + " " + std::string(to_string(from)) + "->" + std::string(to_string(to));
}

// Limits close to rxe's defaults (RXE_MAX_QP_RD_ATOM 128, a one-entry P_Key table, RXE_MAX_QP_WR 0x4000,
// RXE_MAX_SGE 32) on a 1500-byte Ethernet port, whose active IB MTU is 1024.
constexpr AttrLimits limits{128, 1, 16, Mtu::mtu_1024, 0x4000, 32, 256};

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// What real programs pass. Each mask is copied from the program's source, not derived from the table.

TEST_CASE("ibv_rc_pingpong's modify_qp calls are accepted", "[verbs][qp_rules]") {
  // rdma-core libibverbs/examples/rc_pingpong.c, pp_init_ctx(): to INIT.
  CHECK(check_modify_qp(T::rc, S::reset, S::init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                       IBV_QP_ACCESS_FLAGS) == 0);
  // rc_pingpong.c, pp_connect_ctx(): to RTR, then to RTS.
  CHECK(check_modify_qp(T::rc, S::init, S::rtr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  CHECK(check_modify_qp(T::rc, S::rtr, S::rts,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC) == 0);

  // And the values it passes: pkey_index 0, its port, qp_access_flags 0; path_mtu IBV_MTU_1024 (its
  // default), max_dest_rd_atomic 1, min_rnr_timer 12, a 24-bit random PSN; timeout 14, retry_cnt 7,
  // rnr_retry 7, max_rd_atomic 1.
  QpAttr a;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = 0;
  a.path_mtu = Mtu::mtu_1024;
  a.dest_qp_num = 0x000111;
  a.rq_psn = 0xabcdef;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.sgid_index = 1;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0x123456;
  a.max_rd_atomic = 1;
  CHECK(check_qp_attr_values(T::rc, a, rc_to_init | rc_to_rtr | rc_to_rts, limits) == 0);
}

TEST_CASE("ibv_uc_pingpong's modify_qp calls are accepted", "[verbs][qp_rules]") {
  // rdma-core libibverbs/examples/uc_pingpong.c, pp_init_ctx() and pp_connect_ctx().
  CHECK(check_modify_qp(T::uc, S::reset, S::init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                       IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(check_modify_qp(T::uc, S::init, S::rtr,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN) == 0);
  CHECK(check_modify_qp(T::uc, S::rtr, S::rts, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
}

TEST_CASE("ibv_ud_pingpong's modify_qp calls are accepted", "[verbs][qp_rules]") {
  // rdma-core libibverbs/examples/ud_pingpong.c, pp_init_ctx(): qkey 0x11111111.
  CHECK(check_modify_qp(T::ud, S::reset, S::init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                       IBV_QP_QKEY) == 0);
  // ud_pingpong.c, pp_connect_ctx(): RTR with nothing but the state, then RTS with the PSN.
  CHECK(check_modify_qp(T::ud, S::init, S::rtr, IBV_QP_STATE) == 0);
  CHECK(check_modify_qp(T::ud, S::rtr, S::rts, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);

  QpAttr a;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qkey = 0x11111111;
  a.sq_psn = 0xffffff;
  CHECK(check_qp_attr_values(T::ud, a, ud_to_init | ud_to_rts, limits) == 0);
}

TEST_CASE("perftest's modify_qp calls are accepted", "[verbs][qp_rules]") {
  // linux-rdma/perftest src/perftest_resources.c. ctx_modify_qp_to_init(): STATE | PKEY_INDEX | PORT, plus
  // ACCESS_FLAGS on RC/UC or QKEY on UD.
  const uint32_t init_base = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
  CHECK(check_modify_qp(T::rc, S::reset, S::init, init_base | IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(check_modify_qp(T::uc, S::reset, S::init, init_base | IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(check_modify_qp(T::ud, S::reset, S::init, init_base | IBV_QP_QKEY) == 0);

  // ctx_modify_qp_to_rtr(): STATE; non-UD adds AV | PATH_MTU | DEST_QPN | RQ_PSN; RC adds
  // MIN_RNR_TIMER | MAX_DEST_RD_ATOMIC. UD passes IBV_QP_STATE alone.
  const uint32_t rtr_uc = IBV_QP_STATE | (IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
  CHECK(check_modify_qp(T::rc, S::init, S::rtr, rtr_uc | (IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC)) == 0);
  CHECK(check_modify_qp(T::uc, S::init, S::rtr, rtr_uc) == 0);
  CHECK(check_modify_qp(T::ud, S::init, S::rtr, IBV_QP_STATE) == 0);

  // ctx_modify_qp_to_rts(): STATE | SQ_PSN; RC adds TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC.
  const uint32_t rts_base = IBV_QP_STATE | IBV_QP_SQ_PSN;
  CHECK(check_modify_qp(T::rc, S::rtr, S::rts, rts_base | (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                                           IBV_QP_MAX_QP_RD_ATOMIC)) == 0);
  CHECK(check_modify_qp(T::uc, S::rtr, S::rts, rts_base) == 0);
  CHECK(check_modify_qp(T::ud, S::rtr, S::rts, rts_base) == 0);

  // Its values: qkey DEF_QKEY 0x11111111, min_rnr_timer 12, timeout 14 (default qp_timeout), retry_cnt and
  // rnr_retry 7, max_rd_atomic / max_dest_rd_atomic = the device's max_qp_rd_atom, hop_limit 0xFF.
  QpAttr a;
  a.qkey = 0x11111111;
  a.min_rnr_timer = 12;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = limits.max_qp_rd_atom;
  a.max_dest_rd_atomic = limits.max_qp_rd_atom;
  a.ah_attr.hop_limit = 0xff;
  a.ah_attr.sgid_index = 3;
  CHECK(check_qp_attr_values(T::rc, a, rc_to_init | rc_to_rtr | rc_to_rts, limits) == 0);
  CHECK(check_qp_attr_values(T::ud, a, ud_to_init | ud_to_rts, limits) == 0);

  // With --rate_limit_type=PP perftest adds IBV_QP_RATE_LIMIT to the RTS mask: the kernel allows it on
  // raw packet QPs only, so it is refused here as on any RC/UC/UD QP.
  CHECK(check_modify_qp(T::rc, S::rtr, S::rts, rc_to_rts | IBV_QP_RATE_LIMIT) == EINVAL);
  CHECK(check_modify_qp(T::raw_packet, S::rtr, S::rts, IBV_QP_STATE | IBV_QP_RATE_LIMIT) == 0);
  CHECK(check_modify_qp(T::raw_packet, S::rts, S::rts, IBV_QP_STATE | IBV_QP_RATE_LIMIT) == 0);
}

// ---------------------------------------------------------------------------------------------------------
// The bring-up masks bit by bit.

TEST_CASE("each bring-up transition accepts its standard mask", "[verbs][qp_rules]") {
  for (const Step& s : bring_up) {
    INFO(step_name(s.type, s.from, s.to));
    CHECK(check_modify_qp(s.type, s.from, s.to, s.mask) == 0);
    CHECK(explain_modify_qp(s.type, s.from, s.to, s.mask).empty());
  }
}

TEST_CASE("a bring-up mask missing any required bit is refused, naming the bit", "[verbs][qp_rules]") {
  int cases = 0;
  for (const Step& s : bring_up) {
    for (unsigned b = 1; b < 32; ++b) {  // bit 0 is IBV_QP_STATE, which makes it a different request
      const uint32_t bit = 1u << b;
      if ((s.mask & bit) == 0) continue;
      INFO(step_name(s.type, s.from, s.to) << " without " << attr_mask_bit_name(bit));
      CHECK(check_modify_qp(s.type, s.from, s.to, s.mask & ~bit) == EINVAL);
      const std::string expected = std::string(to_string(s.from)) + "->" + std::string(to_string(s.to)) + " on " +
                                   name(s.type) + " requires " + std::string(attr_mask_bit_name(bit));
      CHECK(explain_modify_qp(s.type, s.from, s.to, s.mask & ~bit) == expected);
      ++cases;
    }
  }
  // 3 + 6 + 5 required bits on RC, 3 + 4 + 1 on UC, 3 + 0 + 1 on UD.
  CHECK(cases == 26);
  // The example from the module's brief, verbatim.
  CHECK(explain_modify_qp(T::rc, S::init, S::rtr, rc_to_rtr & ~IBV_QP_PATH_MTU) ==
        "INIT->RTR on RC requires IBV_QP_PATH_MTU");
  // UD needs the Q_Key to reach INIT.
  CHECK(check_modify_qp(T::ud, S::reset, S::init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) == EINVAL);
  // Several missing bits are all named, lowest first.
  CHECK(explain_modify_qp(T::rc, S::init, S::rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN) ==
        "INIT->RTR on RC requires IBV_QP_RQ_PSN, IBV_QP_MIN_RNR_TIMER, IBV_QP_MAX_DEST_RD_ATOMIC");
}

TEST_CASE("a bring-up mask with any bit the transition does not take is refused", "[verbs][qp_rules]") {
  for (const Step& s : bring_up) {
    const std::optional<QpTransition> rule = find_transition(s.type, s.from, s.to);
    REQUIRE(rule);
    for (unsigned b = 0; b < 32; ++b) {
      const uint32_t bit = 1u << b;
      if ((rule->required | rule->optional | IBV_QP_STATE) & bit) continue;
      INFO(step_name(s.type, s.from, s.to) << " with bit " << b);
      CHECK(check_modify_qp(s.type, s.from, s.to, s.mask | bit) == EINVAL);
    }
  }
  // The kernel's optional bits on the bring-up transitions, spot-checked by hand.
  CHECK(check_modify_qp(T::rc, S::init, S::rtr, rc_to_rtr | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX) == 0);
  CHECK(check_modify_qp(T::ud, S::init, S::rtr, ud_to_rtr | IBV_QP_QKEY | IBV_QP_PKEY_INDEX) == 0);
  CHECK(check_modify_qp(T::rc, S::rtr, S::rts, rc_to_rts | IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(check_modify_qp(T::uc, S::rtr, S::rts, uc_to_rts | IBV_QP_MIN_RNR_TIMER) == EINVAL);  // RC only
  CHECK(check_modify_qp(T::ud, S::rtr, S::rts, ud_to_rts | IBV_QP_QKEY) == 0);

  // Classic mistakes: RTR attributes on the INIT step, RTS attributes on the RTR step, UD given
  // connection attributes, UC given RC-only ones.
  CHECK(explain_modify_qp(T::rc, S::reset, S::init, rc_to_init | IBV_QP_PATH_MTU) ==
        "RESET->INIT on RC does not accept IBV_QP_PATH_MTU");
  CHECK(explain_modify_qp(T::rc, S::init, S::rtr, rc_to_rtr | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT) ==
        "INIT->RTR on RC does not accept IBV_QP_TIMEOUT, IBV_QP_SQ_PSN");
  CHECK(explain_modify_qp(T::ud, S::init, S::rtr, ud_to_rtr | IBV_QP_AV) == "INIT->RTR on UD does not accept IBV_QP_AV");
  CHECK(explain_modify_qp(T::ud, S::reset, S::init, ud_to_init | IBV_QP_ACCESS_FLAGS) ==
        "RESET->INIT on UD does not accept IBV_QP_ACCESS_FLAGS");
  CHECK(explain_modify_qp(T::uc, S::init, S::rtr, uc_to_rtr | IBV_QP_MAX_DEST_RD_ATOMIC) ==
        "INIT->RTR on UC does not accept IBV_QP_MAX_DEST_RD_ATOMIC");
  CHECK(explain_modify_qp(T::uc, S::rtr, S::rts, uc_to_rts | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT) ==
        "RTR->RTS on UC does not accept IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT");
  // IBV_QP_CAP is in no transition's sets: the kernel never lets modify_qp resize a QP.
  CHECK(check_modify_qp(T::rc, S::reset, S::init, rc_to_init | IBV_QP_CAP) == EINVAL);
  // Bits rdma-core does not name.
  CHECK(explain_modify_qp(T::rc, S::reset, S::init, rc_to_init | (1u << 22)) ==
        "RESET->INIT on RC does not accept mask bit 22");
}

// ---------------------------------------------------------------------------------------------------------
// The whole table.

TEST_CASE("exactly the kernel's transitions exist, per QP type", "[verbs][qp_rules]") {
  for (QpType type : all_types)
    for (QpState from : all_states)
      for (QpState to : all_states) {
        INFO(step_name(type, from, to));
        const bool valid = expected_valid(type, from, to);
        CHECK(find_transition(type, from, to).has_value() == valid);
        const std::optional<QpTransition> rule = find_transition(type, from, to);
        if (valid) {
          CHECK(check_modify_qp(type, from, to, IBV_QP_STATE | rule->required) == 0);
        } else {
          // Whatever the mask: nothing makes a missing transition valid.
          CHECK(check_modify_qp(type, from, to, IBV_QP_STATE) == EINVAL);
          CHECK(check_modify_qp(type, from, to, IBV_QP_STATE | (known_attr_mask & ~IBV_QP_CUR_STATE)) == EINVAL);
          CHECK(explain_modify_qp(type, from, to, IBV_QP_STATE).find("is not a valid transition") !=
                std::string_view::npos);
        }
      }
}

TEST_CASE("every row: required bits are required, optional ones optional, others refused", "[verbs][qp_rules]") {
  int rows = 0;
  for (QpType type : all_types)
    for (QpState from : all_states)
      for (QpState to : all_states) {
        const std::optional<QpTransition> rule = find_transition(type, from, to);
        if (!rule) continue;
        ++rows;
        INFO(step_name(type, from, to));
        CHECK(rule->from == from);
        CHECK(rule->to == to);
        CHECK(rule->type == type);
        const uint32_t base = IBV_QP_STATE | rule->required;
        CHECK(check_modify_qp(type, from, to, base) == 0);
        CHECK(check_modify_qp(type, from, to, base | rule->optional) == 0);
        for (unsigned b = 1; b < 32; ++b) {
          const uint32_t bit = 1u << b;
          INFO("bit " << b);
          if (rule->required & bit)
            CHECK(check_modify_qp(type, from, to, (base | rule->optional) & ~bit) == EINVAL);
          else if (rule->optional & bit)
            CHECK(check_modify_qp(type, from, to, base | bit) == 0);
          else
            CHECK(check_modify_qp(type, from, to, base | bit) == EINVAL);
        }
      }
  // RC has 22 transitions in the matrix, UC and UD 23 each (SQE->RTS).
  CHECK(rows == 22 + 23 + 23);
}

TEST_CASE("any state may go to RESET or ERR with IBV_QP_STATE alone", "[verbs][qp_rules]") {
  for (QpType type : all_types)
    for (QpState from : all_states)
      for (QpState to : {S::reset, S::err}) {
        INFO(step_name(type, from, to));
        CHECK(check_modify_qp(type, from, to, IBV_QP_STATE) == 0);
        const std::optional<QpTransition> rule = find_transition(type, from, to);
        REQUIRE(rule);
        CHECK(rule->required == 0);
        CHECK(rule->optional == 0);
        // Nothing else rides along, not even the attributes of the state being left.
        CHECK(check_modify_qp(type, from, to, IBV_QP_STATE | IBV_QP_SQ_PSN) == EINVAL);
      }
  CHECK(explain_modify_qp(T::rc, S::rts, S::err, IBV_QP_STATE | IBV_QP_TIMEOUT) ==
        "RTS->ERR on RC does not accept IBV_QP_TIMEOUT");
}

TEST_CASE("invalid transitions are refused and say so", "[verbs][qp_rules]") {
  // Skipping a step of the bring-up.
  CHECK(check_modify_qp(T::rc, S::reset, S::rtr, rc_to_rtr) == EINVAL);
  CHECK(explain_modify_qp(T::rc, S::reset, S::rtr, rc_to_rtr) == "RESET->RTR is not a valid transition");
  CHECK(check_modify_qp(T::rc, S::init, S::rts, rc_to_rts) == EINVAL);
  CHECK(check_modify_qp(T::ud, S::init, S::rts, ud_to_rts) == EINVAL);
  CHECK(check_modify_qp(T::uc, S::reset, S::rts, uc_to_rts) == EINVAL);
  // Going back without RESET.
  CHECK(check_modify_qp(T::rc, S::rtr, S::init, IBV_QP_STATE) == EINVAL);
  CHECK(check_modify_qp(T::rc, S::rts, S::rtr, IBV_QP_STATE) == EINVAL);
  CHECK(check_modify_qp(T::rc, S::err, S::init, rc_to_init) == EINVAL);
  CHECK(check_modify_qp(T::rc, S::err, S::rts, IBV_QP_STATE) == EINVAL);
  // RTR->SQD: drain only from RTS.
  CHECK(check_modify_qp(T::rc, S::rtr, S::sqd, IBV_QP_STATE) == EINVAL);
  // Nobody moves a QP to SQE; and on RC there is no SQE to leave.
  for (QpType type : all_types)
    for (QpState from : all_states) CHECK(check_modify_qp(type, from, S::sqe, IBV_QP_STATE) == EINVAL);
  CHECK(explain_modify_qp(T::ud, S::rts, S::sqe, IBV_QP_STATE) ==
        "RTS->SQE is not a valid transition (only a send queue error moves a QP to SQE, never ibv_modify_qp)");
  CHECK(check_modify_qp(T::rc, S::sqe, S::rts, IBV_QP_STATE) == EINVAL);
  CHECK(explain_modify_qp(T::rc, S::sqe, S::rts, IBV_QP_STATE) ==
        "SQE->RTS is not a valid transition on RC (an RC QP never enters SQE: a send error takes it to ERR)");
  // ... while UC and UD recover from SQE to RTS.
  CHECK(check_modify_qp(T::uc, S::sqe, S::rts, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS) == 0);
  CHECK(check_modify_qp(T::ud, S::sqe, S::rts, IBV_QP_STATE | IBV_QP_QKEY) == 0);
  CHECK(check_modify_qp(T::ud, S::sqe, S::rts, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS) == EINVAL);
}

TEST_CASE("send queue drain: RTS->SQD, SQD->SQD, SQD->RTS", "[verbs][qp_rules]") {
  for (QpType type : all_types) {
    INFO(name(type));
    CHECK(check_modify_qp(type, S::rts, S::sqd, IBV_QP_STATE) == 0);
    CHECK(check_modify_qp(type, S::rts, S::sqd, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == 0);
    CHECK(check_modify_qp(type, S::sqd, S::rts, IBV_QP_STATE) == 0);
  }
  // In SQD an RC QP may be re-pointed: new port, path and timers.
  CHECK(check_modify_qp(T::rc, S::sqd, S::sqd,
                        IBV_QP_STATE | IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC) == 0);
  CHECK(check_modify_qp(T::uc, S::sqd, S::sqd, IBV_QP_STATE | IBV_QP_AV) == 0);
  CHECK(check_modify_qp(T::uc, S::sqd, S::sqd, IBV_QP_STATE | IBV_QP_PORT) == EINVAL);
  CHECK(check_modify_qp(T::uc, S::sqd, S::sqd, IBV_QP_STATE | IBV_QP_TIMEOUT) == EINVAL);
  CHECK(check_modify_qp(T::ud, S::sqd, S::sqd, IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_PKEY_INDEX) == 0);
  CHECK(check_modify_qp(T::ud, S::sqd, S::sqd, IBV_QP_STATE | IBV_QP_AV) == EINVAL);
  // The SQD_ASYNC_NOTIFY request belongs to the RTS->SQD step only.
  CHECK(check_modify_qp(T::rc, S::sqd, S::rts, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY) == EINVAL);
}

TEST_CASE("without IBV_QP_STATE the QP stays in its state", "[verbs][qp_rules]") {
  // `next` is ignored: INIT with a new P_Key index is INIT->INIT, whatever the caller passed as next.
  CHECK(check_modify_qp(T::rc, S::init, S::rtr, IBV_QP_PKEY_INDEX) == 0);
  CHECK(check_modify_qp(T::rc, S::init, S::init, IBV_QP_ACCESS_FLAGS | IBV_QP_PORT) == 0);
  CHECK(check_modify_qp(T::ud, S::init, S::init, IBV_QP_QKEY) == 0);
  // RTR->RTR does not exist: an RTR QP can only be modified on its way to RTS.
  CHECK(check_modify_qp(T::rc, S::rtr, S::rtr, IBV_QP_TIMEOUT) == EINVAL);
  CHECK(explain_modify_qp(T::rc, S::rtr, S::rts, IBV_QP_TIMEOUT) ==
        "RTR->RTR is not a valid transition (without IBV_QP_STATE the QP stays in RTR)");
  // RTS->RTS: RC may change access flags and the RNR timer, UD only its Q_Key.
  CHECK(check_modify_qp(T::rc, S::rts, S::rts, IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER) == 0);
  CHECK(check_modify_qp(T::uc, S::rts, S::rts, IBV_QP_MIN_RNR_TIMER) == EINVAL);
  CHECK(check_modify_qp(T::ud, S::rts, S::rts, IBV_QP_QKEY) == 0);
  CHECK(check_modify_qp(T::uc, S::rts, S::rts, IBV_QP_PATH_MIG_STATE) == 0);
  CHECK(check_modify_qp(T::ud, S::rts, S::rts, IBV_QP_PATH_MIG_STATE) == EINVAL);
  CHECK(explain_modify_qp(T::ud, S::rts, S::rts, IBV_QP_ACCESS_FLAGS) ==
        "RTS->RTS on UD does not accept IBV_QP_ACCESS_FLAGS");
  // RTS attributes that are fixed once the QP runs.
  CHECK(check_modify_qp(T::rc, S::rts, S::rts, IBV_QP_SQ_PSN) == EINVAL);
  CHECK(check_modify_qp(T::rc, S::rts, S::rts, IBV_QP_TIMEOUT) == EINVAL);
  // An empty mask is a no-op transition where one exists (RESET->RESET, ERR->ERR, INIT->INIT...).
  CHECK(check_modify_qp(T::rc, S::reset, S::reset, 0) == 0);
  CHECK(check_modify_qp(T::rc, S::err, S::err, 0) == 0);
  CHECK(check_modify_qp(T::rc, S::rtr, S::rtr, 0) == EINVAL);
}

TEST_CASE("IBV_QP_CUR_STATE is handled as the kernel does", "[verbs][qp_rules]") {
  // Accepted from RTR, RTS, SQD and SQE where the transition lists it.
  CHECK(check_modify_qp(T::rc, S::rtr, S::rts, rc_to_rts | IBV_QP_CUR_STATE) == 0);
  CHECK(check_modify_qp(T::rc, S::rts, S::rts, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0);
  CHECK(check_modify_qp(T::rc, S::rts, S::rts, IBV_QP_CUR_STATE) == 0);  // no state: RTS->RTS
  CHECK(check_modify_qp(T::rc, S::sqd, S::rts, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0);
  CHECK(check_modify_qp(T::ud, S::sqe, S::rts, IBV_QP_STATE | IBV_QP_CUR_STATE) == 0);
  // Refused from RESET, INIT and ERR before the table is even looked at.
  for (QpState from : {S::reset, S::init, S::err})
    for (QpType type : all_types) {
      INFO(step_name(type, from, S::err));
      CHECK(check_modify_qp(type, from, S::err, IBV_QP_STATE | IBV_QP_CUR_STATE) == EINVAL);
    }
  CHECK(explain_modify_qp(T::rc, S::init, S::init, IBV_QP_CUR_STATE) ==
        "IBV_QP_CUR_STATE is only accepted from RTR, RTS, SQD or SQE, not from INIT");
  // From an accepted state it is still an ordinary optional bit: ->SQD, ->ERR, SQD->SQD do not list it.
  CHECK(check_modify_qp(T::rc, S::rts, S::sqd, IBV_QP_STATE | IBV_QP_CUR_STATE) == EINVAL);
  CHECK(check_modify_qp(T::rc, S::rts, S::err, IBV_QP_STATE | IBV_QP_CUR_STATE) == EINVAL);
  CHECK(check_modify_qp(T::rc, S::sqd, S::sqd, IBV_QP_STATE | IBV_QP_CUR_STATE) == EINVAL);
}

TEST_CASE("values outside the enums are refused", "[verbs][qp_rules]") {
  CHECK(check_modify_qp(static_cast<QpType>(7), S::reset, S::init, rc_to_init) == EINVAL);  // no QP type 7 in verbs.h
  CHECK(check_modify_qp(static_cast<QpType>(11), S::reset, S::init, rc_to_init) == EINVAL);  // IBV_QPT_DRIVER is 0xff
  CHECK(explain_modify_qp(static_cast<QpType>(7), S::reset, S::init, rc_to_init) ==
        "QP type 7 is not RC, UC, UD, RAW_PACKET, XRC_SEND or XRC_RECV");
  // XRC's two halves are types of their own (IBV_QPT_XRC_SEND 9, IBV_QPT_XRC_RECV 10), with RC's bring-up.
  CHECK(check_modify_qp(T::xrc_send, S::reset, S::init, rc_to_init) == 0);
  CHECK(check_modify_qp(T::xrc_recv, S::reset, S::init, rc_to_init) == 0);
  CHECK(explain_modify_qp(T::xrc_send, S::init, S::rtr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC) == "INIT->RTR on XRC_SEND does not accept IBV_QP_MAX_DEST_RD_ATOMIC");
  CHECK(explain_modify_qp(T::xrc_recv, S::rtr, S::rts, IBV_QP_STATE | IBV_QP_SQ_PSN) ==
        "RTR->RTS on XRC_RECV requires IBV_QP_TIMEOUT");
  CHECK(check_modify_qp(T::rc, static_cast<QpState>(7), S::err, IBV_QP_STATE) == EINVAL);
  CHECK(check_modify_qp(T::rc, S::rts, static_cast<QpState>(9), IBV_QP_STATE) == EINVAL);
  CHECK(explain_modify_qp(T::rc, S::rts, static_cast<QpState>(9), IBV_QP_STATE) == "QP state 9 does not exist");
  // Without IBV_QP_STATE a bad `next` is never looked at.
  CHECK(check_modify_qp(T::rc, S::rts, static_cast<QpState>(9), IBV_QP_ACCESS_FLAGS) == 0);
}

// ---------------------------------------------------------------------------------------------------------
// Attribute values.

TEST_CASE("in-range attribute values are accepted, at their limits too", "[verbs][qp_rules]") {
  QpAttr a;
  a.qp_state = S::rts;
  a.cur_qp_state = S::rtr;
  a.path_mtu = Mtu::mtu_1024;  // = the active MTU
  a.timeout = 31;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.min_rnr_timer = 31;
  a.max_rd_atomic = limits.max_qp_rd_atom;
  a.max_dest_rd_atomic = limits.max_qp_rd_atom;
  a.pkey_index = limits.pkey_table_size - 1;
  a.port_num = 1;
  a.sq_psn = 0xffffff;
  a.rq_psn = 0xffffff;
  a.dest_qp_num = 0xffffff;
  a.qkey = 0x7fffffff;
  a.cap = {limits.max_qp_wr, limits.max_qp_wr, limits.max_sge, limits.max_sge, limits.max_inline_data};
  a.ah_attr.sgid_index = limits.gid_table_size - 1;
  a.qp_access_flags = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
  const uint32_t all_but_alt_path = known_attr_mask & ~IBV_QP_ALT_PATH;
  CHECK(check_qp_attr_values(T::rc, a, all_but_alt_path, limits) == 0);
  CHECK(explain_qp_attr_values(T::rc, a, all_but_alt_path, limits).empty());
  CHECK(check_qp_attr_values(T::ud, a, all_but_alt_path & ~IBV_QP_ACCESS_FLAGS, limits) == 0);
}

TEST_CASE("each out-of-range attribute is refused, with its reason", "[verbs][qp_rules]") {
  struct Bad {
    const char* what;
    uint32_t mask;
    void (*spoil)(QpAttr&);
    int err;
    const char* reason;
  };
  const Bad bad[] = {
      {"path_mtu 0", IBV_QP_PATH_MTU, [](QpAttr& a) { a.path_mtu = static_cast<Mtu>(0); }, EINVAL,
       "path_mtu 0 is not an IBV_MTU_* value (1..5)"},
      {"path_mtu 6", IBV_QP_PATH_MTU, [](QpAttr& a) { a.path_mtu = static_cast<Mtu>(6); }, EINVAL,
       "path_mtu 6 is not an IBV_MTU_* value (1..5)"},
      {"path_mtu above active", IBV_QP_PATH_MTU, [](QpAttr& a) { a.path_mtu = Mtu::mtu_2048; }, EINVAL,
       "path_mtu 2048 is above the port's active MTU 1024"},
      {"timeout", IBV_QP_TIMEOUT, [](QpAttr& a) { a.timeout = 32; }, EINVAL, "timeout 32 is above 31"},
      {"retry_cnt", IBV_QP_RETRY_CNT, [](QpAttr& a) { a.retry_cnt = 8; }, EINVAL, "retry_cnt 8 is above 7"},
      {"rnr_retry", IBV_QP_RNR_RETRY, [](QpAttr& a) { a.rnr_retry = 8; }, EINVAL, "rnr_retry 8 is above 7"},
      {"min_rnr_timer", IBV_QP_MIN_RNR_TIMER, [](QpAttr& a) { a.min_rnr_timer = 32; }, EINVAL,
       "min_rnr_timer 32 is above 31"},
      {"max_rd_atomic", IBV_QP_MAX_QP_RD_ATOMIC, [](QpAttr& a) { a.max_rd_atomic = 129; }, EINVAL,
       "max_rd_atomic 129 is above the device's max_qp_rd_atom 128"},
      {"max_dest_rd_atomic", IBV_QP_MAX_DEST_RD_ATOMIC, [](QpAttr& a) { a.max_dest_rd_atomic = 255; }, EINVAL,
       "max_dest_rd_atomic 255 is above the device's max_qp_rd_atom 128"},
      {"pkey_index", IBV_QP_PKEY_INDEX, [](QpAttr& a) { a.pkey_index = 1; }, EINVAL,
       "pkey_index 1 is not below the P_Key table size 1"},
      {"port_num 0", IBV_QP_PORT, [](QpAttr& a) { a.port_num = 0; }, EINVAL,
       "port_num 0 does not exist: the device has port 1 only"},
      {"port_num 2", IBV_QP_PORT, [](QpAttr& a) { a.port_num = 2; }, EINVAL,
       "port_num 2 does not exist: the device has port 1 only"},
      {"sq_psn", IBV_QP_SQ_PSN, [](QpAttr& a) { a.sq_psn = 0x1000000; }, EINVAL,
       "sq_psn 0x1000000 does not fit in 24 bits"},
      {"rq_psn", IBV_QP_RQ_PSN, [](QpAttr& a) { a.rq_psn = 0xffffffff; }, EINVAL,
       "rq_psn 0xffffffff does not fit in 24 bits"},
      {"dest_qp_num", IBV_QP_DEST_QPN, [](QpAttr& a) { a.dest_qp_num = 0x1000001; }, EINVAL,
       "dest_qp_num 0x1000001 does not fit in 24 bits"},
      {"controlled qkey", IBV_QP_QKEY, [](QpAttr& a) { a.qkey = 0x80010000; }, EPERM,
       "qkey 0x80010000 is a controlled Q_Key (high bit set), which needs privilege"},
      {"sgid_index", IBV_QP_AV, [](QpAttr& a) { a.ah_attr.sgid_index = 16; }, EINVAL,
       "ah_attr.sgid_index 16 is not below the GID table size 16"},
      {"cap.max_send_wr", IBV_QP_CAP, [](QpAttr& a) { a.cap.max_send_wr = 0x4001; }, EINVAL,
       "cap.max_send_wr 16385 is above the device's max_qp_wr 16384"},
      {"cap.max_recv_wr", IBV_QP_CAP, [](QpAttr& a) { a.cap.max_recv_wr = 0x10000; }, EINVAL,
       "cap.max_recv_wr 65536 is above the device's max_qp_wr 16384"},
      {"cap.max_send_sge", IBV_QP_CAP, [](QpAttr& a) { a.cap.max_send_sge = 33; }, EINVAL,
       "cap.max_send_sge 33 is above the device's max_sge 32"},
      {"cap.max_recv_sge", IBV_QP_CAP, [](QpAttr& a) { a.cap.max_recv_sge = 64; }, EINVAL,
       "cap.max_recv_sge 64 is above the device's max_sge 32"},
      {"cap.max_inline_data", IBV_QP_CAP, [](QpAttr& a) { a.cap.max_inline_data = 257; }, EINVAL,
       "cap.max_inline_data 257 is above the device's max_inline_data 256"},
      {"qp_state", IBV_QP_STATE, [](QpAttr& a) { a.qp_state = static_cast<QpState>(7); }, EINVAL,
       "qp_state 7 does not exist"},
      {"cur_qp_state", IBV_QP_CUR_STATE, [](QpAttr& a) { a.cur_qp_state = static_cast<QpState>(200); }, EINVAL,
       "cur_qp_state 200 does not exist"},
      {"alt path", IBV_QP_ALT_PATH, [](QpAttr&) {}, EINVAL,
       "IBV_QP_ALT_PATH is not supported on RoCE (alternate paths are InfiniBand-only)"},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    QpAttr good;
    QpAttr a = good;
    b.spoil(a);
    CHECK(check_qp_attr_values(T::rc, a, b.mask, limits) == b.err);
    CHECK(explain_qp_attr_values(T::rc, a, b.mask, limits) == b.reason);
    // Alongside a valid bring-up mask the same value is found.
    CHECK(check_qp_attr_values(T::rc, a, b.mask | rc_to_init | rc_to_rtr | rc_to_rts, limits) == b.err);
    // Without its mask bit the bad value is not looked at (ALT_PATH has no value to spoil).
    if (b.mask != IBV_QP_ALT_PATH) CHECK(check_qp_attr_values(T::rc, a, 0, limits) == 0);
    CHECK(check_qp_attr_values(T::rc, good, b.mask & ~IBV_QP_ALT_PATH, limits) == 0);
  }
}

TEST_CASE("access flags are refused on UD, as rxe does", "[verbs][qp_rules]") {
  QpAttr a;
  CHECK(check_qp_attr_values(T::rc, a, IBV_QP_ACCESS_FLAGS, limits) == 0);
  CHECK(check_qp_attr_values(T::uc, a, IBV_QP_ACCESS_FLAGS, limits) == 0);
  CHECK(check_qp_attr_values(T::ud, a, IBV_QP_ACCESS_FLAGS, limits) == EINVAL);
  CHECK(explain_qp_attr_values(T::ud, a, IBV_QP_ACCESS_FLAGS, limits) ==
        "IBV_QP_ACCESS_FLAGS is not accepted on a UD QP");
}

TEST_CASE("the active MTU bounds path_mtu: a 4096-MTU port takes every value", "[verbs][qp_rules]") {
  AttrLimits jumbo = limits;
  jumbo.active_mtu = Mtu::mtu_4096;
  for (Mtu mtu : {Mtu::mtu_256, Mtu::mtu_512, Mtu::mtu_1024, Mtu::mtu_2048, Mtu::mtu_4096}) {
    QpAttr a;
    a.path_mtu = mtu;
    INFO(mtu_bytes(mtu));
    CHECK(check_qp_attr_values(T::rc, a, IBV_QP_PATH_MTU, jumbo) == 0);
    CHECK(check_qp_attr_values(T::rc, a, IBV_QP_PATH_MTU, limits) ==
          (unsigned(mtu) <= unsigned(Mtu::mtu_1024) ? 0 : EINVAL));
  }
}

TEST_CASE("the first offending attribute by mask bit is the one reported", "[verbs][qp_rules]") {
  QpAttr a;
  a.timeout = 40;       // IBV_QP_TIMEOUT, bit 9
  a.sq_psn = 1u << 24;  // IBV_QP_SQ_PSN, bit 16
  a.port_num = 3;       // IBV_QP_PORT, bit 5
  CHECK(explain_qp_attr_values(T::rc, a, IBV_QP_TIMEOUT | IBV_QP_SQ_PSN, limits) == "timeout 40 is above 31");
  CHECK(explain_qp_attr_values(T::rc, a, IBV_QP_TIMEOUT | IBV_QP_SQ_PSN | IBV_QP_PORT, limits) ==
        "port_num 3 does not exist: the device has port 1 only");
}

TEST_CASE("attr_mask_bit_name", "[verbs][qp_rules]") {
  CHECK(attr_mask_bit_name(IBV_QP_PATH_MTU) == "IBV_QP_PATH_MTU");
  CHECK(attr_mask_bit_name(IBV_QP_RATE_LIMIT) == "IBV_QP_RATE_LIMIT");
  CHECK(attr_mask_bit_name(1u << 22).empty());
  CHECK(attr_mask_bit_name(0).empty());
  CHECK(attr_mask_bit_name(IBV_QP_AV | IBV_QP_PORT).empty());
}
