// The transport's boundary with the network: packets leave through a PacketSink, frames arrive as bytes.
//
// The transport decides what to send (transport headers, payload, destination); whoever owns the port
// (the daemon's DPDK engine, the simulation network in tests) wraps it in Ethernet/IP/UDP with the ICRC
// and delivers frames back through Device::receive(). Time is injected: every entry point takes `now`.
#pragma once

#include <cstdint>
#include <span>

#include "transport/verbs/work.hpp"
#include "transport/wire/bth.hpp"

namespace uroce::transport {

using Nanos = uint64_t;  // a point in time, nanoseconds, from whatever clock the caller injects
inline constexpr Nanos never = ~Nanos(0);

struct OutPacket {
  const verbs::AddressVector* destination = nullptr;  // dgid, flow label, traffic class, hop limit
  uint32_t src_qpn = 0;                 // the sending QP (for the UDP source port / flow entropy)
  uint16_t udp_src_port = 0xc000;       // stable per QP, 0xC000-0xFFFF
  bool ecn_capable = false;             // send as ECT(0) so switches may mark CE
  wire::TransportHeaders headers;       // bth.pad_count is derived by the builder
  std::span<const uint8_t> payload;     // valid only during transmit()
};

class PacketSink {
 public:
  virtual ~PacketSink() = default;
  virtual void transmit(const OutPacket& packet) = 0;
  // A whole Ethernet frame a raw packet QP (`sender`) sends, as posted: it goes on the wire as it is, and
  // back to the port's own flow rules where a NIC would loop it back (Device::steer). `frame` is valid
  // only during the call. A sink with no wire for such frames (a test's) drops them.
  virtual void transmit_frame(uint32_t sender, std::span<const uint8_t> frame) {
    (void)sender;
    (void)frame;
  }
};

}  // namespace uroce::transport
