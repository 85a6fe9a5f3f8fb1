#include "transport/multicast_groups.hpp"

#include <algorithm>

namespace uroce::transport {

MulticastGroups::Attach MulticastGroups::attach(const wire::IpAddress& group, uint32_t qpn) {
  auto it = groups_.find(group);
  const bool new_group = it == groups_.end();
  if (!new_group && std::ranges::find(it->second, qpn) != it->second.end()) return Attach::already_attached;
  const size_t members = new_group ? 0 : it->second.size();
  if ((new_group && groups_.size() >= limits_.max_mcast_grp) || members >= limits_.max_mcast_qp_attach ||
      attachments_ >= limits_.max_total_mcast_qp_attach) {
    return Attach::full;
  }
  if (new_group) {
    it = groups_.try_emplace(group).first;
    ++generation_;
  }
  it->second.push_back(qpn);
  ++attachments_;
  return Attach::attached;
}

bool MulticastGroups::detach(const wire::IpAddress& group, uint32_t qpn) {
  const auto it = groups_.find(group);
  if (it == groups_.end()) return false;
  const auto member = std::ranges::find(it->second, qpn);
  if (member == it->second.end()) return false;
  remove_member(it, member);
  return true;
}

void MulticastGroups::detach_everywhere(uint32_t qpn) {
  for (auto it = groups_.begin(); it != groups_.end();) {
    const auto member = std::ranges::find(it->second, qpn);
    it = member == it->second.end() ? std::next(it) : remove_member(it, member);
  }
}

MulticastGroups::Map::iterator MulticastGroups::remove_member(Map::iterator group,
                                                              std::vector<uint32_t>::iterator member) {
  group->second.erase(member);
  --attachments_;
  if (!group->second.empty()) return std::next(group);
  ++generation_;
  return groups_.erase(group);
}

const std::vector<uint32_t>* MulticastGroups::members(const wire::IpAddress& group) const {
  const auto it = groups_.find(group);
  return it == groups_.end() ? nullptr : &it->second;
}

std::vector<wire::IpAddress> MulticastGroups::groups() const {
  std::vector<wire::IpAddress> out;
  out.reserve(groups_.size());
  for (const auto& [group, members] : groups_) out.push_back(group);
  return out;
}

}  // namespace uroce::transport
