// Ethernet II with an optional 802.1Q tag, and ARP for IPv4 over Ethernet.
#pragma once

#include <cstdint>

#include "transport/wire/address.hpp"

namespace uroce::wire {

inline constexpr uint16_t ethertype_ipv4 = 0x0800;
inline constexpr uint16_t ethertype_arp = 0x0806;
inline constexpr uint16_t ethertype_vlan = 0x8100;
inline constexpr uint16_t ethertype_ipv6 = 0x86dd;

inline constexpr unsigned ethernet_header_size = 14;
inline constexpr unsigned vlan_tag_size = 4;

struct EthernetHeader {
  MacAddress dst;
  MacAddress src;
  bool has_vlan = false;
  uint16_t vlan_tci = 0;  // PCP (3) | DEI (1) | VID (12); valid when has_vlan
  uint16_t ethertype = 0; // of the payload, after the tag if there is one

  uint16_t vlan_id() const { return vlan_tci & 0x0fff; }
  uint8_t vlan_pcp() const { return uint8_t(vlan_tci >> 13); }
  unsigned size() const { return ethernet_header_size + (has_vlan ? vlan_tag_size : 0); }
};

// Writes the header (with the tag when has_vlan); returns its size. `out` must hold size() bytes.
unsigned write_ethernet(uint8_t* out, const EthernetHeader& h);

inline constexpr unsigned arp_ipv4_size = 28;
inline constexpr uint16_t arp_op_request = 1;
inline constexpr uint16_t arp_op_reply = 2;

// ARP for IPv4 over Ethernet (htype 1, ptype 0x0800, hlen 6, plen 4); other ARP flavours are reported as
// unsupported by the parser.
struct ArpPacket {
  uint16_t operation = 0;
  MacAddress sender_mac;
  uint32_t sender_ip = 0;  // host order
  MacAddress target_mac;
  uint32_t target_ip = 0;  // host order
};

unsigned write_arp(uint8_t* out, const ArpPacket& a);
// Decodes an ARP body of at least arp_ipv4_size bytes; false if it is not IPv4-over-Ethernet ARP.
bool read_arp(const uint8_t* p, ArpPacket& a);

}  // namespace uroce::wire
