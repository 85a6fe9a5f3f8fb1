// Which of the port's GIDs a connection to `destination` goes out from, as the kernel picks a source
// address: the same family, and for IPv6 the same scope (a link-local peer is reached from the port's
// fe80:: address, any other from a configured one). rdma_cm's address resolution and the CM's MADs both
// use it, so that a connection's REQ and its QP's traffic carry the same source.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "transport/wire/address.hpp"

namespace uroce::emulator {

bool is_link_local(const wire::IpAddress& a);  // fe80::/10
bool is_loopback(const wire::IpAddress& a);    // 127.0.0.0/8 and ::1
// 0.0.0.0 and :: (an ID bound to either takes the port's address when it resolves a destination).
bool is_wildcard(const wire::IpAddress& a);

// The index in `gids` of the source for `destination`, or nullopt if the port has no address of its
// family. A GID of the right scope is preferred; failing that, the first of the family.
std::optional<size_t> source_gid_index(const std::vector<wire::IpAddress>& gids, const wire::IpAddress& destination);

}  // namespace uroce::emulator
