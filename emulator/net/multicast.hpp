// Which Ethernet address an IP multicast group is sent to: the port listens on these MACs for the groups it
// has members for (classify.cpp) and sends its own group traffic (IGMP reports, RoCE UD multicast) to them.
//
// The mappings drop bits (IPv4 keeps 23 of the group's 28, IPv6 32 of 112), so several groups share one MAC:
// a frame taken for its MAC is still judged by its destination IP address.
#pragma once

#include <cstdint>

#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// 01:00:5e + the group's low 23 bits (RFC 1112 §6.4). `group_host_order` should be in 224.0.0.0/4.
wire::MacAddress ipv4_multicast_mac(uint32_t group_host_order);

// The MAC of either family's group: the mapping above for a v4-mapped group, 33:33 + the last four bytes
// (RFC 2464 §7, nd_frames.hpp's multicast_mac) for an IPv6 one.
wire::MacAddress multicast_mac_of(const wire::IpAddress& group);

}  // namespace uroce::emulator::net
