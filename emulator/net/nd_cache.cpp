#include "emulator/net/nd_cache.hpp"

#include "emulator/net/nd_frames.hpp"

namespace uroce::emulator::net {

namespace {

std::vector<wire::IpAddress> ipv6_addresses(const PortAddresses& port) {
  std::vector<wire::IpAddress> out;
  for (const wire::IpAddress& a : port.ips) {
    if (!a.is_v4()) out.push_back(a);
  }
  return out;
}

}  // namespace

size_t IpAddressHash::operator()(const wire::IpAddress& a) const noexcept {
  // FNV-1a over the 16 bytes: the low bytes (interface identifiers) differ between peers of one subnet.
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : a.bytes) h = (h ^ b) * 1099511628211ull;
  return size_t(h);
}

NdCache::NdCache(PortAddresses port, NetCounters& counters, NdCacheConfig config)
    : port_(std::move(port)),
      our_ipv6_(ipv6_addresses(port_)),
      table_(NeighbourCounters{.requests_sent = counters.nd_solicitations_sent,
                               .probes_sent = counters.nd_probes_sent,
                               .resolution_failures = counters.nd_resolution_failures,
                               .entries_expired = counters.nd_entries_expired,
                               .parked = counters.nd_parked,
                               .parked_released = counters.nd_parked_released,
                               .parked_dropped = counters.nd_parked_dropped},
             config) {}

std::optional<wire::MacAddress> NdCache::lookup(const wire::IpAddress& ip, Nanos now) {
  if (const auto mac = table_.lookup(ip, now)) return mac;
  // Traffic to our own address (a loopback port, two QPs of one port) needs no solicitation.
  if (port_.owns_v6(ip.bytes.data())) return port_.mac;
  return std::nullopt;
}

ParkResult NdCache::park(const wire::IpAddress& ip, std::vector<uint8_t> frame, Nanos now) {
  return table_.park(ip, std::move(frame), now);
}

bool NdCache::resolve(const wire::IpAddress& ip, Nanos now) {
  return port_.owns_v6(ip.bytes.data()) || table_.resolve(ip, now);
}

void NdCache::learn(const wire::IpAddress& ip, const wire::MacAddress& mac, Nanos now, NdOutput& out) {
  table_.learn(ip, mac, now, out.frames);
}

bool NdCache::update_if_known(const wire::IpAddress& ip, const wire::MacAddress& mac, Nanos now, NdOutput& out) {
  return table_.update_if_known(ip, mac, now, out.frames);
}

void NdCache::poll(Nanos now, NdOutput& out) {
  table_.poll(now, out.frames, out.failed,
              [this](const wire::IpAddress& ip, const std::optional<wire::MacAddress>& unicast, Frames& frames) {
                send_solicitation(ip, unicast, frames);
              });
}

void NdCache::send_solicitation(const wire::IpAddress& ip, const std::optional<wire::MacAddress>& unicast,
                                Frames& out) const {
  std::vector<uint8_t> frame(max_nd_frame_size);
  frame.resize(write_neighbor_solicitation(frame, port_.mac, source_for(ip), ip, port_.vlan_tci, unicast));
  out.push_back(std::move(frame));
}

wire::IpAddress NdCache::source_for(const wire::IpAddress& target) const {
  // As ARP's sender_ip_for: the address sharing the longest prefix with the target; a link-local target
  // is only ever solicited from a link-local address when we have one (RFC 4861 §7.2.2 wants the source
  // to be an address of the interface; peers answer to it, so it must be reachable on the link).
  wire::IpAddress best{};
  int best_len = -1;
  for (const wire::IpAddress& ours : our_ipv6_) {
    int len = 0;
    while (len < 128 && ((ours.bytes[len / 8] ^ target.bytes[len / 8]) & (0x80 >> (len % 8))) == 0) ++len;
    if (is_link_local(target) == is_link_local(ours)) len += 256;  // same scope first
    if (len > best_len) {
      best = ours;
      best_len = len;
    }
  }
  return best;
}

}  // namespace uroce::emulator::net
