// Tag matching SRQs (ibv_create_srq_ex with IBV_SRQT_TM, ibv_post_srq_ops), as rdma-core's
// Documentation/tag_matching.md describes ConnectX's offload. The sender needs nothing special: a message
// is an RC SEND whose payload starts with a 16-byte tag matching header (TMH: opcode, 3 reserved bytes,
// app_ctx, tag; all big-endian). The receiver's TM SRQ holds, besides its ordinary receives, a list of
// tagged buffers; this file keeps the list and decides where each message goes.
//
// - EAGER (TMH opcode 3): the first active tagged buffer whose (tag, mask) matches takes the payload after
//   the TMH and is consumed. A one-packet message completes once, with IBV_WC_TM_MATCH and
//   IBV_WC_TM_DATA_VALID; a longer one completes with TM_MATCH when its first packet arrives and with
//   TM_DATA_VALID when its last does.
// - RNDV (1): TMH, then a rendezvous header (RVH: va, rkey, len) and optional data, at most
//   max_rndv_hdr_size bytes. A match completes with TM_MATCH at once; then the QP's send queue (which
//   the TM SRQ owns) READs `len` bytes from (va, rkey) into the tagged buffer, which completes with
//   TM_DATA_VALID, and SENDs the sender a FIN: the request's TMH and RVH with the opcode FIN (2). A buffer
//   too short for `len` gets the TMH and RVH instead and completes with IBV_WC_TM_RNDV_INCOMPLETE, for
//   software to finish.
// - Nothing matches: the message is unexpected. It goes whole (TMH included) to an ordinary receive and
//   completes as IBV_WC_TM_RECV with no flag, and the SRQ's unexpected count goes up. Tagged buffers added
//   from then on match nothing until software reports (IBV_OPS_TM_SYNC) that it has handled as many
//   unexpected messages as the device delivered: otherwise a buffer software posted before it saw an
//   earlier unexpected message could take a later one out of order. Completions of list operations carry
//   IBV_WC_TM_SYNC_REQ while the counts differ.
// - NO_TAG (0), FIN (2) and anything shorter than a TMH: whole to an ordinary receive, as IBV_WC_TM_NO_TAG
//   (a message too short for a TMH as a plain IBV_WC_RECV); the unexpected count does not move.
//
// Every receive of a QP on a TM SRQ completes on the SRQ's CQ, as on an XRC SRQ.
#include <algorithm>
#include <cerrno>

#include "transport/device.hpp"
#include "transport/device_impl.hpp"

namespace uroce::transport {

using namespace uroce::verbs;

int Device::create_tm_srq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                          uint32_t max_tags, uint32_t max_ops, uint32_t& srqn) {
  DeviceImpl& d = *impl_;
  if (!d.cqs_.contains(cq) || max_tags == 0 || max_tags > d.limits_.max_num_tags || max_ops == 0 ||
      max_ops > d.limits_.max_tm_ops) {
    return EINVAL;
  }
  if (int e = create_srq(pd, max_wr, max_sge, limit, srqn)) return e;
  ReceiveQueue& q = d.srqs_.at(srqn);
  q.cq = cq;
  q.tm = std::make_unique<TagMatching>();
  q.tm->max_tags = max_tags;
  q.tm->max_ops = max_ops;
  return 0;
}

int Device::post_srq_op(uint32_t srqn, const TagOp& op, uint32_t& handle, Nanos now) {
  DeviceImpl& d = *impl_;
  const auto it = d.srqs_.find(srqn);
  if (it == d.srqs_.end() || !it->second.tm) return EINVAL;
  if ((op.flags & ~uint32_t(tag_op_signaled | tag_op_sync)) != 0) return EINVAL;
  ReceiveQueue& q = it->second;
  TagMatching& tm = *q.tm;
  switch (op.opcode) {
    case TagOpcode::add:
      if (op.sg_list.size() > d.limits_.max_tm_sge) return EINVAL;
      if (tm.list.size() >= tm.max_tags) return ENOMEM;
      break;
    case TagOpcode::del:
    case TagOpcode::sync:
      break;
    default:
      return EINVAL;
  }
  d.now_ = now;  // completions are stamped with it
  if (op.flags & tag_op_sync) tm.handled = op.unexpected_cnt;
  // In step again: what software added while it was behind may match now.
  if (tm.in_step()) {
    for (TaggedBuffer& b : tm.list) b.active = true;
  }
  WcStatus status = WcStatus::success;
  WcOpcode opcode = WcOpcode::tm_sync;
  if (op.opcode == TagOpcode::add) {
    opcode = WcOpcode::tm_add;
    handle = tm.next_handle++;
    if (tm.next_handle == 0) tm.next_handle = 1;  // 0 names no entry
    tm.list.push_back(TaggedBuffer{handle, op.tag, op.mask, op.recv_wr_id, op.sg_list, tm.in_step()});
  } else if (op.opcode == TagOpcode::del) {
    opcode = WcOpcode::tm_del;
    const auto entry = std::find_if(tm.list.begin(), tm.list.end(),
                                    [&](const TaggedBuffer& b) { return b.handle == op.handle; });
    if (entry == tm.list.end()) {
      status = WcStatus::tm_err;  // consumed by a message meanwhile, or never added
    } else {
      tm.list.erase(entry);
    }
  }
  // An operation that failed completes whether it was signalled or not, as any failed work request does.
  if ((op.flags & tag_op_signaled) || status != WcStatus::success) {
    if (WorkCompletion* wc = d.new_completion(q.cq)) {
      wc->wr_id = op.wr_id;
      wc->status = status;
      wc->opcode = opcode;
      if (!tm.in_step()) wc->wc_flags |= wc_tm_sync_req;
    }
  }
  return 0;
}

}  // namespace uroce::transport
