#include "emulator/net/igmp.hpp"

#include <algorithm>

namespace uroce::emulator::net {

namespace {

bool is_reportable_group(uint32_t group) { return (group >> 28) == 0xe && group != igmp_all_hosts; }

uint64_t seed_from(const wire::MacAddress& mac) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (uint8_t b : mac.bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

std::optional<uint32_t> first_ipv4(const PortAddresses& port) {
  const std::vector<uint32_t> ours = port.ipv4_addresses();
  if (ours.empty()) return std::nullopt;
  return ours.front();
}

}  // namespace

IgmpMembership::IgmpMembership(const PortAddresses& port, NetCounters& counters)
    : IgmpMembership(port, counters, seed_from(port.mac)) {}

IgmpMembership::IgmpMembership(const PortAddresses& port, NetCounters& counters, uint64_t seed)
    : mac_(port.mac), vlan_tci_(port.vlan_tci), source_(first_ipv4(port)), counters_(counters), rng_(seed) {}

void IgmpMembership::join(uint32_t group, Nanos now) {
  if (!is_reportable_group(group) || is_member(group)) return;
  groups_.push_back(Group{.address = group, .report_at = never, .repeat_pending = true});
  report_no_later_than(groups_.back(), now);
}

void IgmpMembership::leave(uint32_t group, Nanos now) {
  const size_t i = index_of(group);
  if (i == groups_.size()) return;
  groups_.erase(groups_.begin() + std::ptrdiff_t(i));  // with any report still due: it would undo the Leave
  if (!source_) return;
  leaves_.push_back(group);
  next_deadline_ = std::min(next_deadline_, now);
}

void IgmpMembership::on_query(const IgmpQuery& query, Nanos now) {
  ++counters_.igmp_queries_received;
  for (Group& g : groups_) {
    if (query.group != 0 && query.group != g.address) continue;
    std::uniform_int_distribution<Nanos> delay(0, query.max_response);
    report_no_later_than(g, now + delay(rng_));
  }
}

void IgmpMembership::poll(Nanos now, IgmpOutput& out) {
  if (now < next_deadline_) return;
  // Leaves first: a group left and joined again within one burst ends as a member.
  for (uint32_t group : leaves_) send(write_igmp_leave, group, counters_.igmp_leaves_sent, out);
  leaves_.clear();
  Nanos next = never;
  for (Group& g : groups_) {
    if (g.report_at <= now) {
      send(write_igmp_report, g.address, counters_.igmp_reports_sent, out);
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

bool IgmpMembership::is_member(uint32_t group) const { return index_of(group) != groups_.size(); }

size_t IgmpMembership::index_of(uint32_t group) const {
  size_t i = 0;
  while (i < groups_.size() && groups_[i].address != group) ++i;
  return i;
}

void IgmpMembership::report_no_later_than(Group& g, Nanos at) {
  if (!source_) return;
  g.report_at = std::min(g.report_at, at);
  next_deadline_ = std::min(next_deadline_, g.report_at);
}

void IgmpMembership::send(Writer write, uint32_t group, uint64_t& counter, IgmpOutput& out) {
  std::vector<uint8_t> frame(max_igmp_frame_size);
  frame.resize(write(frame, mac_, *source_, group, vlan_tci_));
  ++counter;
  out.frames.push_back(std::move(frame));
}

}  // namespace uroce::emulator::net
