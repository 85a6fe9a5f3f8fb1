#include "emulator/net/igmp_frames.hpp"

#include <cstring>

#include "emulator/net/ethernet_out.hpp"
#include "emulator/net/multicast.hpp"
#include "transport/wire/bytes.hpp"

namespace uroce::emulator::net {

namespace {

constexpr Nanos tenth_of_a_second = milliseconds(100);
// RFC 2236 §4: a v1 router's queries carry 0, which hosts must read as 100 tenths (10 s).
constexpr unsigned igmp_v1_max_response_tenths = 100;
// Precedence "internetwork control", as Linux sends IGMP: switches that queue by precedence keep
// membership traffic ahead of the data it steers.
constexpr uint8_t igmp_tos = 0xc0;
// RFC 2113: type 148 (copied, class 0, number 20), length 4, value 0 ("routers shall examine the packet").
constexpr uint8_t router_alert_option[4] = {0x94, 0x04, 0x00, 0x00};

// RFC 3376 §4.1.1: below 128 the code is the time; from 128 on it is a float (1 | exp(3) | mant(4)).
unsigned v3_max_response_tenths(uint8_t code) {
  if (code < 128) return code;
  const unsigned exp = (code >> 4) & 0x7;
  const unsigned mant = code & 0x0f;
  return (mant | 0x10) << (exp + 3);
}

// The IPv4 header of an IGMP message we send, 24 bytes. wire::write_ipv4 builds option-less headers only.
void write_igmp_ip(uint8_t* p, uint32_t src, uint32_t dst) {
  p[0] = uint8_t(0x40 | igmp_ip_header_size / 4);
  p[1] = igmp_tos;
  wire::store_be16(p + 2, uint16_t(igmp_ip_header_size + igmp_v2_message_size));
  wire::store_be16(p + 4, 0);       // DF set and never fragmented: no identification needed (RFC 6864 §4.1)
  wire::store_be16(p + 6, 0x4000);  // DF
  p[8] = 1;                         // TTL 1: IGMP never leaves the link (RFC 2236 §2)
  p[9] = ip_proto_igmp;
  wire::store_be16(p + 10, 0);
  wire::store_be32(p + 12, src);
  wire::store_be32(p + 16, dst);
  std::memcpy(p + 20, router_alert_option, sizeof router_alert_option);
  wire::store_be16(p + 10, wire::internet_checksum(p, igmp_ip_header_size));
}

size_t write_igmp_frame(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t src_ip, uint32_t ip_dst,
                        uint8_t type, uint32_t group, std::optional<uint16_t> vlan_tci) {
  const size_t size = igmp_frame_size(vlan_tci.has_value());
  if (out.size() < size) return 0;
  const unsigned l3 =
      write_ethernet_out(out.data(), ipv4_multicast_mac(ip_dst), our_mac, vlan_tci, wire::ethertype_ipv4);
  write_igmp_ip(out.data() + l3, src_ip, ip_dst);
  uint8_t* igmp = out.data() + l3 + igmp_ip_header_size;
  igmp[0] = type;
  igmp[1] = 0;  // max resp time: meaningful in queries only
  wire::store_be16(igmp + 2, 0);
  wire::store_be32(igmp + 4, group);
  wire::store_be16(igmp + 2, wire::internet_checksum(igmp, igmp_v2_message_size));
  return size;
}

}  // namespace

std::optional<DropReason> parse_igmp_query(const uint8_t* igmp, size_t length, IgmpQuery& out) {
  if (length < igmp_v2_message_size) return DropReason::truncated_igmp;
  if (wire::internet_checksum(igmp, length) != 0) return DropReason::bad_igmp_checksum;
  if (igmp[0] != igmp_membership_query) return DropReason::igmp_not_a_query;
  unsigned tenths = 0;
  if (length == igmp_v2_message_size) {
    tenths = igmp[1] == 0 ? igmp_v1_max_response_tenths : igmp[1];
  } else if (length >= igmp_v3_query_min_size) {
    const size_t sources = wire::load_be16(igmp + 10);
    if (sources > (length - igmp_v3_query_min_size) / 4) return DropReason::bad_igmp_message;
    tenths = v3_max_response_tenths(igmp[1]);
  } else {
    return DropReason::bad_igmp_message;  // 9 to 11 bytes: RFC 3376 §7.1 says to ignore it
  }
  out.group = wire::load_be32(igmp + 4);
  out.max_response = Nanos(tenths) * tenth_of_a_second;
  return std::nullopt;
}

size_t write_igmp_report(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t src_ip, uint32_t group,
                         std::optional<uint16_t> vlan_tci) {
  return write_igmp_frame(out, our_mac, src_ip, group, igmp_v2_membership_report, group, vlan_tci);
}

size_t write_igmp_leave(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t src_ip, uint32_t group,
                        std::optional<uint16_t> vlan_tci) {
  return write_igmp_frame(out, our_mac, src_ip, igmp_all_routers, igmp_leave_group, group, vlan_tci);
}

}  // namespace uroce::emulator::net
