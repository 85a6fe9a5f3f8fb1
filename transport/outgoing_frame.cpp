#include "transport/outgoing_frame.hpp"

namespace uroce::transport {

wire::FrameSpec frame_spec_for(const OutPacket& packet, const PortAddressing& port) {
  const verbs::AddressVector& av = *packet.destination;
  const uint8_t ecn = uint8_t(packet.ecn_capable ? wire::Ecn::ect0 : wire::Ecn::not_ect);
  const uint8_t tclass = uint8_t((av.traffic_class & ~3u) | ecn);

  // The headers are copied in as the spec is initialised, not zero-filled first and then overwritten:
  // this runs for every packet.
  wire::FrameSpec s{.eth = {.dst = port.dst_mac, .src = port.src_mac},
                    .ipv4 = {},
                    .ipv6 = {},
                    .udp_src_port = packet.udp_src_port,
                    .headers = packet.headers,
                    .payload = packet.payload};
  if (port.vlan_id) {
    s.eth.has_vlan = true;
    s.eth.vlan_tci = uint16_t((av.service_level & 7u) << 13 | (*port.vlan_id & 0x0fffu));
  }
  if (port.src_ip.is_v4() && av.dgid.is_v4()) {
    s.ip_version = wire::IpVersion::v4;
    s.eth.ethertype = wire::ethertype_ipv4;
    s.ipv4.src = port.src_ip.v4();
    s.ipv4.dst = av.dgid.v4();
    s.ipv4.tos = tclass;
    s.ipv4.ttl = av.hop_limit;
    s.ipv4.identification = port.ip_identification;
    s.ipv4.dont_fragment = true;
  } else {
    s.ip_version = wire::IpVersion::v6;
    s.eth.ethertype = wire::ethertype_ipv6;
    s.ipv6.src = port.src_ip;
    s.ipv6.dst = av.dgid;
    s.ipv6.traffic_class = tclass;
    s.ipv6.flow_label = av.flow_label & 0xfffff;
    s.ipv6.hop_limit = av.hop_limit;
  }
  return s;
}

}  // namespace uroce::transport
