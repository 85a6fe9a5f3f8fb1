// The ARP cache: which MAC to send to for a peer's IPv4 address, learned from ARP, with expiry, resolution
// with retries, and packets parked while their destination is being resolved.
//
// How the engine (one thread, burst loop) uses it:
//   - building a frame: lookup(ip, now). A hit is one hash probe, no allocation, no system call.
//   - on a miss: build the frame anyway with any destination MAC and park() it; the cache resolves the peer.
//   - ARP frames received: arp_responder.hpp calls learn() / update_if_known().
//   - whenever now >= next_deadline() (and after park()): poll(now, out), then transmit out.frames in order.
//
// Parked packets are owned byte vectors rather than callbacks or references to mbufs: a copy survives the
// engine's buffers being recycled, needs no knowledge of DPDK here, and the only thing that differs once
// the peer is known is the destination MAC, which the cache writes into bytes 0..5 on release. A miss is
// rare (once per peer per cache lifetime), so the copy costs nothing that matters.
//
// Entry life: unknown -> resolving (broadcast requests, max_requests of them retry_interval apart; no
// answer retry_interval after the last one: resolution fails, parked packets are dropped) -> reachable for
// reachable_time. An entry that was used while reachable is re-checked before it expires with unicast
// requests (as Linux's probes), so a peer in active use never makes the traffic stall; an unused one simply
// expires and is resolved again on its next use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

struct ArpCacheConfig {
  Nanos reachable_time = seconds(60);
  Nanos retry_interval = seconds(1);
  unsigned max_requests = 3;  // per resolution, and per refresh of an entry in use
  size_t max_parked_per_destination = 16;
  size_t max_parked_total = 1024;
  size_t max_entries = 4096;
};

enum class ParkResult : uint8_t {
  queued,                    // waits for the resolution
  ready,                     // the MAC was known after all: the frame leaves at the next poll()
  dropped_destination_full,  // max_parked_per_destination frames already wait for this peer
  dropped_total_full,        // max_parked_total frames already wait
  dropped_cache_full,        // no room for a new entry (every entry is being resolved)
  dropped_too_short,         // shorter than a destination MAC
};

// What poll() and learn() hand back. The engine keeps one and clear()s it, so the vectors' storage is reused.
struct ArpOutput {
  std::vector<std::vector<uint8_t>> frames;  // to transmit in this order: ARP requests and released packets
  std::vector<uint32_t> failed;              // peers whose resolution failed (their packets were dropped)
  void clear() {
    frames.clear();
    failed.clear();
  }
};

class ArpCache {
 public:
  ArpCache(PortAddresses port, NetCounters& counters, ArpCacheConfig config = {});

  // The peer's MAC if it is known and has not expired (our own MAC for our own addresses). Hot path: O(1),
  // allocation-free.
  std::optional<wire::MacAddress> lookup(uint32_t ip, Nanos now);

  // Keeps `frame` (a whole Ethernet frame whose bytes 0..5 will be overwritten) until `ip` is resolved,
  // starting the resolution if none runs. Frames for one peer are released in the order they were parked.
  ParkResult park(uint32_t ip, std::vector<uint8_t> frame, Nanos now);

  // `ip` is at `mac` (an ARP request or reply addressed to us): creates or refreshes the entry, releasing
  // its parked frames into out.frames. `mac` must be a unicast address (the responder checks).
  void learn(uint32_t ip, const wire::MacAddress& mac, Nanos now, ArpOutput& out);
  // The same for ARP not addressed to us (gratuitous ARP, other hosts' requests): RFC 826 updates an entry
  // already held but creates none, so that overhearing a LAN does not fill the cache. True if it updated.
  bool update_if_known(uint32_t ip, const wire::MacAddress& mac, Nanos now, ArpOutput& out);

  // Sends due requests and probes, fails resolutions that ran out of retries, drops expired entries.
  void poll(Nanos now, ArpOutput& out);
  // When poll() has something to do at the latest; `never` if nothing is pending. O(1): a cached value
  // that events only lower, so it may come early (that poll finds nothing to do and settles it), never late.
  Nanos next_deadline() const { return next_deadline_; }

  size_t entries() const { return entries_.size(); }
  size_t parked() const { return parked_total_; }
  bool resolving(uint32_t ip) const;

 private:
  struct Entry {
    wire::MacAddress mac;
    bool resolved = false;
    bool used = false;           // looked up since it was (re)learned: worth refreshing before expiry
    unsigned requests_sent = 0;  // broadcast requests while resolving, unicast probes while resolved
    Nanos expires_at = 0;        // resolved entries
    Nanos next_request_at = 0;   // resolving: next request or the failure; resolved: earliest next probe
    std::vector<std::vector<uint8_t>> parked;
  };
  using Map = std::unordered_map<uint32_t, Entry>;

  Entry* make_room_and_insert(uint32_t ip);
  void release(Entry& e, std::vector<std::vector<uint8_t>>& into);
  void send_request(uint32_t ip, const wire::MacAddress& eth_dst, ArpOutput& out);
  uint32_t sender_ip_for(uint32_t target_ip) const;
  Nanos probe_start(const Entry& e) const { return e.expires_at - probe_window_; }
  Nanos deadline_of(const Entry& e) const;

  PortAddresses port_;
  std::vector<uint32_t> our_ipv4_;
  NetCounters& counters_;
  ArpCacheConfig config_;
  Nanos probe_window_;  // probes of an entry in use start this long before it expires
  Map entries_;
  std::vector<std::vector<uint8_t>> ready_;  // parked while the MAC was already known; sent at the next poll
  size_t parked_total_ = 0;
  Nanos next_deadline_ = never;
};

}  // namespace uroce::emulator::net
