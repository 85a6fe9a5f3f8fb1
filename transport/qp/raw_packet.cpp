// Raw packet QPs (IBV_QPT_RAW_PACKET): whole Ethernet frames, with no transport of their own. A send work
// request's gather list (or inline data) is the frame, sent as it is; received frames reach a raw packet
// QP only through the port's flow steering rules (ibv_create_flow), which this file also keeps.
//
// What uroce does where verbs leave it to the device, as a ConnectX does:
// - A frame must hold at least an Ethernet header and at most the port's IP MTU plus the Ethernet header
//   and one 802.1Q tag; otherwise the work request completes with IBV_WC_LOC_LEN_ERR (and the QP, as after
//   any local error, goes to the error state). Frames go out as posted: no padding to 60 bytes, no VLAN tag
//   added, the source MAC as given.
// - IBV_SEND_IP_CSUM fills in the IPv4 header checksum and the TCP or UDP checksum (wire/checksum_offload).
// - A received frame lands at the start of the receive's scatter list; byte_len is its length. An IPv4
//   frame whose IP and TCP/UDP checksums are right completes with IBV_WC_IP_CSUM_OK, as mlx5 reports it.
//   A frame longer than the receive completes with IBV_WC_LOC_LEN_ERR and the QP goes to the error state,
//   as for a UD datagram. With no receive posted the frame is lost (counted): raw QPs have no RNR.
// - Frames are taken in RTR, RTS and SQD; a QP in another state loses them (counted).
#include <cerrno>

#include "transport/device.hpp"
#include "transport/device_impl.hpp"
#include "transport/wire/checksum_offload.hpp"
#include "transport/wire/ethernet.hpp"

namespace uroce::transport {

using namespace uroce::verbs;

void DeviceImpl::send_raw(QueuePair& qp, SendWqe& w) {
  ++qp.req.next;
  if (w.length < wire::ethernet_header_size || w.length > max_raw_frame_) {
    ++counters_.tx_raw_bad_length;
    w.state = WqeState::failed;
    w.status = WcStatus::loc_len_err;
    complete_finished(qp);
    return;
  }
  raw_frame_.resize(w.length);
  if (w.wr.send_flags & send_inline) {
    std::copy(w.wr.inline_data.begin(), w.wr.inline_data.end(), raw_frame_.begin());
  } else if (gather(w.wr.sg_list, qp.pd, 0, raw_frame_) != KeyCheck::ok) {
    w.state = WqeState::failed;  // an lkey, PD or bounds problem in the gather list
    w.status = WcStatus::loc_prot_err;
    complete_finished(qp);
    return;
  }
  if (w.wr.send_flags & send_ip_csum) wire::offload_checksums(raw_frame_);
  ++counters_.tx_raw;
  ++qp.counters.tx_packets;
  qp.counters.tx_payload_bytes += w.length;
  w.state = WqeState::done;
  if (qp.pacing) qp.pacing->on_sent(w.length, now_);
  sink_.transmit_frame(qp.qpn, raw_frame_);
  complete_finished(qp);
}

void DeviceImpl::deliver_raw(uint32_t qpn, std::span<const uint8_t> frame) {
  QueuePair* qp = find_qp(qpn);
  if (qp == nullptr) return;
  if (qp->rss) {
    deliver_rss(*qp, frame);  // whatever its state: an RSS QP is its table (mlx5's TIR has none)
    return;
  }
  const QpState st = qp->attr.qp_state;
  std::optional<RecvWr> recv;
  if ((st != QpState::rtr && st != QpState::rts && st != QpState::sqd) || !take_receive(*this, *qp, recv)) {
    ++counters_.rx_raw_no_receive;
    return;
  }
  ++counters_.rx_raw;
  ++qp->counters.rx_packets;
  qp->counters.rx_bytes += frame.size();
  const WorkCompletion wc = receive_raw(*recv, qp->pd, qp->qpn, frame);
  post_completion(qp->recv_cq, wc);
  if (wc.status != WcStatus::success) enter_error(*qp, EventType::qp_fatal);
}

WorkCompletion DeviceImpl::receive_raw(const RecvWr& recv, uint32_t pd, uint32_t qp_num,
                                       std::span<const uint8_t> frame) {
  WorkCompletion wc;
  wc.wr_id = recv.wr_id;
  wc.opcode = WcOpcode::recv;
  wc.qp_num = qp_num;
  wc.byte_len = uint32_t(frame.size());
  if (frame.size() > sge_total(recv)) {
    wc.status = WcStatus::loc_len_err;
  } else if (scatter(recv.sg_list, pd, 0, frame) != KeyCheck::ok) {
    wc.status = WcStatus::loc_prot_err;
  } else if (wire::ipv4_checksums_ok(frame)) {
    wc.wc_flags |= wc_ip_csum_ok;
  }
  return wc;
}

void DeviceImpl::deliver_raw_to(std::span<const uint8_t> frame) {
  // Delivery never adds or removes rules or QPs, so steered_ stays as it is while it runs.
  for (const uint32_t qpn : steered_) deliver_raw(qpn, frame);
  steered_.clear();
}

// -- Device: flow steering -----------------------------------------------------------------------------------

int Device::create_flow(uint32_t qpn, flow::FlowRule rule, uint32_t& handle) {
  DeviceImpl& d = *impl_;
  QueuePair* qp = d.find_qp(qpn);
  if (qp == nullptr || qp->type != QpType::raw_packet) return EINVAL;
  if (rule.flags & flow::flag_egress) return EOPNOTSUPP;
  if ((rule.flags & ~(flow::flag_dont_trap | flow::flag_egress)) != 0) return EINVAL;
  if (rule.type != flow::AttrType::normal && (!rule.specs.empty() || rule.drop)) return EINVAL;
  if (d.flow_count_ >= d.limits_.max_flows) return ENOMEM;
  handle = d.flows_.add(qpn, std::move(rule));
  ++d.flow_count_;
  ++qp->flows;
  return 0;
}

int Device::destroy_flow(uint32_t handle) {
  DeviceImpl& d = *impl_;
  uint32_t qpn = 0;
  if (!d.flows_.remove(handle, qpn)) return EINVAL;
  --d.flow_count_;
  if (QueuePair* qp = d.find_qp(qpn)) --qp->flows;
  return 0;
}

bool Device::has_flows() const { return !impl_->flows_.empty(); }
uint32_t Device::flow_count() const { return impl_->flow_count_; }
bool Device::has_sniffers() const { return impl_->flows_.has_sniffers(); }

bool Device::steer(std::span<const uint8_t> frame, Nanos now, uint32_t sender) {
  DeviceImpl& d = *impl_;
  if (d.flows_.empty()) return false;
  d.now_ = now;  // completions are stamped with it
  d.flows_.sniffers(d.steered_);
  d.deliver_raw_to(frame);
  const bool trapped = d.flows_.steer(frame, sender, d.steered_);
  if (trapped && d.steered_.empty()) ++d.counters_.rx_raw_dropped_by_rule;  // only a drop traps to no one
  d.deliver_raw_to(frame);
  return trapped;
}

void Device::steer_unclaimed(std::span<const uint8_t> frame, Nanos now, uint32_t sender) {
  DeviceImpl& d = *impl_;
  if (d.flows_.empty()) return;
  d.now_ = now;
  d.flows_.unclaimed(frame, sender, d.steered_);
  d.deliver_raw_to(frame);
}

void Device::sniff_sent(std::span<const uint8_t> frame, Nanos now) {
  DeviceImpl& d = *impl_;
  if (!d.flows_.has_sniffers()) return;
  d.now_ = now;
  d.flows_.sniffers(d.steered_);
  d.deliver_raw_to(frame);
}

}  // namespace uroce::transport
