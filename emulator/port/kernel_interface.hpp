// The MTU and link state of a kernel network interface (what an af_packet or tap port really has).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace uroce::emulator::port {

// DPDK 22.11's af_packet and tap PMDs neither report their interface's MTU (ethdev says 1500) nor accept
// one above 1500 (they declare a 1518/1522-byte maximum frame), although the kernel interface decides what
// passes. The port therefore asks the kernel directly (SIOCGIFMTU / SIOCSIFMTU, what the PMDs use too).
std::optional<uint16_t> kernel_mtu(const std::string& interface);
// Throws PortError with the kernel's reason.
void set_kernel_mtu(const std::string& interface, uint16_t mtu);

// Whether the interface is up and has a carrier, as `ethtool IF` says "Link detected" (ETHTOOL_GLINK), which
// is what rxe takes for its port's state (netif_running and netif_carrier_ok); nullopt if it cannot be
// asked. DPDK 22.11's af_packet PMD says "up" from its start on, whatever happens to the interface: a veth
// whose peer went down, a NIC whose cable was pulled. The kernel knows.
//
// Not IFF_RUNNING (SIOCGIFFLAGS): that follows the operational state, which the kernel's linkwatch updates
// up to a second after the carrier. It is the answer only for a driver without ETHTOOL_GLINK.
std::optional<bool> kernel_link_up(const std::string& interface);

}  // namespace uroce::emulator::port
