#include "pcap_tools/mirror_copies.hpp"

#include <algorithm>
#include <functional>
#include <string_view>

namespace uroce::pcap_tools {

namespace {

uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

// Which tunnel: its kind, identifiers and ends.
uint64_t tunnel_id(const Tunnel& t) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = mix(h, uint64_t(t.kind));
  h = mix(h, t.session);
  h = mix(h, t.egress);
  h = mix(h, t.gre_key ? uint64_t(*t.gre_key) + 1 : 0);
  h = mix(h, t.vni);
  for (const uint8_t b : t.src.bytes) h = mix(h, b);
  for (const uint8_t b : t.dst.bytes) h = mix(h, b);
  return h;
}

}  // namespace

uint64_t MirrorCopies::copy_of(const Record& r, const wire::Frame& frame) {
  if (r.tunnels.empty() || !frame.ok()) return 0;
  const bool ip = frame.has(wire::layer_ip), arp = frame.has(wire::layer_arp);
  if ((!ip && !arp) || frame.end_offset <= frame.l3_offset) return 0;
  masked_.assign(reinterpret_cast<const char*>(frame.bytes.data() + frame.l3_offset),
                 frame.end_offset - frame.l3_offset);
  if (ip && frame.ip_version == wire::IpVersion::v4) {
    masked_[1] = 0;                  // TOS: DSCP and ECN
    masked_[8] = 0;                  // TTL
    masked_[10] = masked_[11] = 0;   // header checksum
  } else if (ip) {
    masked_[0] = char(masked_[0] & 0xf0);  // version kept; traffic class and flow label cleared
    masked_[1] = masked_[2] = masked_[3] = 0;
    masked_[7] = 0;  // hop limit
  }
  const uint64_t packet = std::hash<std::string_view>{}(masked_);

  // Forget what no copy can follow any more.
  while (!order_.empty() && r.time_ns - order_.front().first > window_ns) {
    const auto old = seen_.find(order_.front().second);
    // (unless the packet was sent again since: that later time has its own entry further on)
    if (old != seen_.end() && old->second.time_ns == order_.front().first) seen_.erase(old);
    order_.pop_front();
  }
  const uint64_t tunnel = tunnel_id(r.tunnels.front());  // the mirror's: the outermost
  auto [it, inserted] = seen_.try_emplace(packet);
  Seen& s = it->second;
  const bool copy = !inserted && std::find(s.tunnels.begin(), s.tunnels.end(), tunnel) == s.tunnels.end();
  if (copy) {
    s.tunnels.push_back(tunnel);
    return s.first;
  }
  // First seen, or sent again through a tunnel that had carried it: a new packet on the wire.
  s.first = r.number;
  s.time_ns = r.time_ns;
  s.tunnels.assign(1, tunnel);
  order_.emplace_back(r.time_ns, packet);
  return 0;
}

}  // namespace uroce::pcap_tools
