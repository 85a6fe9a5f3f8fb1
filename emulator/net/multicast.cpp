#include "emulator/net/multicast.hpp"

#include "emulator/net/nd_frames.hpp"

namespace uroce::emulator::net {

wire::MacAddress ipv4_multicast_mac(uint32_t group) {
  return {{0x01, 0x00, 0x5e, uint8_t((group >> 16) & 0x7f), uint8_t(group >> 8), uint8_t(group)}};
}

wire::MacAddress multicast_mac_of(const wire::IpAddress& group) {
  return group.is_v4() ? ipv4_multicast_mac(group.v4()) : multicast_mac(group);
}

}  // namespace uroce::emulator::net
