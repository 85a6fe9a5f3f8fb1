// What the link partner's PAUSE and PFC frames ask of this port: which 802.1p priorities it must hold, and
// until when. A RoCE NIC's MAC does this in hardware; here the engine asks before each frame leaves
// (Engine::send_or_hold) and holds the frames of a paused priority until the pause ends.
//
// PFC (802.1Qbb) names priorities in its class-enable vector, each with a time in quanta of 512 bit times of
// this link; a new frame replaces a priority's time (a refresh extends it, 0 ends it at once). PAUSE
// (802.3x) does the same for every priority. Which priority a frame is: frame_priority, below.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "emulator/net/counters.hpp"
#include "transport/wire/mac_control.hpp"

namespace uroce::emulator::net {

// The 802.1p priority a frame leaving this port has, which the link partner's PFC names: its PCP when it
// is tagged, else 0; with `trust_dscp` (ConnectX's mlnx_qos --trust dscp) an IP frame's DSCP >> 3 instead,
// tagged or not, and 0 for a frame that is not IP. Every frame has one, RoCE or not (ARP, ND, ICMP, IGMP):
// a paused priority holds them all, and PAUSE every frame there is, as an 802.3x MAC stops all data frames.
unsigned frame_priority(std::span<const uint8_t> frame, bool trust_dscp);

class LinkPause {
 public:
  using Nanos = uint64_t;

  // `link_bits_per_second`: what a quantum lasts (512 bit times); the port's speed.
  explicit LinkPause(uint64_t link_bits_per_second) : link_bps_(link_bits_per_second) {}

  // A PAUSE or PFC frame received at `now` (classify() took it: FrameClass::pause).
  void on_frame(const wire::MacControl& m, Nanos now, NetCounters& counters);
  bool paused(unsigned priority, Nanos now) const { return now < until_[priority & 7]; }
  // When the priority's pause ends (0 if it never began): the engine sleeps until then, not spins, while
  // it holds frames of that priority.
  Nanos until(unsigned priority) const { return until_[priority & 7]; }

 private:
  void set(unsigned priority, uint16_t quanta, Nanos now, NetCounters& counters);

  uint64_t link_bps_;
  std::array<Nanos, 8> until_{};
};

}  // namespace uroce::emulator::net
