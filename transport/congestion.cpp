// RoCEv2 congestion control (device.hpp, CongestionConfig): the notification point (CNPs for packets marked
// Congestion Experienced) and the reaction point (each QP's DCQCN rate, dcqcn.hpp, and the pacing of its
// sends). The switch marks; the receiver tells the sender's QP; the sender's rate drops and recovers.
#include "transport/device_impl.hpp"

namespace uroce::transport {

void Device::set_congestion(const CongestionConfig& config) { impl_->congestion_ = config; }

void DeviceImpl::on_congestion_experienced(QueuePair& qp, Nanos now) {
  ++counters_.rx_ecn_ce;
  ++qp.counters.rx_ecn_ce;
  if (!congestion_.notify || !qp.connected()) return;
  if (qp.cnp_sent_at != never && now - qp.cnp_sent_at < congestion_.cnp_interval_ns) return;
  const verbs::QpState st = qp.attr.qp_state;
  if (st != verbs::QpState::rtr && st != verbs::QpState::rts && st != verbs::QpState::sqd) return;
  qp.cnp_sent_at = now;

  // Back along the QP's own path (its address vector, as its ACKs), with the CNP's DSCP.
  verbs::AddressVector av = qp.attr.ah_attr;
  av.traffic_class = uint8_t(congestion_.cnp_dscp << 2);
  OutPacket packet;
  packet.destination = &av;
  packet.src_qpn = qp.qpn;
  packet.udp_src_port = qp.udp_src_port;
  packet.ecn_capable = true;
  wire::TransportHeaders& h = packet.headers;
  h.bth.opcode = uint8_t(wire::Opcode::cnp);
  h.bth.becn = true;
  h.bth.pkey = pkey_;
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.bth.psn = 0;
  ++counters_.cnp_sent;
  ++qp.counters.cnp_sent;
  sink_.transmit(packet);
}

// A CNP for one of our QPs: DCQCN cuts its rate (a rate is made at line rate on the first CNP).
void DeviceImpl::on_cnp(const wire::Frame& f, Nanos now) {
  ++counters_.rx_cnp;
  QueuePair* qp = find_qp(f.roce.bth().dest_qp);
  if (qp == nullptr) return;
  ++qp->counters.rx_cnp;
  if (!congestion_.react || !qp->connected()) return;
  if (qp->attr.qp_state != verbs::QpState::rts && qp->attr.qp_state != verbs::QpState::sqd) return;
  if (!qp->rate) qp->rate = std::make_unique<DcqcnRate>(congestion_.dcqcn, now);
  const uint64_t before = qp->rate->cuts();
  qp->rate->on_cnp(now);
  if (qp->rate->cuts() != before) {
    ++counters_.rate_cuts;
    ++qp->counters.rate_cuts;
  }
}

bool DeviceImpl::rate_allows(QueuePair& qp, Nanos now) {
  const bool allowed = (!qp.rate || now >= qp.rate->next_send_time()) && (!qp.pacing || qp.pacing->allows(now));
  if (allowed) return true;
  qp.rate_blocked = true;
  ++counters_.paced_stops;
  return false;
}

void DeviceImpl::on_rate_sent(QueuePair& qp, OutPacket& packet) {
  // Data packets of connected QPs go ECN-capable when we react to CNPs: a switch may then mark them rather
  // than drop them. Not ACKs (no data to slow down), nor UD (no CNP can throttle a datagram QP, and an
  // ECN-capable flow that never slows down is what RFC 3168 forbids; the receiver's GRH also shows the
  // traffic class as the sender set it). (Opcodes compared directly: this runs for every packet. Their low
  // five bits name the operation in RC and XRC alike, and no UC or UD opcode has an ACK's.)
  const uint8_t op = packet.headers.bth.opcode;
  const uint8_t rc_op = op & 0x1f;
  packet.ecn_capable = congestion_.react && qp.connected() && rc_op != uint8_t(wire::Opcode::rc_acknowledge) &&
                       rc_op != uint8_t(wire::Opcode::rc_atomic_acknowledge);
  if (!qp.rate) return;
  // What the packet occupies on the wire: Ethernet, IPv4, UDP, BTH, its extension headers, payload, ICRC.
  constexpr uint64_t fixed = 14 + 20 + 8 + wire::bth_size + 4;
  qp.rate->on_sent(fixed + wire::opcode_info(op).headers_length + packet.payload.size(), now_);
}

void DeviceImpl::run_rates(QueuePair& qp, Nanos now) {
  qp.rate->on_time(now);
  const bool due = qp.rate->next_send_time() <= now;
  if (qp.rate->at_line_rate() && due) qp.rate.reset();  // not limited any more: forget it
  if (qp.rate_blocked && due) {
    qp.rate_blocked = false;
    schedule(qp);
  }
}

}  // namespace uroce::transport
