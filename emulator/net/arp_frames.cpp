#include "emulator/net/arp_frames.hpp"

#include "emulator/net/ethernet_out.hpp"

namespace uroce::emulator::net {

size_t write_arp_frame(std::span<uint8_t> out, const wire::MacAddress& eth_dst, const wire::MacAddress& eth_src,
                       std::optional<uint16_t> vlan_tci, const wire::ArpPacket& arp) {
  const size_t size = arp_frame_size(vlan_tci.has_value());
  if (out.size() < size) return 0;
  const unsigned l3 = write_ethernet_out(out.data(), eth_dst, eth_src, vlan_tci, wire::ethertype_arp);
  wire::write_arp(out.data() + l3, arp);
  return size;
}

size_t write_arp_request(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t sender_ip,
                         uint32_t target_ip, std::optional<uint16_t> vlan_tci, const wire::MacAddress& eth_dst) {
  wire::ArpPacket a;
  a.operation = wire::arp_op_request;
  a.sender_mac = our_mac;
  a.sender_ip = sender_ip;
  a.target_mac = {};  // unknown: that is the question (RFC 826 leaves it unspecified; zero is customary)
  a.target_ip = target_ip;
  return write_arp_frame(out, eth_dst, our_mac, vlan_tci, a);
}

size_t write_arp_reply(std::span<uint8_t> out, const wire::ArpPacket& request, const wire::MacAddress& our_mac,
                       std::optional<uint16_t> vlan_tci) {
  wire::ArpPacket a;
  a.operation = wire::arp_op_reply;
  a.sender_mac = our_mac;
  a.sender_ip = request.target_ip;
  a.target_mac = request.sender_mac;
  a.target_ip = request.sender_ip;
  return write_arp_frame(out, request.sender_mac, our_mac, vlan_tci, a);
}

size_t write_gratuitous_arp(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t ip,
                            std::optional<uint16_t> vlan_tci) {
  return write_arp_request(out, our_mac, ip, ip, vlan_tci);
}

}  // namespace uroce::emulator::net
