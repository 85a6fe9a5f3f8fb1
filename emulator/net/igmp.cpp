#include "emulator/net/igmp.hpp"

namespace uroce::emulator::net {

namespace {

// A group (224.0.0.0/4, the transport's is_multicast), but never all-hosts (RFC 2236 §6).
bool is_reportable_group(uint32_t group) {
  return wire::IpAddress::from_v4(group).is_multicast() && group != igmp_all_hosts;
}

std::optional<uint32_t> first_ipv4(const PortAddresses& port) {
  const std::vector<uint32_t> ours = port.ipv4_addresses();
  if (ours.empty()) return std::nullopt;
  return ours.front();
}

}  // namespace

IgmpMembership::IgmpMembership(const PortAddresses& port, NetCounters& counters)
    : IgmpMembership(port, counters, seed_from_mac(port.mac)) {}

IgmpMembership::IgmpMembership(const PortAddresses& port, NetCounters& counters, uint64_t seed)
    : sender_(port), source_(first_ipv4(port)), counters_(counters), timers_(source_.has_value(), seed) {}

void IgmpMembership::join(uint32_t group, Nanos now) {
  if (is_reportable_group(group)) timers_.join(wire::IpAddress::from_v4(group), now);
}

void IgmpMembership::leave(uint32_t group, Nanos now) { timers_.leave(wire::IpAddress::from_v4(group), now); }

void IgmpMembership::on_query(const IgmpQuery& query, Nanos now) {
  ++counters_.igmp_queries_received;
  std::optional<wire::IpAddress> group;
  if (query.group != 0) group = wire::IpAddress::from_v4(query.group);
  timers_.on_query(group, query.max_response, now);
}

void IgmpMembership::poll(Nanos now, IgmpOutput& out) {
  if (now < timers_.next_deadline()) return;
  timers_.poll(now, due_);
  for (const wire::IpAddress& g : due_.leaves) {
    sender_.send(write_igmp_leave, max_igmp_frame_size, *source_, g.v4(), counters_.igmp_leaves_sent, out.frames);
  }
  for (const wire::IpAddress& g : due_.reports) {
    sender_.send(write_igmp_report, max_igmp_frame_size, *source_, g.v4(), counters_.igmp_reports_sent, out.frames);
  }
}

}  // namespace uroce::emulator::net
