#include "emulator/net/mld.hpp"

#include "emulator/net/nd_frames.hpp"

namespace uroce::emulator::net {

namespace {

// RFC 2710 §5: never all-nodes, never scope 0 or 1 (the scope is the low nibble of the second byte).
bool is_reportable_group(const wire::IpAddress& group) {
  if (group.is_v4() || !is_multicast(group) || group == all_nodes_address()) return false;
  const unsigned scope = group.bytes[1] & 0x0f;
  return scope > 1;
}

wire::IpAddress link_local_or_unspecified(const PortAddresses& port) {
  for (const wire::IpAddress& a : port.ips) {
    if (!a.is_v4() && is_link_local(a)) return a;
  }
  return wire::IpAddress{};  // :: (RFC 3590 §4)
}

}  // namespace

MldMembership::MldMembership(const PortAddresses& port, NetCounters& counters)
    : MldMembership(port, counters, seed_from_mac(port.mac)) {}

MldMembership::MldMembership(const PortAddresses& port, NetCounters& counters, uint64_t seed)
    : sender_(port), source_(link_local_or_unspecified(port)), counters_(counters), timers_(true, seed) {}

void MldMembership::join(const wire::IpAddress& group, Nanos now) {
  if (is_reportable_group(group)) timers_.join(group, now);
}

void MldMembership::leave(const wire::IpAddress& group, Nanos now) { timers_.leave(group, now); }

void MldMembership::on_query(const MldQuery& query, Nanos now) {
  ++counters_.mld_queries_received;
  std::optional<wire::IpAddress> group;
  if (!is_unspecified(query.group)) group = query.group;
  timers_.on_query(group, query.max_response, now);
}

void MldMembership::poll(Nanos now, MldOutput& out) {
  if (now < timers_.next_deadline()) return;
  timers_.poll(now, due_);
  for (const wire::IpAddress& g : due_.leaves) {
    sender_.send(write_mld_done, max_mld_frame_size, source_, g, counters_.mld_dones_sent, out.frames);
  }
  for (const wire::IpAddress& g : due_.reports) {
    sender_.send(write_mld_report, max_mld_frame_size, source_, g, counters_.mld_reports_sent, out.frames);
  }
}

}  // namespace uroce::emulator::net
