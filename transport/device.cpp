// Device: the control verbs, frame dispatch and the run loop. The protocol engines are in qp/.
#include "transport/device.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>

#include "transport/device_impl.hpp"
#include "transport/verbs/qp_rules.hpp"

namespace uroce::transport {

using namespace uroce::verbs;

// ---------------------------------------------------------------------------------------------------------
// Helpers shared by the engines.

void DeviceImpl::schedule(QueuePair& qp) {
  if (qp.req.scheduled) return;
  qp.req.scheduled = true;
  run_list_.push_back(&qp);
}

WorkCompletion* DeviceImpl::new_completion(uint32_t cqn) {
  CompletionQueue* cq = cqs_.find(cqn);
  if (cq == nullptr) return nullptr;
  WorkCompletion* wc = cq->append();
  if (wc == nullptr) {
    ++counters_.cq_overflows;
    raise(EventType::cq_err, cqn);
    return nullptr;
  }
  wc->timestamp = uint64_t(now_);  // when the completion is made, as a NIC stamps the CQE it writes
  if (!cq->active_listed) {
    cq->active_listed = true;
    active_cqs_.push_back(cqn);
  }
  return wc;
}

void DeviceImpl::post_completion(uint32_t cqn, const WorkCompletion& wc) {
  if (WorkCompletion* slot = new_completion(cqn)) {
    const uint64_t made = slot->timestamp;
    *slot = wc;
    slot->timestamp = made;
  }
}

void DeviceImpl::transmit(QueuePair& qp, OutPacket& packet) {
  // XRC speaks RC's protocol: the engines build RC packets, which leave with XRC's opcodes (RC's + 0xA0);
  // the requester has filled in the XRCETH those carry.
  if (qp.type == QpType::xrc_send || qp.type == QpType::xrc_recv) packet.headers.bth.opcode += 0xa0;
  if (packet.destination == nullptr) packet.destination = &qp.attr.ah_attr;
  packet.src_qpn = qp.qpn;
  packet.udp_src_port = qp.udp_src_port;
  packet.headers.bth.pkey = pkey_;
  on_rate_sent(qp, packet);
  ++counters_.tx_packets;
  ++qp.counters.tx_packets;
  qp.counters.tx_payload_bytes += packet.payload.size();
  sink_.transmit(packet);
}

ReceiveQueue* DeviceImpl::receive_queue(QueuePair& qp) {
  if (qp.srq == 0) return &qp.rq;
  const auto it = srqs_.find(qp.srq);
  return it == srqs_.end() ? nullptr : &it->second;
}

namespace {

// Walks the part [offset, offset + length) of a message laid out by a scatter/gather list, checking each
// piece's lkey, PD, bounds and `access`, and hands each piece to `copy(region, region_offset, done, n)`:
// `n` bytes at `region_offset` in the region's memory correspond to bytes [done, done + n) of the part.
template <class Copy>
KeyCheck walk_sges(const MrTable& mrs, const SgeList& sges, uint32_t pd, uint32_t offset, size_t length,
                   uint32_t access, Copy&& copy) {
  size_t done = 0;
  for (const Sge& sge : sges) {
    if (done == length) break;
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const uint32_t n = uint32_t(std::min<size_t>(sge.length - offset, length - done));
    const MemoryRegion* mr = nullptr;
    const KeyCheck k = mrs.check(sge.lkey, pd, sge.addr + offset, n, access, &mr);
    if (k != KeyCheck::ok) return k;
    if (!copy(*mr, mr->memory_offset + (sge.addr + offset - mr->iova), done, n)) return KeyCheck::out_of_bounds;
    done += n;
    offset = 0;
  }
  return done == length ? KeyCheck::ok : KeyCheck::out_of_bounds;
}

}  // namespace

KeyCheck DeviceImpl::gather(const SgeList& sges, uint32_t pd, uint32_t offset, std::span<uint8_t> bytes) {
  return walk_sges(mrs_, sges, pd, offset, bytes.size(), 0,
                   [&](const MemoryRegion& mr, uint64_t at, size_t done, uint32_t n) {
                     return mr.memory->read(at, bytes.data() + done, n);
                   });
}

KeyCheck DeviceImpl::scatter(const SgeList& sges, uint32_t pd, uint32_t offset,
                             std::span<const uint8_t> bytes) {
  return walk_sges(mrs_, sges, pd, offset, bytes.size(), access_local_write,
                   [&](const MemoryRegion& mr, uint64_t at, size_t done, uint32_t n) {
                     return write_payload(mr, at, bytes.data() + done, n);
                   });
}

const Sge* sge_holding(const SgeList& sges, uint32_t& offset, size_t length) {
  for (const Sge& sge : sges) {
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    return length <= sge.length - offset ? &sge : nullptr;
  }
  return nullptr;
}

KeyCheck DeviceImpl::send_payload(const SgeList& sges, uint32_t pd, uint32_t offset, uint32_t length,
                                  std::span<const uint8_t>& out) {
  uint32_t in_sge = offset;
  const Sge* sge = length == 0 ? nullptr : sge_holding(sges, in_sge, length);
  const MemoryRegion* mr = nullptr;
  if (sge != nullptr && mrs_.check(sge->lkey, pd, sge->addr + in_sge, length, 0, &mr) == KeyCheck::ok) {
    out = mr->memory->view(mr->memory_offset + (sge->addr + in_sge - mr->iova), length);
    if (out.size() == length) return KeyCheck::ok;
  }
  // Several pieces, memory that cannot be viewed, or an error, which gather() reports as always.
  const std::span<uint8_t> staged(scratch_.data(), length);
  out = staged;
  return gather(sges, pd, offset, staged);
}

void DeviceImpl::flush(QueuePair& qp) {
  // Every outstanding send WR completes with WR_FLUSH_ERR (or the error it already carries), in order;
  // flushed completions are generated whether the WR was signalled or not.
  for (SendWqe& w : qp.sq) {
    if (w.rendezvous) {  // a TM SRQ's READ completes its tagged buffer (with the error); a FIN, nothing
      const WcStatus status = w.state == WqeState::failed ? w.status
                              : w.state == WqeState::done ? WcStatus::success
                                                          : WcStatus::wr_flush_err;
      rendezvous_step_done(qp, std::move(w.rendezvous), status, w.length);
      continue;
    }
    WorkCompletion wc;
    wc.wr_id = w.wr.wr_id;
    wc.status = w.state == WqeState::failed ? w.status : WcStatus::wr_flush_err;
    wc.opcode = WcOpcode::send;
    wc.qp_num = qp.qpn;
    if (w.state == WqeState::done) {
      if (!w.signaled) continue;
      wc.status = WcStatus::success;
    }
    post_completion(qp.send_cq, wc);
  }
  qp.sq.clear();
  qp.req = {};
  qp.comp.timeout_at = never;
  if (qp.srq == 0) {
    for (const RecvWr& r : qp.rq.wrs) {
      WorkCompletion wc;
      wc.wr_id = r.wr_id;
      wc.status = WcStatus::wr_flush_err;
      wc.opcode = WcOpcode::recv;
      wc.qp_num = qp.qpn;
      post_completion(qp.recv_cq, wc);
    }
    if (!qp.rq.wrs.empty()) note_receives_retired(qp);
    qp.rq.wrs.clear();
    qp.rq.peak = 0;
  }
  if (qp.resp.recv) {
    WorkCompletion wc;
    wc.wr_id = qp.resp.recv->wr_id;
    wc.status = WcStatus::wr_flush_err;
    wc.opcode = WcOpcode::recv;
    wc.qp_num = qp.qpn;
    post_completion(qp.recv_cq, wc);
    qp.resp.recv.reset();
  }
}

void DeviceImpl::enter_error(QueuePair& qp, std::optional<EventType> event) {
  if (qp.attr.qp_state == QpState::err) return;
  qp.attr.qp_state = QpState::err;
  flush(qp);
  if (event) raise(*event, qp.qpn);
  if (qp.srq != 0) raise(EventType::qp_last_wqe_reached, qp.qpn);
}

// ---------------------------------------------------------------------------------------------------------
// Device: control verbs.

Device::Device(PacketSink& sink, DeviceLimits limits) : impl_(std::make_unique<DeviceImpl>(sink, limits)) {}
Device::~Device() = default;

void Device::set_gids(std::vector<wire::IpAddress> gids) { impl_->gids_ = std::move(gids); }
void Device::set_active_mtu(Mtu mtu) { impl_->active_mtu_ = mtu; }
void Device::set_max_raw_frame(uint32_t bytes) { impl_->max_raw_frame_ = bytes; }
uint32_t Device::max_raw_frame() const { return impl_->max_raw_frame_; }
const DeviceLimits& Device::limits() const { return impl_->limits_; }

int Device::alloc_pd(uint32_t& pd) {
  const auto n = impl_->pds_.add(impl_->limits_.max_pd);
  if (!n) return ENOMEM;
  pd = *n;
  return 0;
}

int Device::dealloc_pd(uint32_t pd) { return impl_->pds_.remove(pd); }

namespace {
int check_mr_args(const DeviceImpl& d, uint32_t pd, uint64_t length, uint32_t access, const void* memory) {
  if (!d.pds_.contains(pd) || memory == nullptr) return EINVAL;
  if (length > d.limits_.max_mr_size) return EINVAL;
  // Remote write and atomic access need local write too (ibv_reg_mr's rule).
  if ((access & (access_remote_write | access_remote_atomic)) && !(access & access_local_write)) return EINVAL;
  return 0;
}
}  // namespace

int Device::reg_mr(uint32_t pd, uint64_t iova, uint64_t length, uint32_t access, std::shared_ptr<MemoryBackend> memory,
                   uint64_t memory_offset, uint32_t& key) {
  DeviceImpl& d = *impl_;
  if (int e = check_mr_args(d, pd, length, access, memory.get())) return e;
  const auto k = d.mrs_.add(MemoryRegion{pd, iova, length, access, std::move(memory), memory_offset, 0, true});
  if (!k) return ENOMEM;
  key = *k;
  ++d.pds_[pd];
  return 0;
}

int Device::rereg_mr(uint32_t key, uint32_t pd, uint64_t iova, uint64_t length, uint32_t access,
                     std::shared_ptr<MemoryBackend> memory, uint64_t memory_offset, bool new_translation,
                     uint32_t& new_key) {
  DeviceImpl& d = *impl_;
  const MemoryRegion* old = d.mrs_.find(key);
  if (old == nullptr || old->kind != KeyKind::region || old->windows != 0) return EINVAL;
  if (int e = check_mr_args(d, pd, length, access, memory.get())) return e;
  const uint32_t old_pd = old->pd;
  const auto k = d.mrs_.replace(key, MemoryRegion{pd, iova, length, access, std::move(memory), memory_offset, 0, true},
                                new_translation);
  if (!k) return EINVAL;
  --d.pds_[old_pd];
  ++d.pds_[pd];
  new_key = *k;
  return 0;
}

int Device::dereg_mr(uint32_t key) {
  DeviceImpl& d = *impl_;
  const MemoryRegion* mr = d.mrs_.find(key);
  if (mr == nullptr || mr->kind != KeyKind::region) return EINVAL;
  // IBA: a region with windows bound cannot be deregistered. rxe says EINVAL (errno is ours to choose).
  if (mr->windows != 0) return EINVAL;
  --d.pds_[mr->pd];
  d.mrs_.remove(key);
  return 0;
}

int Device::query_mr(uint32_t key, RegionInfo& info) const {
  const MemoryRegion* mr = impl_->mrs_.find(key);
  if (mr == nullptr || mr->kind != KeyKind::region) return EINVAL;
  info = {mr->pd, mr->iova, mr->length, mr->access};
  return 0;
}

int Device::alloc_mw(uint32_t pd, MwType type, uint32_t& rkey) {
  DeviceImpl& d = *impl_;
  if (!d.pds_.contains(pd) || (type != MwType::type1 && type != MwType::type2)) return EINVAL;
  const auto k = d.mrs_.add_window(pd, type == MwType::type1 ? KeyKind::window_type1 : KeyKind::window_type2);
  if (!k) return ENOMEM;
  rkey = *k;
  ++d.pds_[pd];
  return 0;
}

int Device::dealloc_mw(uint32_t mw) {
  DeviceImpl& d = *impl_;
  const MemoryRegion* w = d.mrs_.find_window(mw);
  if (w == nullptr) return EINVAL;
  const uint32_t pd = w->pd;
  d.mrs_.remove_window(mw);
  --d.pds_[pd];
  return 0;
}

// A CQ may have up to the power of two at or above max_cqe: the daemon rounds a CQ's ring up to a power of
// two (as mlx5 does), and the CQ holds as many completions as its ring.
static uint32_t cq_size_limit(const DeviceLimits& l) { return std::bit_ceil(l.max_cqe); }

int Device::create_cq(uint32_t cqe, uint32_t& cqn) {
  DeviceImpl& d = *impl_;
  if (cqe == 0 || cqe > cq_size_limit(d.limits_) || d.cqs_.size() >= d.limits_.max_cq) return EINVAL;
  cqn = d.next_cqn_++;
  d.cqs_.insert(cqn, std::make_unique<CompletionQueue>(cqe));
  return 0;
}

int Device::resize_cq(uint32_t cqn, uint32_t cqe) {
  DeviceImpl& d = *impl_;
  CompletionQueue* cq = d.cqs_.find(cqn);
  if (cq == nullptr || cqe == 0 || cqe > cq_size_limit(d.limits_)) return EINVAL;
  return cq->resize(cqe) ? 0 : EINVAL;
}

int Device::destroy_cq(uint32_t cqn) {
  DeviceImpl& d = *impl_;
  if (!d.cqs_.contains(cqn)) return EINVAL;
  for (const auto& [n, qp] : d.qps_) {
    // An XRC target's recv_cq is only the one its last message completed to: the SRQ holds the CQ.
    if (qp->send_cq == cqn || (qp->recv_cq == cqn && qp->type != QpType::xrc_recv)) return EBUSY;
  }
  for (const auto& [n, srq] : d.srqs_) {
    if (srq.cq == cqn) return EBUSY;
  }
  d.cqs_.erase(cqn);
  return 0;
}

int Device::create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit, uint32_t& srqn) {
  DeviceImpl& d = *impl_;
  if (!d.pds_.contains(pd) || max_wr == 0 || max_wr > d.limits_.max_srq_wr || max_sge > d.limits_.max_sge ||
      limit > max_wr || d.srqs_.size() >= d.limits_.max_srq) {
    return EINVAL;
  }
  srqn = d.next_srqn_++;
  ReceiveQueue q;
  q.pd = pd;
  q.max_wr = max_wr;
  q.max_sge = max_sge;
  q.limit = limit;
  q.limit_armed = limit != 0;
  d.srqs_.emplace(srqn, std::move(q));
  ++d.pds_[pd];
  return 0;
}

int Device::alloc_xrcd(uint32_t& xrcd) {
  const auto n = impl_->xrcds_.add(impl_->limits_.max_pd);
  if (!n) return ENOMEM;
  xrcd = *n;
  return 0;
}

int Device::dealloc_xrcd(uint32_t xrcd) { return impl_->xrcds_.remove(xrcd); }

int Device::create_xrc_srq(uint32_t pd, uint32_t xrcd, uint32_t cq, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                           uint32_t& srqn) {
  DeviceImpl& d = *impl_;
  if (!d.xrcds_.contains(xrcd) || !d.cqs_.contains(cq)) return EINVAL;
  if (int e = create_srq(pd, max_wr, max_sge, limit, srqn)) return e;
  ReceiveQueue& q = d.srqs_.at(srqn);
  q.xrcd = xrcd;
  q.cq = cq;
  ++d.xrcds_[xrcd];
  return 0;
}

int Device::modify_srq(uint32_t srqn, uint32_t limit) {
  DeviceImpl& d = *impl_;
  const auto it = d.srqs_.find(srqn);
  if (it == d.srqs_.end() || limit > it->second.max_wr) return EINVAL;
  it->second.limit = limit;
  it->second.limit_armed = limit != 0;
  return 0;
}

int Device::destroy_srq(uint32_t srqn) {
  DeviceImpl& d = *impl_;
  const auto it = d.srqs_.find(srqn);
  if (it == d.srqs_.end() || it->second.work_queue) return EINVAL;  // a work queue goes by destroy_wq
  for (const auto& [n, qp] : d.qps_) {
    // An XRC target only names the SRQ its last message used; nothing holds an XRC SRQ but itself.
    if (qp->srq == srqn && qp->type != QpType::xrc_recv) return EBUSY;
  }
  --d.pds_[it->second.pd];
  if (it->second.xrcd != 0) --d.xrcds_[it->second.xrcd];
  d.srqs_.erase(it);
  return 0;
}

int Device::create_ah(uint32_t pd, const AddressVector& av, uint32_t& ahn) {
  DeviceImpl& d = *impl_;
  if (!d.pds_.contains(pd) || d.ahs_.size() >= d.limits_.max_ah) return EINVAL;
  ahn = d.next_ahn_++;
  d.ahs_[ahn] = {pd, av};
  ++d.pds_[pd];
  return 0;
}

int Device::destroy_ah(uint32_t ahn) {
  DeviceImpl& d = *impl_;
  const auto it = d.ahs_.find(ahn);
  if (it == d.ahs_.end()) return EINVAL;
  --d.pds_[it->second.pd];
  d.ahs_.erase(it);
  return 0;
}

int Device::create_qp(const QpInitAttr& a, uint32_t& qpn) {
  DeviceImpl& d = *impl_;
  const DeviceLimits& l = d.limits_;
  const bool target = a.type == QpType::xrc_recv, initiator = a.type == QpType::xrc_send;
  const bool rss = a.ind_table != 0;
  if (a.type != QpType::rc && a.type != QpType::uc && a.type != QpType::ud && a.type != QpType::raw_packet &&
      !target && !initiator) {
    return EINVAL;
  }
  if (rss) {
    if (int e = d.check_rss_qp(a)) return e;
  } else if (target) {
    // An XRC target has a domain and nothing else: PD, CQ and SRQ come from the SRQ each message names.
    if (!d.xrcds_.contains(a.xrcd)) return EINVAL;
  } else {
    if (!d.pds_.contains(a.pd) || !d.cqs_.contains(a.send_cq)) return EINVAL;
    // An XRC initiator has no receive side. A work queue is no SRQ.
    if (!initiator && (!d.cqs_.contains(a.recv_cq) || (a.srq != 0 && (!d.srqs_.contains(a.srq) ||
                                                                     d.srqs_.at(a.srq).work_queue)))) {
      return EINVAL;
    }
    // Tag matching is defined for RC alone (IBV_TM_CAP_RC).
    if (a.srq != 0 && d.srqs_.at(a.srq).tm && a.type != QpType::rc) return EINVAL;
  }
  if (!target && !rss && (a.cap.max_send_wr > l.max_qp_wr || a.cap.max_send_sge > l.max_sge ||
                          a.cap.max_inline_data > l.max_inline_data)) {
    return EINVAL;
  }
  if (!target && !initiator && !rss && a.srq == 0 &&
      (a.cap.max_recv_wr > l.max_qp_wr || a.cap.max_recv_sge > l.max_sge)) {
    return EINVAL;
  }
  if (d.qps_.size() >= l.max_qp) return ENOMEM;
  // QP 0 and 1 are special, 2-16 reserved, and 0xFFFFFF addresses multicast groups, never one QP.
  while (d.qps_.contains(d.next_qpn_) || d.next_qpn_ < 0x11 || d.next_qpn_ == wire::multicast_qpn) {
    d.next_qpn_ = (d.next_qpn_ + 1) & wire::qpn_mask;
  }
  auto qp = std::make_unique<QueuePair>();
  qp->qpn = d.next_qpn_;
  d.next_qpn_ = (d.next_qpn_ + 1) & wire::qpn_mask;
  qp->type = a.type;
  qp->sq_sig_all = a.sq_sig_all;
  qp->attr.cap = a.cap;
  if (rss) {
    // No queues and no CQs: its table's work queues receive, and it sends nothing.
    qp->rss = std::make_unique<RssConfig>(RssConfig{a.ind_table, a.rx_hash_fields, a.rx_hash_key});
    qp->attr.cap = {};
    qp->pd = a.pd;
    ++d.ind_tables_.at(a.ind_table).users;
    ++d.pds_[a.pd];
  } else if (target) {
    qp->xrcd = a.xrcd;
    qp->attr.cap = {};
    ++d.xrcds_[a.xrcd];
  } else {
    qp->pd = a.pd;
    qp->send_cq = a.send_cq;
    if (initiator) {
      qp->attr.cap.max_recv_wr = qp->attr.cap.max_recv_sge = 0;
    } else {
      qp->recv_cq = a.recv_cq;
      qp->srq = a.srq;
      // On a tag matching SRQ every receive completes on the SRQ's CQ, as on an XRC SRQ (the SRQ holds
      // that CQ; the one the QP was created with takes nothing).
      if (a.srq != 0 && d.srqs_.at(a.srq).tm) {
        qp->recv_cq = d.srqs_.at(a.srq).cq;
        qp->tag_matching = true;
      }
      qp->rq.pd = a.pd;
      qp->rq.max_wr = a.cap.max_recv_wr;
      qp->rq.max_sge = a.cap.max_recv_sge;
    }
    ++d.pds_[a.pd];
  }
  qpn = qp->qpn;
  d.qps_.insert(qpn, std::move(qp));
  return 0;
}

int Device::modify_qp(uint32_t qpn, const QpAttr& attr, uint32_t mask, Nanos now) {
  DeviceImpl& d = *impl_;
  QueuePair* qp = d.find_qp(qpn);
  if (qp == nullptr) return EINVAL;
  mask &= ~ignored_attr_mask(qp->type);  // what Linux drops before checking (qp_rules.hpp)
  const QpState cur = (mask & attr_cur_state) ? attr.cur_qp_state : qp->attr.qp_state;
  if ((mask & attr_cur_state) && attr.cur_qp_state != qp->attr.qp_state) return EINVAL;
  const QpState next = (mask & attr_state) ? attr.qp_state : cur;
  if (int e = check_modify_qp(qp->type, cur, next, mask)) return e;
  AttrLimits limits;
  limits.max_qp_rd_atom = d.limits_.max_qp_rd_atom;
  limits.pkey_table_size = 1;
  limits.gid_table_size = uint8_t(std::max<size_t>(1, std::min<size_t>(d.gids_.size(), 255)));
  limits.active_mtu = d.active_mtu_;
  limits.max_qp_wr = d.limits_.max_qp_wr;
  limits.max_sge = d.limits_.max_sge;
  limits.max_inline_data = d.limits_.max_inline_data;
  if (int e = check_qp_attr_values(qp->type, attr, mask, limits)) return e;
  if ((mask & attr_rate_limit) && attr.rate_limit != 0 &&
      (attr.rate_limit < PacingLimits::min_kbps || attr.rate_limit > PacingLimits::max_kbps)) {
    return EINVAL;  // as mlx5: outside the range packet_pacing_caps names
  }

  QpAttr& q = qp->attr;
  if (mask & attr_access_flags) q.qp_access_flags = attr.qp_access_flags;
  if (mask & attr_pkey_index) q.pkey_index = attr.pkey_index;
  if (mask & attr_port) q.port_num = attr.port_num;
  if (mask & attr_qkey) q.qkey = attr.qkey;
  if (mask & attr_av) q.ah_attr = attr.ah_attr;
  if (mask & attr_path_mtu) q.path_mtu = attr.path_mtu;
  if (mask & attr_timeout) q.timeout = attr.timeout;
  if (mask & attr_retry_cnt) q.retry_cnt = attr.retry_cnt;
  if (mask & attr_rnr_retry) q.rnr_retry = attr.rnr_retry;
  if (mask & attr_min_rnr_timer) q.min_rnr_timer = attr.min_rnr_timer;
  if (mask & attr_max_qp_rd_atomic) q.max_rd_atomic = attr.max_rd_atomic;
  if (mask & attr_max_dest_rd_atomic) {
    q.max_dest_rd_atomic = attr.max_dest_rd_atomic;
    qp->resp.resources.assign(std::max<size_t>(1, attr.max_dest_rd_atomic), ResponderResource{});
    qp->resp.next_resource = 0;
  }
  if (mask & attr_dest_qpn) q.dest_qp_num = attr.dest_qp_num;
  if (mask & attr_rate_limit) {
    q.rate_limit = attr.rate_limit;
    q.max_burst_sz = attr.max_burst_sz;
    // A new rate starts a new bucket (full); 0 lifts the limit.
    qp->pacing = attr.rate_limit != 0 ? std::make_unique<PacketPacer>(attr.rate_limit, attr.max_burst_sz) : nullptr;
    if (!qp->pacing && qp->rate_blocked && !qp->rate) {
      qp->rate_blocked = false;
      d.schedule(*qp);
    }
  }
  if (mask & attr_en_sqd_async_notify) q.en_sqd_async_notify = attr.en_sqd_async_notify;
  if (mask & attr_rq_psn) {
    q.rq_psn = attr.rq_psn & wire::psn_mask;
    qp->resp.psn = q.rq_psn;
  }
  if (mask & attr_sq_psn) {
    q.sq_psn = attr.sq_psn & wire::psn_mask;
    qp->req.psn = q.sq_psn;
    qp->comp.psn = q.sq_psn;
  }
  if (mask & attr_retry_cnt) qp->comp.retry_left = q.retry_cnt;
  if (mask & attr_rnr_retry) qp->comp.rnr_retry_left = q.rnr_retry;
  if (mask & attr_timeout) {
    // Local ACK timeout: 4.096 us * 2^timeout; 0 means wait forever.
    qp->comp.timeout_period = q.timeout == 0 ? 0 : Nanos(4096) << q.timeout;
  }
  if (mask & (attr_dest_qpn | attr_av)) {
    const uint32_t fl = q.ah_attr.flow_label != 0 ? q.ah_attr.flow_label
                                                  : wire::flow_label_from_qpns(qp->qpn, q.dest_qp_num);
    qp->udp_src_port = wire::udp_source_port_from_flow_label(fl);
  }

  if (next != cur || (mask & attr_state)) {
    if (next != QpState::sqd) q.sq_draining = 0;
    switch (next) {
      case QpState::reset:
        // Back to RESET: everything outstanding is dropped without completions (verbs semantics), and the
        // completions the QP made but no one polled yet go too, as mlx4/mlx5 clean their CQs.
        for (const uint32_t cqn : {qp->send_cq, qp->recv_cq}) {
          if (CompletionQueue* cq = d.cqs_.find(cqn)) cq->remove_qp(qp->qpn);
        }
        if (qp->type == QpType::xrc_recv) {  // its receives completed to the CQs of the SRQs they came from
          for (const auto& [cqn, cq] : d.cqs_) cq->remove_qp(qp->qpn);
        }
        qp->sq.clear();
        if (!qp->rq.wrs.empty()) d.note_receives_retired(*qp);
        qp->rq.wrs.clear();
        qp->rq.peak = 0;
        qp->req = {};
        qp->comp = {};
        qp->resp = {};
        qp->pacing.reset();  // a rate limit is the QP's until RESET, as mlx5 frees its rate entry then
        if (!qp->rate) qp->rate_blocked = false;
        q.rate_limit = 0;
        q.max_burst_sz = 0;
        q.qp_state = QpState::reset;
        break;
      case QpState::err:
        d.enter_error(*qp, std::nullopt);
        break;
      case QpState::rts:
        q.qp_state = next;
        d.schedule(*qp);
        break;
      case QpState::sqd:
        q.qp_state = next;
        if (cur != QpState::sqd) {
          // Draining starts. The completer ends it (and raises SQ_DRAINED) once every WQE already started
          // has completed, which is now if none is in flight; see complete_finished().
          q.sq_draining = 1;
          d.complete_finished(*qp);
        }
        break;
      default:
        q.qp_state = next;
        break;
    }
  }
  (void)now;
  return 0;
}

int Device::query_qp(uint32_t qpn, QpAttr& attr) const {
  const QueuePair* qp = impl_->qps_.find(qpn);
  if (qp == nullptr) return EINVAL;
  attr = qp->attr;
  attr.cur_qp_state = attr.qp_state;
  attr.sq_psn = qp->req.psn;
  attr.rq_psn = qp->resp.psn;
  return 0;
}

int Device::destroy_qp(uint32_t qpn) {
  DeviceImpl& d = *impl_;
  QueuePair* qp = d.find_qp(qpn);
  if (qp == nullptr) return EINVAL;
  if (qp->flows != 0) return EBUSY;  // its flow rules first (ib_destroy_qp_user: the QP is in use)
  std::erase(d.run_list_, qp);
  std::erase(d.ack_list_, qp);
  if (qp->multicast_groups != 0) d.multicast_.detach_everywhere(qpn);  // as uverbs does on destroy
  if (qp->rss) {
    if (const auto t = d.ind_tables_.find(qp->rss->table); t != d.ind_tables_.end()) --t->second.users;
  }
  if (qp->type == QpType::xrc_recv) {
    --d.xrcds_[qp->xrcd];  // its pd is borrowed from the SRQ in use
  } else {
    --d.pds_[qp->pd];
  }
  d.mrs_.unbind_windows_of(qpn);  // type 2 windows serve only the QP that bound them
  d.qps_.erase(qpn);
  return 0;
}

// ---------------------------------------------------------------------------------------------------------
// Data path verbs.

namespace {

uint64_t message_length(const SendWr& wr) {
  if (wr.send_flags & send_inline) return wr.inline_data.size();
  uint64_t n = 0;
  for (const Sge& s : wr.sg_list) n += s.length;
  return n;
}

}  // namespace

int Device::post_send(uint32_t qpn, const SendWr& wr, Nanos now) {
  DeviceImpl& d = *impl_;
  d.now_ = now;
  QueuePair* qp = d.find_qp(qpn);
  if (qp == nullptr || qp->type == QpType::xrc_recv) return EINVAL;  // an XRC target has no send queue
  const QpState st = qp->attr.qp_state;
  if (st == QpState::reset || st == QpState::init || st == QpState::rtr) return EINVAL;
  if (qp->sq.size() >= qp->attr.cap.max_send_wr) return ENOMEM;
  if (wr.sg_list.size() > qp->attr.cap.max_send_sge) return EINVAL;
  if ((wr.send_flags & send_inline) && wr.inline_data.size() > qp->attr.cap.max_inline_data) return EINVAL;
  const WrOpcode op = wr.opcode;
  switch (qp->type) {
    case QpType::ud:
      if (op != WrOpcode::send && op != WrOpcode::send_with_imm) return EINVAL;
      if (!d.ahs_.contains(wr.ah)) return EINVAL;
      break;
    case QpType::uc:
      if (op != WrOpcode::send && op != WrOpcode::send_with_imm && op != WrOpcode::rdma_write &&
          op != WrOpcode::rdma_write_with_imm && op != WrOpcode::local_inv && op != WrOpcode::bind_mw) {
        return EINVAL;
      }
      break;
    case QpType::raw_packet:
      // A raw frame is sent as posted: a SEND and nothing else (mlx5 also takes TSO, which uroce has not).
      if (op != WrOpcode::send) return EINVAL;
      break;
    case QpType::rc:
    case QpType::xrc_send:
      break;
    case QpType::xrc_recv:
      return EINVAL;  // (refused above: a target has no send queue)
  }
  if ((op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add) &&
      ((wr.remote_addr & 7) != 0 || message_length(wr) < 8 || (wr.send_flags & send_inline))) {
    return EINVAL;
  }
  // ATOMIC WRITE exists for RC alone (IBTA 1.5 A19; XRC has no such opcode), at an aligned address. Its 8
  // bytes travel in the request itself (compare_add): no gather list or inline data is read.
  if (op == WrOpcode::atomic_write && (qp->type != QpType::rc || (wr.remote_addr & 7) != 0)) return EINVAL;
  const uint64_t length = message_length(wr);
  if (length > 0x80000000ull) return EINVAL;  // max message size: 2 GiB

  const bool atomic = op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add ||
                      op == WrOpcode::atomic_write;
  qp->sq.emplace_back(wr, uint32_t(atomic ? 8 : length), qp->sq_sig_all || (wr.send_flags & send_signaled));
  if (st == QpState::err) {
    d.flush(*qp);  // posting to a QP in error completes at once with a flush error
    return 0;
  }
  d.schedule(*qp);
  (void)now;
  return 0;
}

int Device::post_recv(uint32_t qpn, const RecvWr& wr) {
  DeviceImpl& d = *impl_;
  QueuePair* qp = d.find_qp(qpn);
  // XRC QPs have no receive queue: an initiator receives nothing, a target receives into XRC SRQs.
  if (qp == nullptr || qp->srq != 0 || qp->type == QpType::xrc_send || qp->type == QpType::xrc_recv) return EINVAL;
  if (qp->attr.qp_state == QpState::reset) return EINVAL;
  if (wr.sg_list.size() > qp->rq.max_sge) return EINVAL;
  if (qp->rq.wrs.size() >= qp->rq.max_wr) return ENOMEM;
  qp->rq.wrs.push_back(wr);
  qp->rq.peak = std::max(qp->rq.peak, uint32_t(qp->rq.wrs.size()));
  if (qp->attr.qp_state == QpState::err) d.flush(*qp);
  return 0;
}

int Device::post_srq_recv(uint32_t srqn, const RecvWr& wr) {
  DeviceImpl& d = *impl_;
  const auto it = d.srqs_.find(srqn);
  if (it == d.srqs_.end()) return EINVAL;
  ReceiveQueue& q = it->second;
  if (wr.sg_list.size() > q.max_sge) return EINVAL;
  if (q.wrs.size() >= q.max_wr) return ENOMEM;
  q.wrs.push_back(wr);
  q.peak = std::max(q.peak, uint32_t(q.wrs.size()));
  if (q.work_queue && q.wq_state == uint8_t(WqState::error)) d.flush_wq(srqn, q);  // as posting to a QP in ERR
  return 0;
}

int Device::poll_cq(uint32_t cqn, std::span<WorkCompletion> out) {
  CompletionQueue* cq = impl_->cqs_.find(cqn);
  if (cq == nullptr) return -EINVAL;
  return int(cq->poll(out));
}

// ---------------------------------------------------------------------------------------------------------
// The engine.

void Device::receive(std::span<const uint8_t> bytes, Nanos now) {
  DeviceImpl& d = *impl_;
  d.now_ = now;
  DeviceCounters& c = d.counters_;
  ++c.rx_frames;
  wire::Frame& f = d.frame_;
  if (wire::parse_frame(bytes, f) != wire::ParseError::none) {
    ++c.rx_malformed;
    return;
  }
  if (f.kind != wire::FrameKind::roce) {
    ++c.rx_not_roce;
    return;
  }
  d.placed_ = {};
  // A large request continuing a message in progress, a READ response or a datagram is copied into place
  // while its ICRC is checked (qp/early_placement.cpp); every other frame is checked first.
  EarlyPlacement early = EarlyPlacement::not_taken;
  if (may_place_early(f)) early = d.place_early(f);
  if (early == EarlyPlacement::bad_icrc || (early == EarlyPlacement::not_taken && !wire::icrc_ok(f))) {
    ++c.rx_bad_icrc;
    return;
  }
  const wire::Bth& bth = f.roce.bth();
  if (f.roce.info->transport == wire::Transport::cnp) {
    d.on_cnp(f, now);
    return;
  }
  if (bth.dest_qp == wire::gsi_qpn) {  // QP1 is no QueuePair: its MADs go to connection management
    d.on_gsi(f, now);
    return;
  }
  QueuePair* qp = d.find_qp(bth.dest_qp);
  if (qp == nullptr) {
    // No QP has the multicast QPN (create_qp skips it), so multicast costs the unicast path nothing.
    if (bth.dest_qp == wire::multicast_qpn) {
      d.on_multicast(f, bytes.size(), now);
    } else {
      ++c.rx_unknown_qp;
    }
    return;
  }
  d.dispatch(*qp, f, bytes.size(), now);
}

bool DeviceImpl::dispatch(QueuePair& qp, const wire::Frame& f, size_t frame_size, Nanos now) {
  DeviceCounters& c = counters_;
  const wire::Bth& bth = f.roce.bth();
  ++qp.counters.rx_packets;
  qp.counters.rx_bytes += frame_size;
  if (!pkey_matches(bth.pkey, pkey_)) {
    ++c.rx_bad_pkey;
    return false;
  }
  if (!transport_matches(qp.type, f.roce.info->transport) || !direction_matches(qp.type, f.roce.info->is_request)) {
    ++c.rx_wrong_transport;
    return false;
  }
  const QpState st = qp.attr.qp_state;
  if (f.roce.info->is_request) {
    if (st != QpState::rtr && st != QpState::rts && st != QpState::sqd) {
      ++c.rx_qp_not_ready;
      return false;
    }
    on_request(qp, f, now);
  } else {
    if (st != QpState::rts && st != QpState::sqd) {
      ++c.rx_qp_not_ready;
      return false;
    }
    on_response(qp, f, now);
  }
  if (f.ecn() == wire::Ecn::ce) on_congestion_experienced(qp, now);
  return true;
}

void Device::run(Nanos now) {
  DeviceImpl& d = *impl_;
  d.now_ = now;
  // First the ACKs the responders owe for the frames received since the last run (coalesced).
  for (QueuePair* qp : d.ack_list_) d.flush_ack(*qp);
  d.ack_list_.clear();
  // Timers: local ACK timeouts, and RNR waits that have ended. A linear scan keeps this simple; the number
  // of QPs with a timer running is the number with traffic in flight.
  for (auto& [n, qp] : d.qps_) {
    if (qp->comp.timeout_at <= now) d.on_timer(*qp, now);
    if (qp->req.rnr_wait_until != 0 && qp->req.rnr_wait_until <= now) {
      qp->req.rnr_wait_until = 0;
      d.schedule(*qp);
    }
    if (qp->rate) d.run_rates(*qp, now);
    if (qp->pacing && qp->rate_blocked && qp->pacing->allows(now)) {
      qp->rate_blocked = false;
      d.schedule(*qp);
    }
  }
  // Requesters, each until it is blocked (window, credits, fence, no work). New QPs scheduled while this
  // runs wait for the next call, so one run() is bounded.
  // The two lists swap rather than move so that both keep their capacity: no allocation per call. (A
  // PacketSink never calls back into the device, so run() is never re-entered while running_ is in use.)
  d.running_.swap(d.run_list_);
  for (QueuePair* qp : d.running_) {
    qp->req.scheduled = false;
    d.run_requester(*qp, now);
  }
  d.running_.clear();
}

Nanos Device::next_deadline() const {
  Nanos t = never;
  for (const auto& [n, qp] : impl_->qps_) {
    t = std::min(t, qp->comp.timeout_at);
    if (qp->req.rnr_wait_until != 0) t = std::min(t, qp->req.rnr_wait_until);
    if (qp->rate) {
      t = std::min(t, qp->rate->next_timer());
      if (qp->rate_blocked) t = std::min(t, qp->rate->next_send_time());
    }
    if (qp->pacing && qp->rate_blocked) t = std::min(t, qp->pacing->next_send_time());
  }
  return t;
}

bool Device::has_pending_work() const { return !impl_->run_list_.empty() || !impl_->ack_list_.empty(); }

void Device::take_active_cqs(std::vector<uint32_t>& out) {
  out.clear();
  std::swap(out, impl_->active_cqs_);
  for (const uint32_t cqn : out) {
    if (CompletionQueue* cq = impl_->cqs_.find(cqn)) cq->active_listed = false;
  }
}

void DeviceImpl::note_low_receive_queue(uint32_t qpn) {
  ++counters_.receive_queues_low;
  if (std::find(low_receive_queues_.begin(), low_receive_queues_.end(), qpn) == low_receive_queues_.end()) {
    low_receive_queues_.push_back(qpn);
  }
}

void DeviceImpl::note_receives_retired(QueuePair& qp) {
  if (qp.rq.retired_listed) return;
  qp.rq.retired_listed = true;
  retired_receives_.push_back(qp.qpn);
}

void Device::take_retired_receives(std::vector<uint32_t>& out) {
  out.clear();
  std::swap(out, impl_->retired_receives_);
  for (const uint32_t qpn : out) {
    if (QueuePair* qp = impl_->find_qp(qpn)) qp->rq.retired_listed = false;
  }
}

void DeviceImpl::note_srq_receives_retired(uint32_t srqn, ReceiveQueue& srq) {
  if (srq.retired_listed) return;
  srq.retired_listed = true;
  retired_srq_receives_.push_back(srqn);
}

void Device::take_retired_srq_receives(std::vector<uint32_t>& out) {
  out.clear();
  std::swap(out, impl_->retired_srq_receives_);
  for (const uint32_t srqn : out) {
    if (const auto it = impl_->srqs_.find(srqn); it != impl_->srqs_.end()) it->second.retired_listed = false;
  }
}

uint32_t Device::srq_size(uint32_t srqn) const {
  const auto it = impl_->srqs_.find(srqn);
  return it == impl_->srqs_.end() ? 0 : uint32_t(it->second.wrs.size());
}

uint32_t Device::receive_queue_size(uint32_t qpn) const {
  const QueuePair* qp = impl_->qps_.find(qpn);
  return qp == nullptr || qp->srq != 0 ? 0 : uint32_t(qp->rq.wrs.size());
}

void Device::take_low_receive_queues(std::vector<uint32_t>& out) {
  out.clear();
  std::swap(out, impl_->low_receive_queues_);
}

std::vector<AsyncEvent> Device::take_events() {
  std::vector<AsyncEvent> e;
  e.swap(impl_->events_);
  return e;
}

const DeviceCounters& Device::counters() const { return impl_->counters_; }

std::bitset<256> Device::source_gids_in_use() const {
  std::bitset<256> in_use;
  for (const auto& [ahn, ah] : impl_->ahs_) in_use.set(ah.av.sgid_index);
  for (const auto& [qpn, qp] : impl_->qps_) {
    const QpState s = qp->attr.qp_state;
    if (qp->connected() && s != QpState::reset && s != QpState::init) in_use.set(qp->attr.ah_attr.sgid_index);
  }
  return in_use;
}

void Device::for_each_qp_counters(const std::function<void(uint32_t, const QpCounters&)>& visit) const {
  for (const auto& [qpn, qp] : impl_->qps_) visit(qpn, qp->counters);
}

}  // namespace uroce::transport
