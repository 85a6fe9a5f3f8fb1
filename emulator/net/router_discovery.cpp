#include "emulator/net/router_discovery.hpp"

#include <algorithm>

#include "emulator/net/membership_timers.hpp"
#include "emulator/net/nd_frames.hpp"

namespace uroce::emulator::net {

namespace {

std::optional<wire::IpAddress> link_local_of(const PortAddresses& port) {
  for (const wire::IpAddress& a : port.ips) {
    if (!a.is_v4() && is_link_local(a)) return a;
  }
  return std::nullopt;
}

}  // namespace

RouterDiscovery::RouterDiscovery(const PortAddresses& port, NetCounters& counters, RouterDiscoveryConfig config)
    : mac_(port.mac),
      vlan_tci_(port.vlan_tci),
      source_(link_local_of(port)),
      counters_(counters),
      config_(config),
      seed_(seed_from_mac(port.mac)) {}

void RouterDiscovery::start(Nanos now) {
  if (!config_.enabled || !source_ || config_.solicitations == 0) return;
  // The random delay keeps hosts that come up together from soliciting at once (§6.3.7); the MAC seeds it,
  // so one port always waits the same.
  next_solicitation_ = now + (config_.max_first_delay == 0 ? 0 : seed_ % config_.max_first_delay);
}

void RouterDiscovery::poll(Nanos now, RouterDiscoveryOutput& out) {
  if (now < next_solicitation_) return;
  std::vector<uint8_t> frame(wire::ethernet_header_size + wire::vlan_tag_size + wire::ipv6_header_size +
                             router_solicitation_size);
  frame.resize(write_router_solicitation(frame, mac_, *source_, vlan_tci_));
  out.frames.push_back(std::move(frame));
  ++counters_.rd_solicitations_sent;
  ++solicitations_sent_;
  next_solicitation_ =
      solicitations_sent_ < config_.solicitations ? now + config_.solicitation_interval : never;
}

void RouterDiscovery::on_advertisement(const RouterAdvertisement& ra, Nanos now) {
  ++counters_.rd_advertisements_received;
  // An advertisement answers the solicitations: no more are sent (§6.3.7).
  next_solicitation_ = never;
  learn_router(ra, now);
  for (const AdvertisedPrefix& p : ra.prefixes) {
    if (p.on_link) learn_prefix(p, now);
  }
}

void RouterDiscovery::learn_router(const RouterAdvertisement& ra, Nanos now) {
  auto it = std::find_if(routers_.begin(), routers_.end(), [&](const Router& r) { return r.address == ra.router; });
  if (ra.router_lifetime == 0) {
    // "No longer a default router" (§6.3.4): its entry goes at once.
    if (it != routers_.end()) routers_.erase(it);
    return;
  }
  const Nanos expires = now + seconds(ra.router_lifetime);
  if (it != routers_.end()) {
    it->expires = expires;
    return;
  }
  std::erase_if(routers_, [&](const Router& r) { return r.expires <= now; });
  if (routers_.size() >= config_.max_routers) {
    ++counters_.rd_ignored;
    return;
  }
  routers_.push_back({ra.router, expires});
}

void RouterDiscovery::learn_prefix(const AdvertisedPrefix& p, Nanos now) {
  // Link-local prefixes are on-link by definition; an advertisement for fe80::/10 is ignored (§6.3.4).
  if (is_link_local(p.prefix)) return;
  auto it = std::find_if(prefixes_.begin(), prefixes_.end(), [&](const Prefix& q) {
    return q.subnet.prefix_length == p.length && q.subnet.address == p.prefix;
  });
  if (p.valid_lifetime == 0) {
    if (it != prefixes_.end()) prefixes_.erase(it);
    return;
  }
  if (it != prefixes_.end()) {
    it->expires = lifetime_end(now, p.valid_lifetime);
    return;
  }
  std::erase_if(prefixes_, [&](const Prefix& q) { return q.expires <= now; });
  if (prefixes_.size() >= config_.max_prefixes) {
    ++counters_.rd_ignored;
    return;
  }
  prefixes_.push_back({Subnet{p.prefix, p.length}, lifetime_end(now, p.valid_lifetime)});
}

std::optional<wire::IpAddress> RouterDiscovery::default_router(Nanos now) const {
  for (const Router& r : routers_) {
    if (r.expires > now) return r.address;
  }
  return std::nullopt;
}

bool RouterDiscovery::on_link(const wire::IpAddress& dst, Nanos now) const {
  return std::any_of(prefixes_.begin(), prefixes_.end(),
                     [&](const Prefix& p) { return p.expires > now && p.subnet.contains(dst); });
}

size_t RouterDiscovery::routers(Nanos now) const {
  return size_t(std::count_if(routers_.begin(), routers_.end(), [&](const Router& r) { return r.expires > now; }));
}

size_t RouterDiscovery::prefixes(Nanos now) const {
  return size_t(std::count_if(prefixes_.begin(), prefixes_.end(), [&](const Prefix& p) { return p.expires > now; }));
}

}  // namespace uroce::emulator::net
