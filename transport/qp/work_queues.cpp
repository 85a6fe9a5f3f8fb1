// Receive work queues, indirection tables and RSS QPs (ibv_create_wq, ibv_create_rwq_ind_table,
// ibv_create_qp_ex with IBV_QP_INIT_ATTR_RX_HASH): receive side scaling as a NIC does it for raw packet
// traffic. A work queue is a receive queue with a CQ of its own (it lives in the SRQ table, and is posted to
// as an SRQ is); an indirection table lists 2^n of them; an RSS QP has no queues, only flow rules and a
// hash, and each frame its rules take goes to the table entry the hash picks (transport/flow/rss_hash.hpp).
// Its completions carry the work queue's number as their QP number, as mlx5 reports them.
#include <cerrno>

#include "transport/device.hpp"
#include "transport/device_impl.hpp"
#include "transport/flow/rss_hash.hpp"

namespace uroce::transport {

using namespace uroce::verbs;

int Device::create_wq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge, uint32_t& wqn) {
  DeviceImpl& d = *impl_;
  if (!d.cqs_.contains(cq)) return EINVAL;
  if (int e = create_srq(pd, max_wr, max_sge, 0, wqn)) return e;
  ReceiveQueue& q = d.srqs_.at(wqn);
  q.work_queue = true;
  q.cq = cq;
  q.wq_state = uint8_t(WqState::reset);
  return 0;
}

int Device::modify_wq(uint32_t wqn, WqState state) {
  DeviceImpl& d = *impl_;
  const auto it = d.srqs_.find(wqn);
  if (it == d.srqs_.end() || !it->second.work_queue) return EINVAL;
  ReceiveQueue& q = it->second;
  const WqState from = WqState(q.wq_state);
  switch (state) {
    case WqState::reset:
      q.wrs.clear();  // as a QP's RESET drops its receives, with no completions
      d.note_srq_receives_retired(wqn, q);
      break;
    case WqState::ready:
      if (from == WqState::error) return EINVAL;  // through RESET, as a QP leaves ERR
      break;
    case WqState::error:
      q.wq_state = uint8_t(state);
      d.flush_wq(wqn, q);
      return 0;
    default:
      return EINVAL;
  }
  q.wq_state = uint8_t(state);
  return 0;
}

int Device::query_wq_state(uint32_t wqn, WqState& state) const {
  const auto it = impl_->srqs_.find(wqn);
  if (it == impl_->srqs_.end() || !it->second.work_queue) return EINVAL;
  state = WqState(it->second.wq_state);
  return 0;
}

int Device::destroy_wq(uint32_t wqn) {
  DeviceImpl& d = *impl_;
  const auto it = d.srqs_.find(wqn);
  if (it == d.srqs_.end() || !it->second.work_queue) return EINVAL;
  if (it->second.tables != 0) return EBUSY;
  --d.pds_[it->second.pd];
  d.srqs_.erase(it);
  return 0;
}

int Device::create_rwq_ind_table(const std::vector<uint32_t>& wqs, uint32_t& table) {
  DeviceImpl& d = *impl_;
  if (wqs.empty() || wqs.size() > (size_t(1) << log_max_ind_table) || (wqs.size() & (wqs.size() - 1)) != 0) {
    return EINVAL;
  }
  for (const uint32_t wqn : wqs) {
    const auto it = d.srqs_.find(wqn);
    if (it == d.srqs_.end() || !it->second.work_queue) return EINVAL;
  }
  for (const uint32_t wqn : wqs) ++d.srqs_.at(wqn).tables;
  table = d.next_ind_table_++;
  d.ind_tables_[table] = {wqs, 0};
  return 0;
}

int Device::destroy_rwq_ind_table(uint32_t table) {
  DeviceImpl& d = *impl_;
  const auto it = d.ind_tables_.find(table);
  if (it == d.ind_tables_.end()) return EINVAL;
  if (it->second.users != 0) return EBUSY;
  for (const uint32_t wqn : it->second.wqs) {
    if (const auto q = d.srqs_.find(wqn); q != d.srqs_.end()) --q->second.tables;
  }
  d.ind_tables_.erase(it);
  return 0;
}

int DeviceImpl::check_rss_qp(const QpInitAttr& a) const {
  constexpr uint64_t tcp_ports = flow::hash_src_port_tcp | flow::hash_dst_port_tcp;
  constexpr uint64_t udp_ports = flow::hash_src_port_udp | flow::hash_dst_port_udp;
  if (a.type != QpType::raw_packet || !pds_.contains(a.pd) || !ind_tables_.contains(a.ind_table)) return EINVAL;
  if (a.rx_hash_key.size() != 40 || (a.rx_hash_fields & ~flow::hash_known_fields) != 0) return EINVAL;
  if ((a.rx_hash_fields & tcp_ports) && (a.rx_hash_fields & udp_ports)) return EINVAL;
  return 0;
}

void DeviceImpl::flush_wq(uint32_t wqn, ReceiveQueue& q) {
  while (!q.wrs.empty()) {
    WorkCompletion wc;
    wc.wr_id = q.wrs.front().wr_id;
    wc.status = WcStatus::wr_flush_err;
    wc.opcode = WcOpcode::recv;
    wc.qp_num = wqn;
    q.wrs.pop_front();
    post_completion(q.cq, wc);
  }
  note_srq_receives_retired(wqn, q);
}

void DeviceImpl::deliver_rss(QueuePair& qp, std::span<const uint8_t> frame) {
  const auto table = ind_tables_.find(qp.rss->table);
  if (table == ind_tables_.end()) return;  // (the QP holds its table: it cannot go first)
  const std::vector<uint32_t>& wqs = table->second.wqs;
  const uint32_t hash = flow::rss_hash(qp.rss->key, qp.rss->fields, frame);
  const uint32_t wqn = wqs[hash & (wqs.size() - 1)];
  const auto it = srqs_.find(wqn);
  if (it == srqs_.end() || it->second.wq_state != uint8_t(WqState::ready) || it->second.wrs.empty()) {
    ++counters_.rx_raw_no_receive;
    return;
  }
  ReceiveQueue& q = it->second;
  const RecvWr recv = std::move(q.wrs.front());
  q.wrs.pop_front();
  note_srq_receives_retired(wqn, q);
  ++counters_.rx_raw;
  ++qp.counters.rx_packets;
  qp.counters.rx_bytes += frame.size();
  const WorkCompletion wc = receive_raw(recv, q.pd, wqn, frame);  // the work queue's number as qp_num
  post_completion(q.cq, wc);
  if (wc.status != WcStatus::success) {
    q.wq_state = uint8_t(WqState::error);  // a local error takes the work queue to ERR, as it would a QP
    flush_wq(wqn, q);
  }
}

}  // namespace uroce::transport
