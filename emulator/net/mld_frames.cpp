#include "emulator/net/mld_frames.hpp"

#include <cstring>

#include "emulator/net/ethernet_out.hpp"
#include "emulator/net/nd_frames.hpp"
#include "transport/wire/bytes.hpp"

namespace uroce::emulator::net {

namespace {

// What follows our IPv6 header: ICMPv6 next, length 0 (8 bytes), Router Alert for MLD (RFC 2711), and a
// PadN of no data bytes filling the header to its 8 bytes, as RFC 2710 §3 asks and Linux sends it.
constexpr uint8_t mld_hop_by_hop[mld_hop_by_hop_size] = {
    ip_proto_icmpv6, 0, ipv6_option_router_alert, 2, 0, router_alert_mld, ipv6_option_padn, 0};

// RFC 3810 §5.1.3: below 32768 the code is the delay in ms; from 32768 on it is a float (1 | exp(3) | mant(12)).
Nanos v2_max_response(uint16_t code) {
  if (code < 32768) return milliseconds(code);
  const unsigned exp = (code >> 12) & 0x7;
  const unsigned mant = code & 0x0fff;
  return milliseconds(uint64_t(mant | 0x1000) << (exp + 3));
}

wire::IpAddress all_routers_address() {  // ff02::2, where Dones go (RFC 2710 §4)
  wire::IpAddress a;
  a.bytes = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};
  return a;
}

size_t write_mld_frame(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src_ip,
                       const wire::IpAddress& ip_dst, uint8_t type, const wire::IpAddress& group,
                       std::optional<uint16_t> vlan_tci) {
  const size_t size = mld_frame_size(vlan_tci.has_value());
  if (out.size() < size) return 0;
  const unsigned l3 = write_ethernet_out(out.data(), multicast_mac(ip_dst), our_mac, vlan_tci, wire::ethertype_ipv6);
  wire::Ipv6Header ip;  // traffic class 0, as Linux sends MLD
  ip.payload_length = uint16_t(mld_hop_by_hop_size + mld_v1_message_size);
  ip.next_header = ipv6_next_header_hop_by_hop;
  ip.hop_limit = mld_hop_limit;
  ip.src = src_ip;
  ip.dst = ip_dst;
  const size_t hop_by_hop = l3 + wire::write_ipv6(out.data() + l3, ip);
  std::memcpy(out.data() + hop_by_hop, mld_hop_by_hop, mld_hop_by_hop_size);
  uint8_t* mld = out.data() + hop_by_hop + mld_hop_by_hop_size;
  std::memset(mld, 0, mld_v1_message_size);  // code, max response delay and reserved: zero from hosts
  mld[0] = type;
  std::memcpy(mld + 8, group.bytes.data(), 16);
  // The pseudo-header names ICMPv6 (58), not the Hop-by-Hop header the IPv6 header points to (RFC 8200 §8.1).
  wire::store_be16(mld + 2, icmpv6_checksum(src_ip, ip_dst, mld, mld_v1_message_size));
  return size;
}

}  // namespace

bool is_mld_type(uint8_t t) {
  return t == icmpv6_mld_query || t == icmpv6_mld_v1_report || t == icmpv6_mld_done || t == icmpv6_mld_v2_report;
}

std::optional<DropReason> parse_mld_query(const wire::IpAddress& src, const wire::IpAddress& dst, uint8_t hop_limit,
                                          bool router_alert, const uint8_t* icmp, size_t length, MldQuery& out) {
  if (length < 4) return DropReason::truncated_icmp;
  if (icmpv6_checksum(src, dst, icmp, length) != 0) return DropReason::bad_icmp_checksum;
  if (icmp[0] != icmpv6_mld_query) return DropReason::mld_not_a_query;
  if (length < mld_v1_message_size) return DropReason::truncated_icmp;
  // RFC 3810 §6.2 (and §5.1.14 for the source): a query failing any of these is dropped. Only a router on
  // the link may query, and only link-local addresses, hop limit 1 and the Router Alert make that sure.
  if (hop_limit != mld_hop_limit || !is_link_local(src) || !router_alert) return DropReason::bad_mld_message;
  const wire::IpAddress group = wire::IpAddress::from_v6_bytes(icmp + 8);
  if (!is_unspecified(group) && !is_multicast(group)) return DropReason::bad_mld_message;
  const uint16_t code = wire::load_be16(icmp + 4);
  Nanos max_response = 0;
  if (length == mld_v1_message_size) {
    max_response = milliseconds(code);
  } else if (length >= mld_v2_query_min_size) {
    const size_t sources = wire::load_be16(icmp + 26);
    if (sources > (length - mld_v2_query_min_size) / 16) return DropReason::bad_mld_message;
    max_response = v2_max_response(code);
  } else {
    return DropReason::bad_mld_message;  // 25 to 27 bytes: RFC 3810 §8.1 says to ignore it
  }
  out.group = group;
  out.max_response = max_response;
  return std::nullopt;
}

size_t write_mld_report(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src_ip,
                        const wire::IpAddress& group, std::optional<uint16_t> vlan_tci) {
  return write_mld_frame(out, our_mac, src_ip, group, icmpv6_mld_v1_report, group, vlan_tci);
}

size_t write_mld_done(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src_ip,
                      const wire::IpAddress& group, std::optional<uint16_t> vlan_tci) {
  return write_mld_frame(out, our_mac, src_ip, all_routers_address(), icmpv6_mld_done, group, vlan_tci);
}

}  // namespace uroce::emulator::net
