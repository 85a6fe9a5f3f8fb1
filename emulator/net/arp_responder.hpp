// The ARP responder: answers requests for the port's IPv4 addresses and feeds what ARP tells about peers
// to the ArpCache.
//
// Rules (RFC 826's merge, tightened as Linux does):
//   - a request for one of our addresses is answered, and its sender learned (the requester is about to
//     talk to us, so we will need its MAC);
//   - a reply addressed to one of our addresses is learned (it answers our request or probe);
//   - any other ARP only refreshes an entry we already hold (a peer's gratuitous ARP after a MAC change);
//   - ARP claiming to come from one of our addresses is never learned: our own announcements looped back
//     are ignored, another station's claim is counted as a conflict;
//   - a sender 0.0.0.0 (an RFC 5227 probe) is answered but not learned, unless it is our own probe
//     reflected back (our MAC as sender): we do not answer ourselves;
//   - a sender MAC that is zero or a group address is bogus: ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "emulator/net/address_conflicts.hpp"
#include "emulator/net/arp_cache.hpp"
#include "emulator/net/classify.hpp"
#include "emulator/net/counters.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"

namespace uroce::emulator::net {

class ArpResponder {
 public:
  // Messages claiming our addresses with another MAC are counted (arp_conflicts) and, given `conflicts`,
  // noted there.
  ArpResponder(const PortAddresses& port, ArpCache& cache, NetCounters& counters,
               AddressConflicts* conflicts = nullptr)
      : port_(port), cache_(cache), counters_(counters), conflicts_(conflicts) {}

  // Handles one frame that classify() said is ARP (`frame.kind == FrameClass::arp`). Writes the reply, if
  // one is due, into `reply` (max_arp_frame_size bytes suffice) and returns its size, else 0. Frames the
  // cache releases because of what was learned are appended to `released`.
  size_t on_frame(const Classification& frame, Nanos now, std::span<uint8_t> reply, ArpOutput& released);

 private:
  const PortAddresses& port_;
  ArpCache& cache_;
  NetCounters& counters_;
  AddressConflicts* conflicts_;
};

}  // namespace uroce::emulator::net
