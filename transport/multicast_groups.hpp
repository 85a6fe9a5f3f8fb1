// The multicast groups of a device: each group (a multicast GID, i.e. an IP group address) and the UD QPs
// attached to it, within the device's limits. Only the bookkeeping; Device checks the QPs and delivers.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "transport/device.hpp"
#include "transport/wire/address.hpp"

namespace uroce::transport {

class MulticastGroups {
 public:
  explicit MulticastGroups(const DeviceLimits& limits) : limits_(limits) {}

  enum class Attach : uint8_t { attached, already_attached, full };
  // `group` must be a multicast address (the caller checks). full: a limit would be exceeded.
  Attach attach(const wire::IpAddress& group, uint32_t qpn);
  bool detach(const wire::IpAddress& group, uint32_t qpn);  // false if the QP is not attached to it
  void detach_everywhere(uint32_t qpn);

  // The QPs attached to `group`, in attach order; nullptr when it has none.
  const std::vector<uint32_t>* members(const wire::IpAddress& group) const;
  std::vector<wire::IpAddress> groups() const;  // in address order
  bool empty() const { return groups_.empty(); }
  uint64_t generation() const { return generation_; }

 private:
  struct AddressLess {
    bool operator()(const wire::IpAddress& a, const wire::IpAddress& b) const { return a.bytes < b.bytes; }
  };
  using Map = std::map<wire::IpAddress, std::vector<uint32_t>, AddressLess>;

  // Takes `qpn` out of the group's members (it must be there); a group left empty is removed.
  Map::iterator remove_member(Map::iterator group, std::vector<uint32_t>::iterator member);

  DeviceLimits limits_;
  Map groups_;                 // never holds a group without members
  uint32_t attachments_ = 0;   // members summed over every group
  uint64_t generation_ = 0;    // bumped whenever a group appears or disappears
};

}  // namespace uroce::transport
