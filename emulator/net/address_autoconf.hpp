// Stateless address autoconfiguration (SLAAC, RFC 4862 §5.5.3), the host's side: a Router Advertisement's
// Prefix Information option with the autonomous (A) flag gives the port an address under that prefix, as
// the kernel gives a RoCE NIC's netdev one (and with it a GID) on a network whose router advertises one.
// The interface identifier is the modified EUI-64 of the port's MAC (RFC 4291 appendix A), the one of its
// link-local address and Linux's default (addr_gen_mode eui64), so the address is the same at every start.
//
// Only the rules live here: which prefixes form addresses, and how long each address lives. The engine
// feeds advertisements in; the control thread asks for the addresses now valid and adds or removes them in
// the port's GID table as `uroce address add|del` would (emulator/daemon/port_address_service.hpp).
//
// §5.5.3, for each option: (a) no A flag, (b) a link-local prefix and (c) a preferred lifetime over the
// valid lifetime are ignored; (d) a new prefix with a nonzero valid lifetime forms an address, when its
// length and the identifier's 64 bits make 128 (otherwise it is ignored and counted); (e) a prefix that
// formed an address refreshes its lifetimes, the valid lifetime with the "two hours" rule, so that an
// unauthenticated advertisement cannot end an address at once: a new valid lifetime is taken if it is over
// two hours or over what remains, what remains is kept if it is two hours or less, and otherwise it becomes
// two hours. An address whose valid lifetime is over is gone; one past its preferred lifetime is deprecated
// (still valid, reported as such).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "emulator/net/counters.hpp"
#include "emulator/net/router_discovery_frames.hpp"
#include "emulator/net/routes.hpp"
#include "emulator/net/time.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

struct AutoconfAddress {
  Subnet subnet;          // the address formed, with its prefix's length (64)
  Nanos valid_until = 0;  // `never` for an infinite lifetime
  Nanos preferred_until = 0;
};

class AddressAutoconf {
 public:
  static constexpr size_t default_max_addresses = 16;

  // `enabled` false: every option is ignored (uroced --no-slaac, or no real port).
  AddressAutoconf(const wire::MacAddress& mac, NetCounters& counters, bool enabled,
                  size_t max_addresses = default_max_addresses);

  void on_prefix(const AdvertisedPrefix& p, Nanos now);
  // The addresses whose valid lifetime is not over at `now`, in the order they were formed.
  std::vector<AutoconfAddress> addresses(Nanos now) const;

 private:
  wire::IpAddress address_under(const wire::IpAddress& prefix) const;

  wire::MacAddress mac_;
  NetCounters& counters_;
  bool enabled_;
  size_t max_addresses_;
  std::vector<AutoconfAddress> addresses_;
};

}  // namespace uroce::emulator::net
