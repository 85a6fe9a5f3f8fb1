#include "emulator/net/icmp.hpp"

#include <algorithm>
#include <cstring>

#include "emulator/net/nd_frames.hpp"
#include "transport/wire/bytes.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::emulator::net {

namespace {

constexpr uint8_t icmp_type_echo_reply = 0;
constexpr uint8_t icmpv6_type_echo_reply = 129;

// The IP header of the reply, for either family: the request's destination (one of our addresses) as its
// source, the request's TOS / traffic class kept, hop limit 64. Returns its size.
size_t write_reply_ip(uint8_t* out, const uint8_t* req_ip, const Classification& c, size_t icmp_length,
                      uint16_t ip_identification) {
  if (c.ip_version == wire::IpVersion::v6) {
    wire::Ipv6Header ip;
    ip.traffic_class = uint8_t((req_ip[0] << 4) | (req_ip[1] >> 4));
    ip.payload_length = uint16_t(icmp_length);
    ip.next_header = ip_proto_icmpv6;
    ip.hop_limit = 64;
    ip.src = wire::IpAddress::from_v6_bytes(req_ip + 24);
    ip.dst = wire::IpAddress::from_v6_bytes(req_ip + 8);
    return wire::write_ipv6(out, ip);
  }
  wire::Ipv4Header ip;
  ip.tos = req_ip[1];
  ip.total_length = uint16_t(wire::ipv4_min_header_size + icmp_length);
  ip.identification = ip_identification;
  ip.dont_fragment = false;
  ip.ttl = 64;
  ip.protocol = wire::ip_proto_icmp;
  ip.src = wire::load_be32(req_ip + 16);
  ip.dst = wire::load_be32(req_ip + 12);
  return wire::write_ipv4(out, ip);
}

}  // namespace

size_t write_icmp_echo_reply(std::span<const uint8_t> request, const Classification& c,
                             const wire::MacAddress& our_mac, uint16_t ip_identification, std::span<uint8_t> out) {
  const bool v6 = c.ip_version == wire::IpVersion::v6;
  const uint8_t* req_ip = request.data() + c.l3_offset;
  const size_t icmp_length = c.l3_end - c.l4_offset;
  const size_t l3 = c.eth.size();
  const size_t size = l3 + (v6 ? wire::ipv6_header_size : wire::ipv4_min_header_size) + icmp_length;
  if (size > out.size()) return 0;

  wire::EthernetHeader eth;
  eth.dst = c.eth.src;
  eth.src = our_mac;
  eth.has_vlan = c.eth.has_vlan;
  eth.vlan_tci = c.eth.vlan_tci;
  eth.ethertype = v6 ? wire::ethertype_ipv6 : wire::ethertype_ipv4;
  wire::write_ethernet(out.data(), eth);
  const size_t l4 = l3 + write_reply_ip(out.data() + l3, req_ip, c, icmp_length, ip_identification);

  uint8_t* icmp = out.data() + l4;
  std::memcpy(icmp, request.data() + c.l4_offset, icmp_length);
  icmp[0] = v6 ? icmpv6_type_echo_reply : icmp_type_echo_reply;
  icmp[1] = 0;
  wire::store_be16(icmp + 2, 0);
  const uint16_t sum = v6 ? icmpv6_checksum(wire::IpAddress::from_v6_bytes(req_ip + 24),
                                            wire::IpAddress::from_v6_bytes(req_ip + 8), icmp, icmp_length)
                          : wire::internet_checksum(icmp, icmp_length);
  wire::store_be16(icmp + 2, sum);
  return size;
}

size_t IcmpEchoResponder::on_frame(std::span<const uint8_t> request, const Classification& c,
                                   std::span<uint8_t> out) {
  const size_t n = write_icmp_echo_reply(request, c, our_mac_, next_identification_,
                                         out.first(std::min(out.size(), max_reply_size_)));
  if (n == 0) {
    ++counters_.icmp_echo_too_large;
    return 0;
  }
  ++next_identification_;
  ++counters_.icmp_echo_replied;
  return n;
}

}  // namespace uroce::emulator::net
