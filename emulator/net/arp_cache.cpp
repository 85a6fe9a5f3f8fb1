#include "emulator/net/arp_cache.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "emulator/net/arp_frames.hpp"

namespace uroce::emulator::net {

ArpCache::ArpCache(PortAddresses port, NetCounters& counters, ArpCacheConfig config)
    : port_(std::move(port)), our_ipv4_(port_.ipv4_addresses()), counters_(counters), config_(config) {
  config_.max_requests = std::max(config_.max_requests, 1u);
  config_.max_entries = std::max<size_t>(config_.max_entries, 1);
  // The last probe leaves one retry interval before expiry, leaving time for its answer; never more than
  // half the entry's life, so that a short reachable_time does not mean probing all the time.
  probe_window_ = std::min(Nanos(config_.max_requests) * config_.retry_interval, config_.reachable_time / 2);
  // Buckets for every entry up front: inserting never rehashes, so lookups never see a rehash's cost.
  entries_.reserve(config_.max_entries);
}

std::optional<wire::MacAddress> ArpCache::lookup(uint32_t ip, Nanos now) {
  const auto it = entries_.find(ip);
  if (it == entries_.end() || !it->second.resolved || now >= it->second.expires_at) {
    // Traffic to our own address (a loopback port, two QPs of one port) needs no ARP: nobody would answer,
    // since the responder ignores ARP that claims to come from one of our addresses.
    if (port_.owns_v4(ip)) return port_.mac;
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

ParkResult ArpCache::park(uint32_t ip, std::vector<uint8_t> frame, Nanos now) {
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
    ++counters_.arp_parked_dropped;
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
    ++counters_.arp_parked_dropped;
    return ParkResult::dropped_destination_full;
  }
  if (inserted || e->resolved) {
    // New, or expired: start (again) with a broadcast request at the next poll. A resolution already
    // running keeps its schedule.
    if (e->resolved) ++counters_.arp_entries_expired;
    e->resolved = false;
    e->used = false;
    e->requests_sent = 0;
    e->next_request_at = now;
    next_deadline_ = std::min(next_deadline_, now);
  }
  e->parked.push_back(std::move(frame));
  ++parked_total_;
  ++counters_.arp_parked;
  return ParkResult::queued;
}

void ArpCache::learn(uint32_t ip, const wire::MacAddress& mac, Nanos now, ArpOutput& out) {
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

bool ArpCache::update_if_known(uint32_t ip, const wire::MacAddress& mac, Nanos now, ArpOutput& out) {
  if (!entries_.contains(ip)) return false;
  learn(ip, mac, now, out);
  return true;
}

void ArpCache::poll(Nanos now, ArpOutput& out) {
  if (!ready_.empty()) {
    parked_total_ -= ready_.size();
    counters_.arp_parked_released += ready_.size();
    for (auto& frame : ready_) out.frames.push_back(std::move(frame));
    ready_.clear();
  }
  if (now < next_deadline_) return;

  Nanos next = never;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const uint32_t ip = it->first;
    Entry& e = it->second;
    if (!e.resolved) {
      if (now >= e.next_request_at) {
        if (e.requests_sent >= config_.max_requests) {
          ++counters_.arp_resolution_failures;
          counters_.arp_parked_dropped += e.parked.size();
          parked_total_ -= e.parked.size();
          out.failed.push_back(ip);
          it = entries_.erase(it);
          continue;
        }
        send_request(ip, wire::MacAddress::broadcast(), out);
        ++counters_.arp_requests_sent;
        ++e.requests_sent;
        e.next_request_at = now + config_.retry_interval;
      }
    } else if (now >= e.expires_at) {
      ++counters_.arp_entries_expired;
      it = entries_.erase(it);
      continue;
    } else if (e.used && e.requests_sent < config_.max_requests && now >= probe_start(e) &&
               now >= e.next_request_at) {
      send_request(ip, e.mac, out);
      ++counters_.arp_probes_sent;
      ++e.requests_sent;
      e.next_request_at = now + config_.retry_interval;
    }
    next = std::min(next, deadline_of(e));
    ++it;
  }
  next_deadline_ = next;
}

bool ArpCache::resolving(uint32_t ip) const {
  const auto it = entries_.find(ip);
  return it != entries_.end() && !it->second.resolved;
}

ArpCache::Entry* ArpCache::make_room_and_insert(uint32_t ip) {
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

void ArpCache::release(Entry& e, std::vector<std::vector<uint8_t>>& into) {
  for (auto& frame : e.parked) {
    std::memcpy(frame.data(), e.mac.bytes.data(), 6);
    into.push_back(std::move(frame));
  }
  counters_.arp_parked_released += e.parked.size();
  parked_total_ -= e.parked.size();
  e.parked.clear();
}

void ArpCache::send_request(uint32_t ip, const wire::MacAddress& eth_dst, ArpOutput& out) {
  std::vector<uint8_t> frame(max_arp_frame_size);
  frame.resize(write_arp_request(frame, port_.mac, sender_ip_for(ip), ip, port_.vlan_tci, eth_dst));
  out.frames.push_back(std::move(frame));
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

Nanos ArpCache::deadline_of(const Entry& e) const {
  if (!e.resolved) return e.next_request_at;
  if (e.used && e.requests_sent < config_.max_requests) {
    return std::min(e.expires_at, std::max(probe_start(e), e.next_request_at));
  }
  return e.expires_at;
}

}  // namespace uroce::emulator::net
