// QP1, the General Services Interface: the MADs of connection management. The transport only moves them
// (UD SEND_ONLY, Q_Key 0x80010000, P_Key checked, source QP 1); what they mean is transport/cm's business,
// reached through the handler the owner installs.
#include <cerrno>

#include "transport/device.hpp"
#include "transport/device_impl.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::transport {

namespace {
// A fixed UDP source port for QP1 (any value in 0xC000-0xFFFF is legal; stable keeps one flow per pair).
constexpr uint16_t gsi_udp_src_port = 0xc001;
}  // namespace

void Device::set_gsi_handler(GsiHandler handler) { impl_->gsi_handler_ = std::move(handler); }

void DeviceImpl::on_gsi(const wire::Frame& f, Nanos now) {
  const wire::TransportHeaders& h = f.roce.headers;
  const bool valid = h.bth.opcode == uint8_t(wire::Opcode::ud_send_only) && h.deth.qkey == wire::gsi_qkey &&
                     (h.bth.pkey & 0x7fff) == (pkey_ & 0x7fff) && f.roce.payload.size() >= wire::mad_size;
  if (!valid || !gsi_handler_) {
    ++counters_.rx_gsi_dropped;
    return;
  }
  ++counters_.rx_gsi;
  GsiDatagram d;
  d.source_gid = f.src_ip();
  d.source_qpn = h.deth.src_qp;
  d.sl = f.eth.has_vlan ? f.eth.vlan_pcp() : 0;
  d.pkey = h.bth.pkey;
  d.mad = f.roce.payload.first(wire::mad_size);
  gsi_handler_(d, now);
}

int Device::send_gsi(const verbs::AddressVector& destination, uint32_t dest_qpn, std::span<const uint8_t> mad) {
  DeviceImpl& d = *impl_;
  if (mad.size() != wire::mad_size) return EINVAL;
  OutPacket p;
  p.destination = &destination;
  p.src_qpn = wire::gsi_qpn;
  p.udp_src_port = gsi_udp_src_port;
  wire::Bth& bth = p.headers.bth;
  bth.opcode = uint8_t(wire::Opcode::ud_send_only);
  bth.pkey = d.pkey_;
  bth.dest_qp = dest_qpn;
  bth.ack_req = true;  // as rxe sends its MADs
  bth.psn = d.gsi_psn_;
  d.gsi_psn_ = (d.gsi_psn_ + 1) & 0xffffff;
  p.headers.deth.qkey = wire::gsi_qkey;
  p.headers.deth.src_qp = wire::gsi_qpn;
  p.payload = mad;
  ++d.counters_.tx_gsi;
  ++d.counters_.tx_packets;
  d.sink_.transmit(p);
  return 0;
}

}  // namespace uroce::transport
