#include "emulator/net/port_addresses.hpp"

#include <cstring>

namespace uroce::emulator::net {

// Linear scans: a port has a handful of addresses, and a scan of a few 16-byte entries is cheaper than
// any hashing on the receive path.
bool PortAddresses::owns_v4(uint32_t ip) const {
  for (const wire::IpAddress& a : ips) {
    if (a.is_v4() && a.v4() == ip) return true;
  }
  return false;
}

bool PortAddresses::owns_v6(const uint8_t* p) const {
  for (const wire::IpAddress& a : ips) {
    if (!a.is_v4() && std::memcmp(a.bytes.data(), p, 16) == 0) return true;
  }
  return false;
}

bool PortAddresses::owns(const wire::IpAddress& ip) const {
  for (const wire::IpAddress& a : ips) {
    if (a == ip) return true;
  }
  return false;
}

std::vector<uint32_t> PortAddresses::ipv4_addresses() const {
  std::vector<uint32_t> out;
  for (const wire::IpAddress& a : ips) {
    if (a.is_v4()) out.push_back(a.v4());
  }
  return out;
}

bool PortAddresses::has_group(const wire::IpAddress& g) const {
  for (const wire::IpAddress& a : groups) {
    if (a == g) return true;
  }
  return false;
}

bool PortAddresses::has_ipv4_group() const {
  for (const wire::IpAddress& a : groups) {
    if (a.is_v4()) return true;
  }
  return false;
}

}  // namespace uroce::emulator::net
