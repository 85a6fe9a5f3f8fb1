// The neighbour discovery responder: answers Neighbor Solicitations for the port's IPv6 addresses and feeds
// what NS and NA tell about peers to the NdCache. arp_responder.hpp for IPv6, RFC 4861 §7.2.3-7.2.5:
//   - an NS for one of our addresses is answered with a solicited NA (Solicited and Override set, our MAC
//     as the target link-layer option) to its source, and its source learned when it carries a source
//     link-layer option (the soliciting node is about to talk to us);
//   - an NS from :: (duplicate address detection by a node that wants our address) is answered to
//     all-nodes, not Solicited, as §7.2.4 requires, and nothing is learned;
//   - an NA with a target link-layer option updates an entry we hold (it answers our NS or probe; §7.2.5:
//     an NA for an address without an entry is discarded);
//   - an NS for another station only refreshes an entry we already hold;
//   - NS/NA claiming to come from one of our addresses is ignored (our own multicast looped back); an NA
//     advertising one of our addresses with another MAC is counted as a conflict;
//   - a link-layer address that is zero or a group address is bogus: nothing is learned from it.
// Validation (hop limit, checksum, lengths, ...) happened in classify() (nd_frames.hpp's parse_nd).
#pragma once

#include <cstddef>
#include <span>

#include "emulator/net/address_conflicts.hpp"
#include "emulator/net/classify.hpp"
#include "emulator/net/counters.hpp"
#include "emulator/net/nd_cache.hpp"
#include "emulator/net/port_addresses.hpp"
#include "emulator/net/time.hpp"

namespace uroce::emulator::net {

class NdResponder {
 public:
  // Messages claiming our addresses with another MAC are counted (nd_conflicts) and, given `conflicts`,
  // noted there.
  NdResponder(const PortAddresses& port, NdCache& cache, NetCounters& counters,
              AddressConflicts* conflicts = nullptr)
      : port_(port), cache_(cache), counters_(counters), conflicts_(conflicts) {}

  // Handles one frame classified FrameClass::nd. Writes the NA, if one is due, into `reply`
  // (max_nd_frame_size bytes suffice) and returns its size, else 0. Frames the cache releases because of
  // what was learned are appended to `released`.
  size_t on_frame(const Classification& frame, Nanos now, std::span<uint8_t> reply, NdOutput& released);

 private:
  const PortAddresses& port_;
  NdCache& cache_;
  NetCounters& counters_;
  AddressConflicts* conflicts_;

  void conflict(const wire::IpAddress& ip, const wire::MacAddress& mac);
};

}  // namespace uroce::emulator::net
