// Who the port is on the wire: the identity every check ("is this for us?") and every frame we originate
// uses.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

struct PortAddresses {
  wire::MacAddress mac;
  // The port's addresses (its GID table): IPv4 held v4-mapped, as wire::IpAddress does.
  std::vector<wire::IpAddress> ips;
  // The 802.1Q tag (PCP | DEI | VID) of frames the port originates (ARP requests, gratuitous ARP), when the
  // port sits on a VLAN (uroced --vlan); classify() then takes only frames of that VID. Replies copy the
  // tag of the frame they answer (its priority included).
  std::optional<uint16_t> vlan_tci;
  // The multicast groups the port has members for (QPs attached with ibv_attach_mcast or joined through
  // rdma_join_multicast): IPv4 groups v4-mapped, IPv6 ones as they are. The engine keeps it up to date;
  // classify() takes RoCE sent to these groups and their multicast MACs.
  std::vector<wire::IpAddress> groups;

  bool owns_v4(uint32_t ip) const;              // host order
  bool owns_v6(const uint8_t* sixteen_bytes) const;  // a real IPv6 address (never matches v4-mapped)
  bool owns(const wire::IpAddress& ip) const;        // either family, as held in `ips`
  std::vector<uint32_t> ipv4_addresses() const;
  bool has_group(const wire::IpAddress& g) const;
  bool has_ipv4_group() const;  // any v4-mapped entry in `groups`: IGMP's all-hosts group concerns us
};

}  // namespace uroce::emulator::net
