// The bookkeeping ArpCache (IPv4) and NdCache (IPv6) share: entries mapping a peer's address to its MAC,
// with expiry, resolution with retries, refresh probes, and packets parked while their destination is being
// resolved. The protocol stays outside: poll() is handed how to send a request (broadcast ARP request or
// multicast Neighbor Solicitation when `unicast` is empty, a unicast probe otherwise), and the counters are
// the protocol's own (arp_* or nd_*), bound by reference.
//
// Parked packets are owned byte vectors rather than callbacks or references to mbufs: a copy survives the
// engine's buffers being recycled, needs no knowledge of DPDK here, and the only thing that differs once
// the peer is known is the destination MAC, which the table writes into bytes 0..5 on release. A miss is
// rare (once per peer per cache lifetime), so the copy costs nothing that matters.
//
// Parking is bounded in bytes, as Linux bounds its queue of unresolved packets (unres_qlen_bytes, 212992 by
// default, counting each buffer's true size) and not in frames: 16 frames were 16 KiB of a 64-KiB WRITE at
// path MTU 1024 but only 1 KiB of 64-byte datagrams. A frame counts with what holding it costs (its
// allocation and its vector); the cap on all destinations together keeps a burst to many unresolved peers
// from growing the daemon without bound.
//
// Entry life: unknown -> resolving (broadcast/multicast requests, max_requests of them retry_interval apart;
// no answer retry_interval after the last one: resolution fails, parked packets are dropped) -> reachable
// for reachable_time. An entry that was used while reachable is re-checked before it expires with unicast
// requests (as Linux's probes), so a peer in active use never makes the traffic stall; an unused one simply
// expires and is resolved again on its next use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

struct NeighbourCacheConfig {
  Nanos reachable_time = seconds(60);
  Nanos retry_interval = seconds(1);
  unsigned max_requests = 3;  // per resolution, and per refresh of an entry in use
  size_t max_parked_bytes_per_destination = 212992;  // Linux's unres_qlen_bytes default
  size_t max_parked_bytes_total = size_t(8) << 20;
  size_t max_entries = 4096;
};

enum class ParkResult : uint8_t {
  queued,                    // waits for the resolution
  ready,                     // the MAC was known after all: the frame leaves at the next poll()
  dropped_destination_full,  // the frame would take this peer's parked bytes above their limit
  dropped_total_full,        // the frame would take all parked bytes above their limit
  dropped_cache_full,        // no room for a new entry (every entry is being resolved)
  dropped_too_short,         // shorter than a destination MAC
};

// The protocol's counters (NetCounters' arp_* or nd_* fields) that the table bumps.
struct NeighbourCounters {
  uint64_t& requests_sent;  // broadcast/multicast requests resolving an unknown peer, retries included
  uint64_t& probes_sent;    // unicast requests refreshing an entry in use
  uint64_t& resolution_failures;
  uint64_t& entries_expired;
  uint64_t& parked;
  uint64_t& parked_released;
  uint64_t& parked_dropped;
};

using Frames = std::vector<std::vector<uint8_t>>;

template <class Address, class Hash = std::hash<Address>>
class NeighbourTable {
 public:
  NeighbourTable(NeighbourCounters counters, NeighbourCacheConfig config) : counters_(counters), config_(config) {
    config_.max_requests = std::max(config_.max_requests, 1u);
    config_.max_entries = std::max<size_t>(config_.max_entries, 1);
    // The last probe leaves one retry interval before expiry, leaving time for its answer; never more than
    // half the entry's life, so that a short reachable_time does not mean probing all the time.
    probe_window_ = std::min(Nanos(config_.max_requests) * config_.retry_interval, config_.reachable_time / 2);
    // Buckets for every entry up front: inserting never rehashes, so lookups never see a rehash's cost.
    entries_.reserve(config_.max_entries);
  }

  // The peer's MAC if it is known and has not expired. Hot path: one hash probe, no allocation.
  std::optional<wire::MacAddress> lookup(const Address& ip, Nanos now) {
    const auto it = entries_.find(ip);
    if (it == entries_.end() || !it->second.resolved || now >= it->second.expires_at) return std::nullopt;
    Entry& e = it->second;
    if (!e.used) {
      // First use since it was learned: from now on the entry is worth refreshing before it expires.
      e.used = true;
      next_deadline_ = std::min(next_deadline_, deadline_of(e));
    }
    return e.mac;
  }

  ParkResult park(const Address& ip, std::vector<uint8_t> frame, Nanos now);
  // Whether the peer is known; if not, starts resolving it as park() would, with no frame to hold (a
  // resolution already running keeps its schedule). For who must wait for the peer before going on:
  // rdma_resolve_addr. False as well when the cache has no room for the peer.
  bool resolve(const Address& ip, Nanos now);
  void learn(const Address& ip, const wire::MacAddress& mac, Nanos now, Frames& released);
  bool update_if_known(const Address& ip, const wire::MacAddress& mac, Nanos now, Frames& released) {
    if (!entries_.contains(ip)) return false;
    learn(ip, mac, now, released);
    return true;
  }

  // send_request(const Address& target, std::optional<wire::MacAddress> unicast, Frames& out) appends the
  // protocol's request for `target`: broadcast/multicast without `unicast`, a probe to it with.
  template <class SendRequest>
  void poll(Nanos now, Frames& frames, std::vector<Address>& failed, SendRequest&& send_request);
  // Cached, lowered by events only: it may come early (that poll finds nothing to do and settles it), never
  // late.
  Nanos next_deadline() const { return next_deadline_; }

  size_t entries() const { return entries_.size(); }
  size_t parked() const { return parked_total_; }  // frames
  size_t parked_bytes() const { return parked_bytes_total_; }
  // What a parked frame counts against the limits.
  static size_t held_bytes(const std::vector<uint8_t>& frame) { return frame.capacity() + sizeof(frame); }
  bool resolving(const Address& ip) const {
    const auto it = entries_.find(ip);
    return it != entries_.end() && !it->second.resolved;
  }

 private:
  struct Entry {
    wire::MacAddress mac;
    bool resolved = false;
    bool used = false;           // looked up since it was (re)learned: worth refreshing before expiry
    unsigned requests_sent = 0;  // broadcast/multicast requests while resolving, unicast probes while resolved
    Nanos expires_at = 0;        // resolved entries
    Nanos next_request_at = 0;   // resolving: next request or the failure; resolved: earliest next probe
    Frames parked;
    size_t parked_bytes = 0;
  };

  Entry* make_room_and_insert(const Address& ip);
  // New, or expired: start (again) with a broadcast/multicast request at the next poll.
  void start_resolving(Entry& e, Nanos now);
  void release(Entry& e, Frames& into);
  Nanos probe_start(const Entry& e) const { return e.expires_at - probe_window_; }
  Nanos deadline_of(const Entry& e) const;

  NeighbourCounters counters_;
  NeighbourCacheConfig config_;
  Nanos probe_window_;  // probes of an entry in use start this long before it expires
  std::unordered_map<Address, Entry, Hash> entries_;
  Frames ready_;  // parked while the MAC was already known; sent at the next poll
  size_t parked_total_ = 0;        // frames, in entries and in ready_
  size_t parked_bytes_total_ = 0;  // their held_bytes()
  Nanos next_deadline_ = never;
};

template <class Address, class Hash>
ParkResult NeighbourTable<Address, Hash>::park(const Address& ip, std::vector<uint8_t> frame, Nanos now) {
  ParkResult result = ParkResult::queued;
  Entry* e = nullptr;
  bool inserted = false;
  const size_t bytes = held_bytes(frame);
  if (frame.size() < 6) {
    result = ParkResult::dropped_too_short;
  } else if (parked_bytes_total_ + bytes > config_.max_parked_bytes_total) {
    result = ParkResult::dropped_total_full;
  } else if (const auto it = entries_.find(ip); it != entries_.end()) {
    e = &it->second;
  } else if ((e = make_room_and_insert(ip)) == nullptr) {
    result = ParkResult::dropped_cache_full;
  } else {
    inserted = true;
  }
  if (result != ParkResult::queued) {
    ++counters_.parked_dropped;
    return result;
  }

  if (e->resolved && now < e->expires_at) {
    std::memcpy(frame.data(), e->mac.bytes.data(), 6);
    ready_.push_back(std::move(frame));
    ++parked_total_;
    parked_bytes_total_ += bytes;
    next_deadline_ = std::min(next_deadline_, now);
    return ParkResult::ready;
  }
  if (e->parked_bytes + bytes > config_.max_parked_bytes_per_destination) {
    // The newest frame is the one dropped: the transport retransmits it, and the older ones keep their
    // order on the wire.
    ++counters_.parked_dropped;
    return ParkResult::dropped_destination_full;
  }
  if (inserted || e->resolved) start_resolving(*e, now);  // a resolution already running keeps its schedule
  e->parked.push_back(std::move(frame));
  e->parked_bytes += bytes;
  ++parked_total_;
  parked_bytes_total_ += bytes;
  ++counters_.parked;
  return ParkResult::queued;
}

template <class Address, class Hash>
bool NeighbourTable<Address, Hash>::resolve(const Address& ip, Nanos now) {
  if (lookup(ip, now)) return true;
  Entry* e = nullptr;
  bool inserted = false;
  if (const auto it = entries_.find(ip); it != entries_.end()) {
    e = &it->second;
  } else if ((e = make_room_and_insert(ip)) == nullptr) {
    return false;
  } else {
    inserted = true;
  }
  if (inserted || e->resolved) start_resolving(*e, now);
  return false;
}

template <class Address, class Hash>
void NeighbourTable<Address, Hash>::start_resolving(Entry& e, Nanos now) {
  if (e.resolved) ++counters_.entries_expired;
  e.resolved = false;
  e.used = false;
  e.requests_sent = 0;
  e.next_request_at = now;
  next_deadline_ = std::min(next_deadline_, now);
}

template <class Address, class Hash>
void NeighbourTable<Address, Hash>::learn(const Address& ip, const wire::MacAddress& mac, Nanos now,
                                          Frames& released) {
  Entry* e = nullptr;
  if (const auto it = entries_.find(ip); it != entries_.end()) {
    e = &it->second;
  } else if ((e = make_room_and_insert(ip)) == nullptr) {
    return;  // every entry is resolving: learning this peer is worth less than any of them
  }
  e->mac = mac;
  release(*e, released);
  e->resolved = true;
  e->used = false;
  e->requests_sent = 0;
  e->next_request_at = 0;
  e->expires_at = now + config_.reachable_time;
  next_deadline_ = std::min(next_deadline_, deadline_of(*e));
}

template <class Address, class Hash>
template <class SendRequest>
void NeighbourTable<Address, Hash>::poll(Nanos now, Frames& frames, std::vector<Address>& failed,
                                         SendRequest&& send_request) {
  if (!ready_.empty()) {
    parked_total_ -= ready_.size();
    counters_.parked_released += ready_.size();
    for (auto& frame : ready_) {
      parked_bytes_total_ -= held_bytes(frame);
      frames.push_back(std::move(frame));
    }
    ready_.clear();
  }
  if (now < next_deadline_) return;

  Nanos next = never;
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Address ip = it->first;
    Entry& e = it->second;
    if (!e.resolved) {
      if (now >= e.next_request_at) {
        if (e.requests_sent >= config_.max_requests) {
          ++counters_.resolution_failures;
          counters_.parked_dropped += e.parked.size();
          parked_total_ -= e.parked.size();
          parked_bytes_total_ -= e.parked_bytes;
          failed.push_back(ip);
          it = entries_.erase(it);
          continue;
        }
        send_request(ip, std::optional<wire::MacAddress>(), frames);
        ++counters_.requests_sent;
        ++e.requests_sent;
        e.next_request_at = now + config_.retry_interval;
      }
    } else if (now >= e.expires_at) {
      ++counters_.entries_expired;
      it = entries_.erase(it);
      continue;
    } else if (e.used && e.requests_sent < config_.max_requests && now >= probe_start(e) &&
               now >= e.next_request_at) {
      send_request(ip, std::optional<wire::MacAddress>(e.mac), frames);
      ++counters_.probes_sent;
      ++e.requests_sent;
      e.next_request_at = now + config_.retry_interval;
    }
    next = std::min(next, deadline_of(e));
    ++it;
  }
  next_deadline_ = next;
}

template <class Address, class Hash>
auto NeighbourTable<Address, Hash>::make_room_and_insert(const Address& ip) -> Entry* {
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

template <class Address, class Hash>
void NeighbourTable<Address, Hash>::release(Entry& e, Frames& into) {
  for (auto& frame : e.parked) {
    std::memcpy(frame.data(), e.mac.bytes.data(), 6);
    into.push_back(std::move(frame));
  }
  counters_.parked_released += e.parked.size();
  parked_total_ -= e.parked.size();
  parked_bytes_total_ -= e.parked_bytes;
  e.parked.clear();
  e.parked_bytes = 0;
}

template <class Address, class Hash>
Nanos NeighbourTable<Address, Hash>::deadline_of(const Entry& e) const {
  if (!e.resolved) return e.next_request_at;
  if (e.used && e.requests_sent < config_.max_requests) {
    return std::min(e.expires_at, std::max(probe_start(e), e.next_request_at));
  }
  return e.expires_at;
}

}  // namespace uroce::emulator::net
