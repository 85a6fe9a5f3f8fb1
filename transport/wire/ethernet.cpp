#include "transport/wire/ethernet.hpp"

#include <cstring>

#include "transport/wire/bytes.hpp"

namespace uroce::wire {

unsigned write_ethernet(uint8_t* out, const EthernetHeader& h) {
  std::memcpy(out, h.dst.bytes.data(), 6);
  std::memcpy(out + 6, h.src.bytes.data(), 6);
  unsigned off = 12;
  if (h.has_vlan && h.has_outer_vlan) {
    store_be16(out + off, h.outer_vlan_tpid);
    store_be16(out + off + 2, h.outer_vlan_tci);
    off += vlan_tag_size;
  }
  if (h.has_vlan) {
    store_be16(out + off, h.vlan_tpid);
    store_be16(out + off + 2, h.vlan_tci);
    off += vlan_tag_size;
  }
  store_be16(out + off, h.ethertype);
  return off + 2;
}

unsigned write_arp(uint8_t* out, const ArpPacket& a) {
  store_be16(out, 1);               // hardware type: Ethernet
  store_be16(out + 2, ethertype_ipv4);
  out[4] = 6;
  out[5] = 4;
  store_be16(out + 6, a.operation);
  std::memcpy(out + 8, a.sender_mac.bytes.data(), 6);
  store_be32(out + 14, a.sender_ip);
  std::memcpy(out + 18, a.target_mac.bytes.data(), 6);
  store_be32(out + 24, a.target_ip);
  return arp_ipv4_size;
}

bool read_arp(const uint8_t* p, ArpPacket& a) {
  if (load_be16(p) != 1 || load_be16(p + 2) != ethertype_ipv4 || p[4] != 6 || p[5] != 4) return false;
  a.operation = load_be16(p + 6);
  std::memcpy(a.sender_mac.bytes.data(), p + 8, 6);
  a.sender_ip = load_be32(p + 14);
  std::memcpy(a.target_mac.bytes.data(), p + 18, 6);
  a.target_ip = load_be32(p + 24);
  return true;
}

}  // namespace uroce::wire
