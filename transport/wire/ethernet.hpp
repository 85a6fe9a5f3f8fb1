// Ethernet II with up to two VLAN tags (802.1Q, or QinQ: an 802.1ad service tag outside a customer tag),
// and ARP for IPv4 over Ethernet.
#pragma once

#include <cstdint>

#include "transport/wire/address.hpp"

namespace uroce::wire {

inline constexpr uint16_t ethertype_ipv4 = 0x0800;
inline constexpr uint16_t ethertype_arp = 0x0806;
inline constexpr uint16_t ethertype_vlan = 0x8100;          // 802.1Q customer tag (C-tag)
inline constexpr uint16_t ethertype_service_vlan = 0x88a8;  // 802.1ad service tag (S-tag)
inline constexpr uint16_t ethertype_qinq_legacy = 0x9100;   // the S-tag of switches from before 802.1ad
inline constexpr uint16_t ethertype_ipv6 = 0x86dd;

// A tag protocol identifier this parser reads a VLAN tag after (the ones Wireshark decodes by default).
constexpr bool is_vlan_tpid(uint16_t type) {
  return type == ethertype_vlan || type == ethertype_service_vlan || type == ethertype_qinq_legacy;
}

inline constexpr unsigned ethernet_header_size = 14;
inline constexpr unsigned vlan_tag_size = 4;

// The tag nearest the payload is the VLAN (has_vlan, vlan_tci): the one a host's VLAN device takes, whose
// priority (PCP) a RoCE NIC sets from the service level. A QinQ frame also has an outer tag, its provider's
// service VLAN (has_outer_vlan), which a host port never sends: captures of a provider's links have it.
// (The tag fields sit together, so that the parser clears them in a store or two.)
struct EthernetHeader {
  MacAddress dst;
  MacAddress src;
  bool has_vlan = false;
  bool has_outer_vlan = false;          // QinQ: a tag before the one above (only with has_vlan)
  uint16_t vlan_tci = 0;  // PCP (3) | DEI (1) | VID (12); valid when has_vlan
  uint16_t vlan_tpid = ethertype_vlan;  // the tag's protocol identifier (0x88a8 for a lone S-tag)
  uint16_t outer_vlan_tci = 0;
  uint16_t outer_vlan_tpid = ethertype_service_vlan;
  uint16_t ethertype = 0; // of the payload, after the tags if there are any

  uint16_t vlan_id() const { return vlan_tci & 0x0fff; }
  uint8_t vlan_pcp() const { return uint8_t(vlan_tci >> 13); }
  uint16_t outer_vlan_id() const { return outer_vlan_tci & 0x0fff; }
  uint8_t outer_vlan_pcp() const { return uint8_t(outer_vlan_tci >> 13); }
  unsigned size() const {
    return ethernet_header_size + (has_vlan ? vlan_tag_size * (has_outer_vlan ? 2 : 1) : 0);
  }
};

// Writes the header (with its tags); returns its size. `out` must hold size() bytes.
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
