// IPv6 router discovery, the host's side (RFC 4861 §6.3): what lets uroced reach an off-link IPv6 peer
// without a configured --gateway, as the kernel does for rxe. When the port comes up it sends Router
// Solicitations to all-routers (up to 3, 4 s apart, the first after a random delay of up to 1 s: §6.3.7 and
// §10's constants) until an advertisement answers; from every valid advertisement it keeps
//   - the router as a default router for the advertised Router Lifetime (0 removes it), and
//   - each Prefix Information option with the on-link (L) flag as an on-link prefix for its Valid Lifetime
//     (0 removes it): destinations under it are reached directly, not through the router (§6.3.4).
// The router's source link-layer option goes to the neighbour cache (the engine does that). Entries expire
// when their lifetime is over; the tables are bounded, and advertisements beyond them are counted and
// ignored. Addresses of our own under the prefixes marked autonomous (SLAAC, RFC 4862) are
// address_autoconf.hpp's.
//
// A configured gateway (routes.hpp) takes precedence over a learned router, and configured subnets over
// learned prefixes; the engine asks here only for what its configuration leaves open.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/router_discovery_frames.hpp"
#include "emulator/net/routes.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// What poll() hands back: the solicitations to send.
struct RouterDiscoveryOutput {
  std::vector<std::vector<uint8_t>> frames;
  void clear() { frames.clear(); }
};

struct RouterDiscoveryConfig {
  bool enabled = true;
  unsigned solicitations = 3;                    // MAX_RTR_SOLICITATIONS
  Nanos solicitation_interval = seconds(4);      // RTR_SOLICITATION_INTERVAL
  Nanos max_first_delay = seconds(1);            // MAX_RTR_SOLICITATION_DELAY
  size_t max_routers = 4;
  size_t max_prefixes = 16;
};

class RouterDiscovery {
 public:
  // Reads the port's MAC, VLAN tag and link-local address once. Solicitations need a link-local source
  // (§4.1 allows :: too, but then without the link-layer option); a port without an IPv6 address sends none.
  RouterDiscovery(const PortAddresses& port, NetCounters& counters, RouterDiscoveryConfig config = {});

  // The port is up: solicitations start (after the random delay).
  void start(Nanos now);
  void on_advertisement(const RouterAdvertisement& ra, Nanos now);

  // Appends the solicitation due at `now`, if any, to `out`.
  void poll(Nanos now, RouterDiscoveryOutput& out);
  Nanos next_deadline() const { return next_solicitation_; }

  // The default router to send off-link traffic to: the first learned one whose lifetime is not over.
  std::optional<wire::IpAddress> default_router(Nanos now) const;
  // Whether `dst` lies under a learned on-link prefix that has not expired.
  bool on_link(const wire::IpAddress& dst, Nanos now) const;

  size_t routers(Nanos now) const;
  size_t prefixes(Nanos now) const;

 private:
  struct Router {
    wire::IpAddress address;
    Nanos expires = 0;
  };
  struct Prefix {
    Subnet subnet;
    Nanos expires = 0;
  };
  void learn_router(const RouterAdvertisement& ra, Nanos now);
  void learn_prefix(const AdvertisedPrefix& p, Nanos now);

  wire::MacAddress mac_;
  std::optional<uint16_t> vlan_tci_;
  std::optional<wire::IpAddress> source_;  // our link-local address
  NetCounters& counters_;
  RouterDiscoveryConfig config_;
  uint64_t seed_;
  unsigned solicitations_sent_ = 0;
  Nanos next_solicitation_ = never;
  std::vector<Router> routers_;
  std::vector<Prefix> prefixes_;
};

}  // namespace uroce::emulator::net
