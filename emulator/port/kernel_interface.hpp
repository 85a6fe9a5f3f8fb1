// The MTU of a kernel network interface (what an af_packet or tap port really has).
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

}  // namespace uroce::emulator::port
