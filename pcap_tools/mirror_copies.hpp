// Copies of one frame from several mirror points. A fabric mirrored at more than one place (both ends of a
// link, or an ingress and an egress session) shows each frame once per place that saw it. Told as they
// stand, those copies make every frame look retransmitted, every request answered twice. So the commands
// that tell what happened (explain, check, replay) take each frame once, and dissect marks the copies.
//
// A copy is told apart from a retransmission by where it came from: it is the same packet carried by a
// *different* tunnel (session, direction, key or VNI, or ends), while the tunnel that carried it first has
// not carried it again; a packet the same tunnel carries again is sent again. "The same packet" is the
// carried IP packet (or ARP body) byte for byte, except what a router or a switch on the way may change
// (IPv4 TOS and TTL and the header checksum, IPv6 traffic class, flow label and hop limit: the fields the
// ICRC leaves out for the same reason), so mirror points a hop apart, or a switch that marked ECN between
// them, still see copies. The copy told is the first; explain also tells a CE mark that only a later mirror
// point saw (a switch between the two marked it).
// A mirror point that missed a packet's first sending (a mirror drops when its own link is full) and saw
// only the resend makes that resend look like a copy; within the window of a second, nothing tells them
// apart.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pcap_tools/capture_reader.hpp"

namespace uroce::pcap_tools {

class MirrorCopies {
 public:
  // The number of the earlier frame that `frame` (decoded from `r`) is a copy of, or 0: not a copy, not
  // carried by a tunnel, or not a packet compared (malformed, neither IP nor ARP).
  uint64_t copy_of(const Record& r, const wire::Frame& frame);

  // How long a packet is remembered: copies arrive within a switch's latency of each other.
  static constexpr int64_t window_ns = 1'000'000'000;

 private:
  struct Seen {
    uint64_t first = 0;             // the frame whose copies these are
    int64_t time_ns = 0;            // when it was carried
    std::vector<uint64_t> tunnels;  // the tunnels that carried it since
  };
  std::unordered_map<uint64_t, Seen> seen_;          // by packet
  std::deque<std::pair<int64_t, uint64_t>> order_;   // (time, packet), oldest first, to forget
  std::string masked_;                               // scratch: the packet with its mutable fields cleared
};

}  // namespace uroce::pcap_tools
