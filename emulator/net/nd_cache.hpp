// The IPv6 neighbour cache: which MAC to send to for a peer's IPv6 address, learned from neighbour
// discovery (RFC 4861), with expiry, resolution with retries, and packets parked while their destination is
// being resolved. It is arp_cache.hpp for IPv6 and behaves exactly as it does (same configuration, same
// parking rules and limits, same timing, the same counters under nd_* names): both are thin wrappers around
// neighbour_table.hpp, which holds the logic and its reasoning.
//
// The differences are those of the protocol: a resolution sends Neighbor Solicitations to the peer's
// solicited-node multicast group (RFC 4861 §7.2.2) instead of broadcast ARP requests, and a refresh of an
// entry in use sends unicast solicitations (§7.3.3's probes). The source address of a solicitation is the
// one of ours that shares the longest prefix with the target (a link-local one for a link-local target).
//
// RFC 4861's states map onto ArpCache's: INCOMPLETE = resolving, REACHABLE = resolved, PROBE = resolved and
// being probed. There is no STALE/DELAY: like ArpCache, an entry is used until it expires, and refreshed
// before that if it is in use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "emulator/net/arp_cache.hpp"
#include "emulator/net/counters.hpp"
#include "emulator/net/neighbour_table.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// Same knobs and defaults as ARP's (RFC 4861's own defaults are close: 3 solicitations 1 s apart).
using NdCacheConfig = ArpCacheConfig;

// What poll() and learn() hand back (frames to send: solicitations and released packets; peers whose
// resolution failed).
struct NdOutput {
  std::vector<std::vector<uint8_t>> frames;
  std::vector<wire::IpAddress> failed;
  void clear() {
    frames.clear();
    failed.clear();
  }
};

struct IpAddressHash {
  size_t operator()(const wire::IpAddress& a) const noexcept;
};

class NdCache {
 public:
  NdCache(PortAddresses port, NetCounters& counters, NdCacheConfig config = {});

  // The peer's MAC if known and not expired (our own MAC for our own addresses). O(1), allocation-free.
  std::optional<wire::MacAddress> lookup(const wire::IpAddress& ip, Nanos now);

  // Keeps `frame` (bytes 0..5 overwritten on release) until `ip` is resolved; starts the resolution.
  ParkResult park(const wire::IpAddress& ip, std::vector<uint8_t> frame, Nanos now);
  // Whether the peer is known; if not, starts resolving it (neighbour_table.hpp's resolve). Our own addresses
  // are known.
  bool resolve(const wire::IpAddress& ip, Nanos now);

  // `ip` is at `mac` (an NS from it to us with its link-layer option, or an NA answering ours): creates or
  // refreshes the entry and releases its parked frames. `mac` must be unicast (the responder checks).
  void learn(const wire::IpAddress& ip, const wire::MacAddress& mac, Nanos now, NdOutput& out);
  // The same, but only for an entry already held (RFC 4861 §7.2.5: an NA for an address without an entry
  // is discarded). True if it updated.
  bool update_if_known(const wire::IpAddress& ip, const wire::MacAddress& mac, Nanos now, NdOutput& out);

  void poll(Nanos now, NdOutput& out);
  Nanos next_deadline() const { return table_.next_deadline(); }

  size_t entries() const { return table_.entries(); }
  size_t parked() const { return table_.parked(); }
  size_t parked_bytes() const { return table_.parked_bytes(); }
  bool resolving(const wire::IpAddress& ip) const { return table_.resolving(ip); }

  // Our address a solicitation for `target` is sent from (:: when the port has no IPv6 address).
  wire::IpAddress source_for(const wire::IpAddress& target) const;

 private:
  void send_solicitation(const wire::IpAddress& ip, const std::optional<wire::MacAddress>& unicast,
                         Frames& out) const;

  PortAddresses port_;
  std::vector<wire::IpAddress> our_ipv6_;
  NeighbourTable<wire::IpAddress, IpAddressHash> table_;
};

}  // namespace uroce::emulator::net
