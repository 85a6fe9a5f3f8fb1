#include "emulator/net/membership_timers.hpp"

#include <algorithm>

namespace uroce::emulator::net {

uint64_t seed_from_mac(const wire::MacAddress& mac) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint8_t b : mac.bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

void MembershipTimers::join(const wire::IpAddress& group, Nanos now) {
  if (is_member(group)) return;
  groups_.push_back(Group{.address = group, .report_at = never, .repeat_pending = true});
  report_no_later_than(groups_.back(), now);
}

void MembershipTimers::leave(const wire::IpAddress& group, Nanos now) {
  const size_t i = index_of(group);
  if (i == groups_.size()) return;
  groups_.erase(groups_.begin() + std::ptrdiff_t(i));  // with any report still due: it would undo the leave
  if (!sends_) return;
  leaves_.push_back(group);
  next_deadline_ = std::min(next_deadline_, now);
}

void MembershipTimers::on_query(const std::optional<wire::IpAddress>& group, Nanos max_response, Nanos now) {
  for (Group& g : groups_) {
    if (group && *group != g.address) continue;
    std::uniform_int_distribution<Nanos> delay(0, max_response);
    report_no_later_than(g, now + delay(rng_));
  }
}

void MembershipTimers::poll(Nanos now, MembershipDue& due) {
  due.clear();
  if (now < next_deadline_) return;
  due.leaves.swap(leaves_);
  Nanos next = never;
  for (Group& g : groups_) {
    if (g.report_at <= now) {
      due.reports.push_back(g.address);
      g.report_at = never;
      if (g.repeat_pending) {
        g.repeat_pending = false;
        g.report_at = now + unsolicited_report_interval;
      }
    }
    next = std::min(next, g.report_at);
  }
  next_deadline_ = next;
}

size_t MembershipTimers::index_of(const wire::IpAddress& group) const {
  size_t i = 0;
  while (i < groups_.size() && groups_[i].address != group) ++i;
  return i;
}

void MembershipTimers::report_no_later_than(Group& g, Nanos at) {
  if (!sends_) return;
  g.report_at = std::min(g.report_at, at);
  next_deadline_ = std::min(next_deadline_, g.report_at);
}

}  // namespace uroce::emulator::net
