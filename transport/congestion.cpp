// The notification point of RoCEv2 congestion control: CNPs for packets marked Congestion Experienced
// (device.hpp, CongestionConfig). The switch marks; the receiver tells the sender's QP; the sender's NIC
// (its reaction point, DCQCN) cuts its rate.
#include "transport/device_impl.hpp"

namespace uroce::transport {

void Device::set_congestion(const CongestionConfig& config) { impl_->congestion_ = config; }

void DeviceImpl::on_congestion_experienced(QueuePair& qp, const wire::Frame& f, Nanos now) {
  (void)f;
  ++counters_.rx_ecn_ce;
  ++qp.counters.rx_ecn_ce;
  if (!congestion_.notify || (qp.type != verbs::QpType::rc && qp.type != verbs::QpType::uc)) return;
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

// A CNP for one of our QPs: counted (device-wide and for the QP, if it exists). There is no rate control
// of our sends to apply it to yet.
void DeviceImpl::on_cnp(const wire::Frame& f) {
  ++counters_.rx_cnp;
  if (QueuePair* qp = find_qp(f.roce.bth().dest_qp)) ++qp->counters.rx_cnp;
}

}  // namespace uroce::transport
