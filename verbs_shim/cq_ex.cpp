// The ibv_cq_ex polling API: ibv_create_cq_ex (through verbs_context.create_cq_ex, where verbs.h's inline
// wrapper looks) and start_poll / next_poll / end_poll with the ibv_wc_read_* callbacks. Each poll step
// takes one completion off the shared ring into the CQ's `current`, which the callbacks read; the CQ's
// lock is held from a successful start_poll to end_poll, as rdma-core's providers do.
#include "idle_poll.hpp"
#include "shim.hpp"

namespace uroce::shim {
namespace {

// What a completion carries here. RoCE has no LIDs: slid and dlid_path_bits read 0, as on every RoCE NIC.
// Completion timestamps are the engine's clock when it made the completion, in nanoseconds of
// CLOCK_MONOTONIC (the device reports hca_core_clock 1 GHz and a full 64-bit mask); the wall-clock form
// is that plus CLOCK_REALTIME's offset from CLOCK_MONOTONIC when it is read. A tag matching receive
// carries its TMH's tag and app_ctx (ibv_wc_read_tm_info). No CVLAN stripping or flow tags: asking for
// them fails with EOPNOTSUPP.
constexpr uint64_t supported_wc_flags = uint64_t(IBV_WC_STANDARD_FLAGS) |
                                        uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) |
                                        uint64_t(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) |
                                        uint64_t(IBV_WC_EX_WITH_TM_INFO);

Cq& cq_of(ibv_cq_ex* c) { return *to_shim(c); }
const emulator::protocol::CompletionEntry& now(ibv_cq_ex* c) { return cq_of(c).current; }

// One completion off the ring into `current`; false when the ring is empty.
bool take(Cq& q) {
  if (q.impl->ring.poll({&q.current, 1}) != 1) return false;
  q.cq_ex.wr_id = q.current.wr_id;
  q.cq_ex.status = ibv_wc_status(q.current.status);
  return true;
}

int start_poll(ibv_cq_ex* c, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;  // no poll attribute is defined
  Cq& q = cq_of(c);
  q.lock.lock();
  if (take(q)) {
    note_poll(true);
    return 0;
  }
  q.lock.unlock();  // ENOENT ends the poll: the application does not call end_poll
  note_poll(false);
  return ENOENT;
}

int next_poll(ibv_cq_ex* c) { return take(cq_of(c)) ? 0 : ENOENT; }

void end_poll(ibv_cq_ex* c) { cq_of(c).lock.unlock(); }

ibv_wc_opcode read_opcode(ibv_cq_ex* c) { return ibv_wc_opcode(now(c).opcode); }
uint32_t read_vendor_err(ibv_cq_ex* c) { return now(c).vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* c) { return now(c).byte_len; }
__be32 read_imm_data(ibv_cq_ex* c) { return wc_imm_field(now(c)); }
uint32_t read_qp_num(ibv_cq_ex* c) { return now(c).qp_num; }
uint32_t read_src_qp(ibv_cq_ex* c) { return now(c).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* c) { return now(c).wc_flags; }
uint32_t read_slid(ibv_cq_ex*) { return 0; }
uint8_t read_sl(ibv_cq_ex* c) { return now(c).sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex*) { return 0; }
uint64_t read_completion_ts(ibv_cq_ex* c) { return now(c).timestamp; }
uint64_t read_completion_wallclock_ns(ibv_cq_ex* c) {
  return now(c).timestamp + uint64_t(clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC));
}
void read_tm_info(ibv_cq_ex* c, ibv_wc_tm_info* info) {
  info->tag = now(c).tm_tag;
  info->priv = now(c).tm_priv;
}

}  // namespace

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  if (attr->comp_mask & ~uint32_t(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
    errno = EINVAL;  // a mask bit this ABI does not define
    return nullptr;
  }
  // IGNORE_OVERRUN would hide an overrun that uroce always reports. SINGLE_THREADED is only a hint.
  const bool bad_flags = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
                         (attr->flags & ~uint32_t(IBV_CREATE_CQ_ATTR_SINGLE_THREADED));
  if (bad_flags || (attr->wc_flags & ~supported_wc_flags)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // IBV_CQ_INIT_ATTR_MASK_PD names a parent domain, which the CQ holds; a plain PD is refused (as mlx5).
  const bool with_parent = attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD;
  if (with_parent && (!attr->parent_domain || !to_shim(attr->parent_domain)->protection_domain)) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->cqe > uint32_t(INT32_MAX) || attr->comp_vector > uint32_t(INT32_MAX)) {
    errno = EINVAL;
    return nullptr;
  }
  Cq* q = make_cq(context, int(attr->cqe), attr->cq_context, attr->channel, int(attr->comp_vector));
  if (!q) return nullptr;
  if (with_parent) q->parent = hold_parent(attr->parent_domain);
  ibv_cq_ex& x = q->cq_ex;
  x.start_poll = start_poll;
  x.next_poll = next_poll;
  x.end_poll = end_poll;
  x.read_opcode = read_opcode;
  x.read_vendor_err = read_vendor_err;
  x.read_byte_len = read_byte_len;
  x.read_imm_data = read_imm_data;
  x.read_qp_num = read_qp_num;
  x.read_src_qp = read_src_qp;
  x.read_wc_flags = read_wc_flags;
  x.read_slid = read_slid;
  x.read_sl = read_sl;
  x.read_dlid_path_bits = read_dlid_path_bits;
  x.read_completion_ts = read_completion_ts;
  x.read_completion_wallclock_ns = read_completion_wallclock_ns;
  x.read_tm_info = read_tm_info;
  return &x;
}

}  // namespace uroce::shim
