#include "emulator/net/drop_reason.hpp"

namespace uroce::emulator::net {

std::string_view to_string(DropReason r) {
  switch (r) {
    case DropReason::not_for_our_mac: return "not_for_our_mac";
    case DropReason::other_vlan: return "other_vlan";
    case DropReason::not_for_our_ip: return "not_for_our_ip";
    case DropReason::unsupported_ethertype: return "unsupported_ethertype";
    case DropReason::unsupported_arp: return "unsupported_arp";
    case DropReason::other_ip_protocol: return "other_ip_protocol";
    case DropReason::other_udp_port: return "other_udp_port";
    case DropReason::other_icmp_type: return "other_icmp_type";
    case DropReason::ipv4_fragment: return "ipv4_fragment";
    case DropReason::other_icmpv6_type: return "other_icmpv6_type";
    case DropReason::igmp_not_a_query: return "igmp_not_a_query";
    case DropReason::mld_not_a_query: return "mld_not_a_query";
    case DropReason::other_mac_control: return "other_mac_control";
    case DropReason::truncated_ethernet: return "truncated_ethernet";
    case DropReason::truncated_arp: return "truncated_arp";
    case DropReason::truncated_ip: return "truncated_ip";
    case DropReason::bad_ip_version: return "bad_ip_version";
    case DropReason::bad_ip_header_length: return "bad_ip_header_length";
    case DropReason::ip_length_mismatch: return "ip_length_mismatch";
    case DropReason::bad_ip_checksum: return "bad_ip_checksum";
    case DropReason::truncated_udp: return "truncated_udp";
    case DropReason::udp_length_mismatch: return "udp_length_mismatch";
    case DropReason::truncated_icmp: return "truncated_icmp";
    case DropReason::bad_icmp_checksum: return "bad_icmp_checksum";
    case DropReason::bad_nd_hop_limit: return "bad_nd_hop_limit";
    case DropReason::bad_nd_message: return "bad_nd_message";
    case DropReason::truncated_igmp: return "truncated_igmp";
    case DropReason::bad_igmp_checksum: return "bad_igmp_checksum";
    case DropReason::bad_igmp_message: return "bad_igmp_message";
    case DropReason::bad_hop_by_hop: return "bad_hop_by_hop";
    case DropReason::bad_mld_message: return "bad_mld_message";
    case DropReason::bad_router_advertisement: return "bad_router_advertisement";
    case DropReason::truncated_mac_control: return "truncated_mac_control";
  }
  return "unknown";
}

bool is_malformed(DropReason r) { return r >= DropReason::truncated_ethernet; }

}  // namespace uroce::emulator::net
