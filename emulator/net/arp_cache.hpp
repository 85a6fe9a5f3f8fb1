// The ARP cache: which MAC to send to for a peer's IPv4 address, learned from ARP, with expiry, resolution
// with retries, and packets parked while their destination is being resolved.
//
// How the engine (one thread, burst loop) uses it:
//   - building a frame: lookup(ip, now). A hit is one hash probe, no allocation, no system call.
//   - on a miss: build the frame anyway with any destination MAC and park() it; the cache resolves the peer.
//   - ARP frames received: arp_responder.hpp calls learn() / update_if_known().
//   - whenever now >= next_deadline() (and after park()): poll(now, out), then transmit out.frames in order.
//
// The entries, parking, timers and their reasons are neighbour_table.hpp's, shared with NdCache; what is
// ARP's is here: requests are broadcast ARP requests (unicast ones as refresh probes), sent from our IPv4
// address closest to the peer, and the counters are the arp_* ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/neighbour_table.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

using ArpCacheConfig = NeighbourCacheConfig;

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
  // Whether the peer is known; if not, starts resolving it (neighbour_table.hpp's resolve). Our own addresses
  // are known.
  bool resolve(uint32_t ip, Nanos now);

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
  Nanos next_deadline() const { return table_.next_deadline(); }

  size_t entries() const { return table_.entries(); }
  size_t parked() const { return table_.parked(); }
  size_t parked_bytes() const { return table_.parked_bytes(); }
  bool resolving(uint32_t ip) const { return table_.resolving(ip); }

 private:
  void send_request(uint32_t ip, const std::optional<wire::MacAddress>& unicast, Frames& out) const;
  uint32_t sender_ip_for(uint32_t target_ip) const;

  PortAddresses port_;
  std::vector<uint32_t> our_ipv4_;
  NeighbourTable<uint32_t> table_;
};

}  // namespace uroce::emulator::net
