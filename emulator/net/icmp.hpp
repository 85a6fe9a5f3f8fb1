// ICMP echo, v4 and v6: the NIC answers ping for its addresses, as an interface with those addresses would,
// so that `ping` (and `ping -6`) tells an operator the port is up and addressed before any RDMA is tried.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "emulator/net/classify.hpp"
#include "emulator/net/counters.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

// 1500-byte IP packet + Ethernet header + one VLAN tag: a standard-MTU ping is answered, a jumbo one only
// if the caller raises the bound.
inline constexpr size_t default_max_icmp_reply_size = 1518;

// Writes the echo reply to `request` (classified FrameClass::icmp_echo_request) into `out`: MACs and IP
// addresses swapped (our MAC as the source, even if the request was broadcast), the request's VLAN tag and
// TOS / traffic class kept, identifier, sequence and payload kept. IPv4: type 0, a fresh 20-byte header
// (request options are not echoed, as Linux does not echo most), both checksums recomputed. IPv6: type
// 129, hop limit 64, flow label 0, the checksum over the new pseudo-header. Returns the size, or 0 if it
// exceeds out.size().
size_t write_icmp_echo_reply(std::span<const uint8_t> request, const Classification& c,
                             const wire::MacAddress& our_mac, uint16_t ip_identification, std::span<uint8_t> out);

class IcmpEchoResponder {
 public:
  IcmpEchoResponder(const wire::MacAddress& our_mac, NetCounters& counters,
                    size_t max_reply_size = default_max_icmp_reply_size)
      : our_mac_(our_mac), counters_(counters), max_reply_size_(max_reply_size) {}

  // The reply to `request` in `out` (bounded by the smaller of out.size() and max_reply_size), or 0 when
  // it would be too large (counted in icmp_echo_too_large).
  size_t on_frame(std::span<const uint8_t> request, const Classification& c, std::span<uint8_t> out);

 private:
  wire::MacAddress our_mac_;
  NetCounters& counters_;
  size_t max_reply_size_;
  uint16_t next_identification_ = 0;  // IPv4 ID of our datagrams: distinct for consecutive replies
};

}  // namespace uroce::emulator::net
