// The service level rdma_cm gives a RoCE path, the way Linux computes it for a RoCE NIC (ConnectX) on a VLAN
// device (drivers/infiniband/core/cma.c, iboe_tos_to_sl): the ID's TOS becomes a Linux packet priority
// (net/ipv4/route.c's rt_tos2priority), and the VLAN device's egress QoS map (`ip link add ... type vlan
// egress-qos-map 0:3`) turns that priority into the 802.1p priority. The NIC then sends the connection's
// frames with that SL as their PCP. Off a VLAN (and with no traffic classes), Linux gives SL 0.
#pragma once

#include <array>
#include <cstdint>

namespace uroce::cm {

// Priority (0-7) -> PCP (0-7); all zero, as a new VLAN device has it, maps everything to 0.
using EgressQosMap = std::array<uint8_t, 8>;

// Linux's rt_tos2priority: only the old RFC 1349 TOS bits (tos & 0x1e) count. Minimum cost and plain
// (0x00, 0x02) are best effort (0), maximum reliability (0x04) too, maximum throughput (0x08) bulk (2),
// minimum delay (0x10) interactive (6), both of those (0x18) interactive bulk (4). So a DSCP counts only
// through its two lowest bits: AF31 (DSCP 26, TOS 0x68) is bulk, EF (DSCP 46, TOS 0xb8) interactive bulk.
inline constexpr uint8_t priority_of_tos(uint8_t tos) {
  constexpr std::array<uint8_t, 4> by_delay_and_throughput = {0, 2, 6, 4};
  return by_delay_and_throughput[(tos >> 3) & 3];
}

inline constexpr uint8_t service_level_of_tos(uint8_t tos, const EgressQosMap& map) {
  return map[priority_of_tos(tos)] & 7;
}

}  // namespace uroce::cm
