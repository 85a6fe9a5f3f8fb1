// How a port turns what the transport sends (OutPacket) into the frame spec the wire codec builds: the one
// conversion every port uses (the daemon's DPDK ports, the simulation network, the benchmark's wire).
#pragma once

#include <cstdint>
#include <optional>

#include "transport/packet_io.hpp"
#include "transport/wire/address.hpp"
#include "transport/wire/build.hpp"

namespace uroce::transport {

struct PortAddressing {
  wire::IpAddress src_ip;
  wire::MacAddress src_mac;
  wire::MacAddress dst_mac;
  uint16_t ip_identification = 0;
  // The port's 802.1Q VLAN ID when it sits on one (0: on none, but its frames carry a priority tag). Its
  // RoCE frames then carry the tag with the address vector's service level as their priority (PCP): in
  // RoCE the SL is the 802.1p priority, as ConnectX maps it, and PFC pauses by that priority.
  std::optional<uint16_t> vlan_id;
};

// IPv4 when both addresses are v4-mapped, IPv6 otherwise. The AddressVector gives the hop limit (IPv4
// TTL), traffic class (IPv4 TOS), flow label and, on a VLAN, priority (service level); the ECN bits are ECT(0) for ecn_capable packets and
// Not-ECT otherwise, whatever the traffic class said. packet.destination must be set.
wire::FrameSpec frame_spec_for(const OutPacket& packet, const PortAddressing& port);

}  // namespace uroce::transport
