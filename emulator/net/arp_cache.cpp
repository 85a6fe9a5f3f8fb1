#include "emulator/net/arp_cache.hpp"

#include <bit>

#include "emulator/net/arp_frames.hpp"

namespace uroce::emulator::net {

ArpCache::ArpCache(PortAddresses port, NetCounters& counters, ArpCacheConfig config)
    : port_(std::move(port)),
      our_ipv4_(port_.ipv4_addresses()),
      table_(NeighbourCounters{.requests_sent = counters.arp_requests_sent,
                               .probes_sent = counters.arp_probes_sent,
                               .resolution_failures = counters.arp_resolution_failures,
                               .entries_expired = counters.arp_entries_expired,
                               .parked = counters.arp_parked,
                               .parked_released = counters.arp_parked_released,
                               .parked_dropped = counters.arp_parked_dropped},
             config) {}

std::optional<wire::MacAddress> ArpCache::lookup(uint32_t ip, Nanos now) {
  if (const auto mac = table_.lookup(ip, now)) return mac;
  // Traffic to our own address (a loopback port, two QPs of one port) needs no ARP: nobody would answer,
  // since the responder ignores ARP that claims to come from one of our addresses.
  if (port_.owns_v4(ip)) return port_.mac;
  return std::nullopt;
}

ParkResult ArpCache::park(uint32_t ip, std::vector<uint8_t> frame, Nanos now) {
  return table_.park(ip, std::move(frame), now);
}

bool ArpCache::resolve(uint32_t ip, Nanos now) { return port_.owns_v4(ip) || table_.resolve(ip, now); }

void ArpCache::learn(uint32_t ip, const wire::MacAddress& mac, Nanos now, ArpOutput& out) {
  table_.learn(ip, mac, now, out.frames);
}

bool ArpCache::update_if_known(uint32_t ip, const wire::MacAddress& mac, Nanos now, ArpOutput& out) {
  return table_.update_if_known(ip, mac, now, out.frames);
}

void ArpCache::poll(Nanos now, ArpOutput& out) {
  table_.poll(now, out.frames, out.failed,
              [this](uint32_t ip, const std::optional<wire::MacAddress>& unicast, Frames& frames) {
                send_request(ip, unicast, frames);
              });
}

void ArpCache::send_request(uint32_t ip, const std::optional<wire::MacAddress>& unicast, Frames& out) const {
  std::vector<uint8_t> frame(max_arp_frame_size);
  frame.resize(write_arp_request(frame, port_.mac, sender_ip_for(ip), ip, port_.vlan_tci,
                                 unicast.value_or(wire::MacAddress::broadcast())));
  out.push_back(std::move(frame));
}

uint32_t ArpCache::sender_ip_for(uint32_t target_ip) const {
  // The port keeps no prefix lengths, so "the address on the peer's subnet" is approximated by the one
  // sharing the longest prefix with the peer; with a single address (the usual case) it is that one. Peers
  // that check the sender against their subnet (arp_filter, arp_ignore) then still answer. 0.0.0.0 (an
  // RFC 5227 probe, which hosts answer) when the port has no IPv4 address.
  uint32_t best = 0;
  int best_len = -1;
  for (uint32_t ours : our_ipv4_) {
    const int len = std::countl_zero(ours ^ target_ip);
    if (len > best_len) {
      best = ours;
      best_len = len;
    }
  }
  return best;
}

}  // namespace uroce::emulator::net
