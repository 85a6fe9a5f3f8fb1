// The Ethernet header (with the port's 802.1Q tag, if it has one) of a frame the port originates: ARP and
// neighbour discovery build theirs the same way.
#pragma once

#include <cstdint>
#include <optional>

#include "transport/wire/ethernet.hpp"

namespace uroce::emulator::net {

// Writes the header at `out`; returns where the L3 header starts.
inline unsigned write_ethernet_out(uint8_t* out, const wire::MacAddress& dst, const wire::MacAddress& src,
                                   std::optional<uint16_t> vlan_tci, uint16_t ethertype) {
  wire::EthernetHeader eth;
  eth.dst = dst;
  eth.src = src;
  eth.has_vlan = vlan_tci.has_value();
  eth.vlan_tci = vlan_tci.value_or(0);
  eth.ethertype = ethertype;
  return wire::write_ethernet(out, eth);
}

}  // namespace uroce::emulator::net
