// Another station using one of our addresses. The ARP and ND responders note every message that claims one
// of them with another MAC: a peer's announcement, or its answer to the probes the engine sends at start
// (an ARP probe from 0.0.0.0, RFC 5227 §2.1.1; a Neighbor Solicitation from ::, RFC 4862 §5.4.2). Such
// a station takes traffic meant for us whenever a peer's cache holds its MAC, which looks like random loss.
// uroced does not give the address up (it has no other); the engine warns, engine/conflict_log.hpp.
#pragma once

#include <cstdint>

#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

struct AddressConflicts {
  uint64_t count = 0;             // messages claiming our addresses, ARP and ND together
  wire::IpAddress address;        // the latest one's address ...
  wire::MacAddress claimed_by;    // ... and the MAC that claimed it

  void note(const wire::IpAddress& ip, const wire::MacAddress& mac) {
    ++count;
    address = ip;
    claimed_by = mac;
  }
};

}  // namespace uroce::emulator::net
