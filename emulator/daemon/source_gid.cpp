#include "emulator/daemon/source_gid.hpp"

namespace uroce::emulator {

bool is_link_local(const wire::IpAddress& a) { return !a.is_v4() && a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }

bool is_loopback(const wire::IpAddress& a) {
  if (a.is_v4()) return (a.v4() >> 24) == 127;
  wire::IpAddress one;
  one.bytes[15] = 1;
  return a == one;
}

bool is_wildcard(const wire::IpAddress& a) { return a == wire::IpAddress{} || a == wire::IpAddress::from_v4(0); }

std::optional<size_t> source_gid_index(const std::vector<wire::IpAddress>& gids, const wire::IpAddress& destination) {
  std::optional<size_t> same_family;
  for (size_t i = 0; i < gids.size(); ++i) {
    if (gids[i].is_zero() || gids[i].is_v4() != destination.is_v4()) continue;  // (an empty entry: no source)
    if (destination.is_v4() || is_link_local(gids[i]) == is_link_local(destination)) return i;
    if (!same_family) same_family = i;
  }
  return same_family;
}

}  // namespace uroce::emulator
