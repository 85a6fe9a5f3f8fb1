// The ports rdma_cm gives an ID bound to port 0. Linux's cma_alloc_any_port takes them from the network
// namespace's net.ipv4.ip_local_port_range (which serves IPv6 too), read at each bind, so an administrator
// who keeps fixed service ports out of that range keeps ephemeral IDs off them. uroced does the same with
// the namespace it runs in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace uroce::emulator {

struct PortRange {
  uint16_t low = 32768;  // Linux's defaults
  uint16_t high = 60999;
};

inline constexpr const char* kLocalPortRangeFile = "/proc/sys/net/ipv4/ip_local_port_range";

// "32768\t60999\n" as the sysctl prints it; nullopt unless two numbers with 1 <= low <= high <= 65535.
std::optional<PortRange> parse_port_range(std::string_view text);

// The range in `file`; Linux's defaults, with a warning once, if it cannot be read or parsed.
PortRange read_port_range(const std::string& file = kLocalPortRangeFile);

}  // namespace uroce::emulator
