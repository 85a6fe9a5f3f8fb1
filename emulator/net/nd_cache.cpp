#include "emulator/net/nd_cache.hpp"

#include <algorithm>
#include <cstring>

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

bool is_link_local(const wire::IpAddress& a) { return a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }

}  // namespace

size_t IpAddressHash::operator()(const wire::IpAddress& a) const noexcept {
  // FNV-1a over the 16 bytes: the low bytes (interface identifiers) differ between peers of one subnet.
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : a.bytes) h = (h ^ b) * 1099511628211ull;
  return size_t(h);
}

NdCache::NdCache(PortAddresses port, NetCounters& counters, NdCacheConfig config)
    : port_(std::move(port)), our_ipv6_(ipv6_addresses(port_)), counters_(counters), config_(config) {
  config_.max_requests = std::max(config_.max_requests, 1u);
  config_.max_entries = std::max<size_t>(config_.max_entries, 1);
  // The last probe leaves one retry interval before expiry, leaving time for its answer; never more than
  // half the entry's life, so that a short reachable_time does not mean probing all the time.
  probe_window_ = std::min(Nanos(config_.max_requests) * config_.retry_interval, config_.reachable_time / 2);
  // Buckets for every entry up front: inserting never rehashes, so lookups never see a rehash's cost.
  entries_.reserve(config_.max_entries);
}

std::optional<wire::MacAddress> NdCache::lookup(const wire::IpAddress& ip, Nanos now) {
  const auto it = entries_.find(ip);
  if (it == entries_.end() || !it->second.resolved || now >= it->second.expires_at) {
    // Traffic to our own address (a loopback port, two QPs of one port) needs no solicitation.
    if (port_.owns_v6(ip.bytes.data())) return port_.mac;
    return std::nullopt;
  }
  Entry& e = it->second;
  if (!e.used) {
    // First use since it was learned: from now on the entry is worth refreshing before it expires.
    e.used = true;
    next_deadline_ = std::min(next_deadline_, deadline_of(e));
  }
  return e.mac;
}

ParkResult NdCache::park(const wire::IpAddress& ip, std::vector<uint8_t> frame, Nanos now) {
  ParkResult result = ParkResult::queued;
  Entry* e = nullptr;
  bool inserted = false;
  if (frame.size() < 6) {
    result = ParkResult::dropped_too_short;
  } else if (parked_total_ >= config_.max_parked_total) {
    result = ParkResult::dropped_total_full;
  } else if (const auto it = entries_.find(ip); it != entries_.end()) {
    e = &it->second;
  } else if ((e = make_room_and_insert(ip)) == nullptr) {
    result = ParkResult::dropped_cache_full;
  } else {
    inserted = true;
  }
  if (result != ParkResult::queued) {
    ++counters_.nd_parked_dropped;
    return result;
  }

  if (e->resolved && now < e->expires_at) {
    std::memcpy(frame.data(), e->mac.bytes.data(), 6);
    ready_.push_back(std::move(frame));
    ++parked_total_;
    next_deadline_ = std::min(next_deadline_, now);
    return ParkResult::ready;
  }
  if (e->parked.size() >= config_.max_parked_per_destination) {
    // The newest frame is the one dropped: the transport retransmits it, and the older ones keep their
    // order on the wire.
    ++counters_.nd_parked_dropped;
    return ParkResult::dropped_destination_full;
  }
  if (inserted || e->resolved) {
    // New, or expired: start (again) with a multicast solicitation at the next poll. A resolution already
    // running keeps its schedule.
    if (e->resolved) ++counters_.nd_entries_expired;
    e->resolved = false;
    e->used = false;
    e->requests_sent = 0;
    e->next_request_at = now;
    next_deadline_ = std::min(next_deadline_, now);
  }
  e->parked.push_back(std::move(frame));
  ++parked_total_;
  ++counters_.nd_parked;
  return ParkResult::queued;
}

void NdCache::learn(const wire::IpAddress& ip, const wire::MacAddress& mac, Nanos now, NdOutput& out) {
  Entry* e = nullptr;
  if (const auto it = entries_.find(ip); it != entries_.end()) {
    e = &it->second;
  } else if ((e = make_room_and_insert(ip)) == nullptr) {
    return;  // every entry is resolving: learning this peer is worth less than any of them
  }
  e->mac = mac;
  release(*e, out.frames);
  e->resolved = true;
  e->used = false;
  e->requests_sent = 0;
  e->next_request_at = 0;
  e->expires_at = now + config_.reachable_time;
  next_deadline_ = std::min(next_deadline_, deadline_of(*e));
}

bool NdCache::update_if_known(const wire::IpAddress& ip, const wire::MacAddress& mac, Nanos now, NdOutput& out) {
  if (!entries_.contains(ip)) return false;
  learn(ip, mac, now, out);
  return true;
}

void NdCache::poll(Nanos now, NdOutput& out) {
  if (!ready_.empty()) {
    parked_total_ -= ready_.size();
    counters_.nd_parked_released += ready_.size();
    for (auto& frame : ready_) out.frames.push_back(std::move(frame));
    ready_.clear();
  }
  if (now < next_deadline_) return;

  Nanos next = never;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const wire::IpAddress ip = it->first;
    Entry& e = it->second;
    if (!e.resolved) {
      if (now >= e.next_request_at) {
        if (e.requests_sent >= config_.max_requests) {
          ++counters_.nd_resolution_failures;
          counters_.nd_parked_dropped += e.parked.size();
          parked_total_ -= e.parked.size();
          out.failed.push_back(ip);
          it = entries_.erase(it);
          continue;
        }
        send_solicitation(ip, std::nullopt, out);
        ++counters_.nd_solicitations_sent;
        ++e.requests_sent;
        e.next_request_at = now + config_.retry_interval;
      }
    } else if (now >= e.expires_at) {
      ++counters_.nd_entries_expired;
      it = entries_.erase(it);
      continue;
    } else if (e.used && e.requests_sent < config_.max_requests && now >= probe_start(e) &&
               now >= e.next_request_at) {
      send_solicitation(ip, e.mac, out);
      ++counters_.nd_probes_sent;
      ++e.requests_sent;
      e.next_request_at = now + config_.retry_interval;
    }
    next = std::min(next, deadline_of(e));
    ++it;
  }
  next_deadline_ = next;
}

bool NdCache::resolving(const wire::IpAddress& ip) const {
  const auto it = entries_.find(ip);
  return it != entries_.end() && !it->second.resolved;
}

NdCache::Entry* NdCache::make_room_and_insert(const wire::IpAddress& ip) {
  if (entries_.size() >= config_.max_entries) {
    // Evict the resolved entry closest to expiry; a resolution in progress is never evicted, as its parked
    // frames would be lost. A linear scan, but only when the cache is full.
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.resolved && (victim == entries_.end() || it->second.expires_at < victim->second.expires_at)) {
        victim = it;
      }
    }
    if (victim == entries_.end()) return nullptr;
    entries_.erase(victim);
  }
  return &entries_[ip];
}

void NdCache::release(Entry& e, std::vector<std::vector<uint8_t>>& into) {
  for (auto& frame : e.parked) {
    std::memcpy(frame.data(), e.mac.bytes.data(), 6);
    into.push_back(std::move(frame));
  }
  counters_.nd_parked_released += e.parked.size();
  parked_total_ -= e.parked.size();
  e.parked.clear();
}

void NdCache::send_solicitation(const wire::IpAddress& ip, std::optional<wire::MacAddress> unicast, NdOutput& out) {
  std::vector<uint8_t> frame(max_nd_frame_size);
  frame.resize(write_neighbor_solicitation(frame, port_.mac, source_for(ip), ip, port_.vlan_tci, unicast));
  out.frames.push_back(std::move(frame));
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

Nanos NdCache::deadline_of(const Entry& e) const {
  if (!e.resolved) return e.next_request_at;
  if (e.used && e.requests_sent < config_.max_requests) {
    return std::min(e.expires_at, std::max(probe_start(e), e.next_request_at));
  }
  return e.expires_at;
}

}  // namespace uroce::emulator::net
