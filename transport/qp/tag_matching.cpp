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
#include "transport/wire/bytes.hpp"

namespace uroce::transport {

using namespace uroce::verbs;

namespace {

// The tag matching header (infiniband/tm_types.h: struct ibv_tmh) and rendezvous header (struct ibv_rvh).
constexpr size_t tmh_size = 16;
constexpr size_t rvh_size = 16;
enum TmhOpcode : uint8_t { tmh_no_tag = 0, tmh_rndv = 1, tmh_fin = 2, tmh_eager = 3 };

struct Tmh {
  uint8_t opcode = 0;
  uint32_t app_ctx = 0;
  uint64_t tag = 0;
};

Tmh read_tmh(const uint8_t* p) { return Tmh{p[0], wire::load_be32(p + 4), wire::load_be64(p + 8)}; }

}  // namespace

bool DeviceImpl::take_tagged_receive(QueuePair& qp, std::span<const uint8_t> payload, bool only,
                                     std::optional<RecvWr>& into) {
  const auto srq = srqs_.find(qp.srq);
  if (srq == srqs_.end()) return false;  // (an SRQ a QP uses cannot be destroyed: EBUSY)
  TagMatching& tm = *srq->second.tm;
  QueuePair::Responder& r = qp.resp;
  r.tm_kind = uint8_t(TagMessage::plain);
  r.tm_skip = 0;
  r.tm_tag = 0;
  r.tm_priv = 0;
  if (payload.size() < tmh_size) return take_receive(*this, qp, into);  // no TMH: an ordinary message
  const Tmh tmh = read_tmh(payload.data());
  if (tmh.opcode != tmh_eager && tmh.opcode != tmh_rndv) {
    // NO_TAG, a FIN (whose rendezvous software carried out), or an opcode of no meaning: whole, untouched.
    if (!take_receive(*this, qp, into)) return false;
    r.tm_kind = uint8_t(TagMessage::no_tag);
    return true;
  }
  // A rendezvous request the device can carry out holds a whole RVH and fits max_rndv_hdr_size; anything
  // else is left to software, as unexpected.
  const bool rendezvous = tmh.opcode == tmh_rndv;
  const bool matchable =
      !rendezvous || (only && payload.size() >= tmh_size + rvh_size && payload.size() <= limits_.max_rndv_hdr_size);
  const auto entry = !matchable ? tm.list.end() : std::find_if(tm.list.begin(), tm.list.end(), [&](const TaggedBuffer& b) {
    return b.active && (tmh.tag & b.mask) == b.tag;
  });
  if (entry == tm.list.end()) {
    if (!take_receive(*this, qp, into)) return false;  // (RNR: the match is tried again when it is resent)
    ++tm.unexpected;
    r.tm_kind = uint8_t(TagMessage::unexpected);
    return true;
  }
  into.emplace(RecvWr{entry->recv_wr_id, std::move(entry->sg_list)});
  tm.list.erase(entry);  // consumed: a DEL of it now fails with IBV_WC_TM_ERR
  r.tm_kind = uint8_t(rendezvous ? TagMessage::rendezvous : TagMessage::eager);
  r.tm_skip = rendezvous ? 0 : uint8_t(tmh_size);
  r.tm_tag = tmh.tag;
  r.tm_priv = tmh.app_ctx;
  return true;
}

void DeviceImpl::tag_completion(TagMessage kind, const QueuePair& qp, WorkCompletion& wc, uint32_t received,
                                bool only) const {
  switch (kind) {
    case TagMessage::no_tag:
      wc.opcode = WcOpcode::tm_no_tag;
      return;
    case TagMessage::unexpected:
      wc.opcode = WcOpcode::tm_recv;  // no flag: software matches it (and counts it for TAG_SYNC)
      return;
    case TagMessage::eager:
      // A message of several packets had its TM_MATCH completion, with the tag, when its first packet
      // arrived; its TM_DATA_VALID completion names the buffer only (wr_id), as a rendezvous's does.
      wc.opcode = WcOpcode::tm_recv;
      wc.wc_flags |= wc_tm_data_valid;
      wc.byte_len = received - uint32_t(tmh_size);
      if (only) {
        wc.wc_flags |= wc_tm_match;
        wc.tm_tag = qp.resp.tm_tag;
        wc.tm_priv = qp.resp.tm_priv;
      }
      return;
    case TagMessage::plain:
    case TagMessage::rendezvous:
      return;
  }
}

WorkCompletion DeviceImpl::match_completion(const QueuePair& qp, uint64_t wr_id) const {
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.opcode = WcOpcode::tm_recv;
  wc.wc_flags = wc_tm_match;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  wc.tm_tag = qp.resp.tm_tag;
  wc.tm_priv = qp.resp.tm_priv;
  return wc;
}

void DeviceImpl::post_tag_match(const QueuePair& qp) {
  post_completion(qp.recv_cq, match_completion(qp, qp.resp.recv->wr_id));
}

void DeviceImpl::start_rendezvous(QueuePair& qp, const RecvWr& buffer, std::span<const uint8_t> message) {
  const uint64_t va = wire::load_be64(message.data() + tmh_size);
  const uint32_t rkey = wire::load_be32(message.data() + tmh_size + 8);
  const uint32_t length = wire::load_be32(message.data() + tmh_size + 12);
  WorkCompletion wc = match_completion(qp, buffer.wr_id);
  if (length > sge_total(buffer)) {
    // Too long for the buffer: software finishes it, from the TMH and RVH left in the buffer.
    const auto headers = message.first(tmh_size + rvh_size);
    wc.status = scatter(buffer.sg_list, qp.pd, 0, headers) == KeyCheck::ok ? WcStatus::tm_rndv_incomplete
                                                                           : WcStatus::loc_prot_err;
    wc.byte_len = uint32_t(headers.size());
    post_completion(qp.recv_cq, wc);
    return;
  }
  post_completion(qp.recv_cq, wc);
  // The READ goes on the QP's send queue, which the TM SRQ owns (it may have no room for the application's
  // own requests: max_send_wr 0 is usual), and is not signalled: its end completes the buffer instead.
  SendWr read;
  read.wr_id = buffer.wr_id;
  read.opcode = WrOpcode::rdma_read;
  read.remote_addr = va;
  read.rkey = rkey;
  read.sg_list = buffer.sg_list;
  SendWqe& w = qp.sq.emplace_back(read, length, false);
  w.rendezvous = std::make_unique<TagRendezvous>();
  w.rendezvous->cq = qp.recv_cq;
  w.rendezvous->recv_wr_id = buffer.wr_id;
  std::copy_n(message.begin(), tmh_size + rvh_size, w.rendezvous->fin.begin());
  w.rendezvous->fin[0] = tmh_fin;
  schedule(qp);
}

void DeviceImpl::rendezvous_step_done(QueuePair& qp, std::unique_ptr<TagRendezvous> step, WcStatus status,
                                      uint32_t length) {
  if (step->step == TagRendezvous::Step::fin) return;  // the sender was told; nothing completes here
  WorkCompletion wc;
  wc.wr_id = step->recv_wr_id;
  wc.status = status;
  wc.opcode = WcOpcode::tm_recv;
  wc.wc_flags = status == WcStatus::success ? uint32_t(wc_tm_data_valid) : 0u;
  wc.byte_len = status == WcStatus::success ? length : 0;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;  // no tag: the MATCH completion had it (rdma-core's test_tm_rndv checks)
  post_completion(step->cq, wc);
  if (status != WcStatus::success || qp.in_error()) return;
  // The FIN: the request's TMH and RVH with the opcode FIN, as a SEND the sender receives.
  SendWr fin;
  fin.opcode = WrOpcode::send;
  fin.send_flags = send_inline;
  fin.inline_data.assign(step->fin.begin(), step->fin.end());
  step->step = TagRendezvous::Step::fin;
  SendWqe& w = qp.sq.emplace_back(fin, uint32_t(fin.inline_data.size()), false);
  w.rendezvous = std::move(step);
  schedule(qp);
}

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
  q.tm->max_tags = max_tags;  // (max_ops is only checked: operations run at once, none is ever outstanding)
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
