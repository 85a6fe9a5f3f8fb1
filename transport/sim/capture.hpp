// Watching the simulated wire: every frame the network builds, delivers or drops can be reported to one
// hook, e.g. a PcapWriter so that a failing property test leaves a file for `uroce dissect`/`explain`.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "transport/sim/types.hpp"

namespace uroce::sim {

enum class CapturePoint : uint8_t {
  transmitted,  // as the sender put it on the wire (once per transmit, before any impairment)
  delivered,    // as the receiver gets it (each duplicate, corrupted bits included), at arrival time
  dropped,      // where and when the network dropped it; `reason` says why
};

struct CaptureEvent {
  CapturePoint point = CapturePoint::transmitted;
  Nanos time = 0;
  NodeId from = no_node;
  NodeId to = no_node;                      // no_node for an unknown destination
  DropReason reason = DropReason::none;     // for CapturePoint::dropped
  bool corrupted = false;                   // a bit of this copy was flipped
  std::span<const uint8_t> frame;           // valid during the call; empty if no frame could be built
};

using CaptureHook = std::function<void(const CaptureEvent&)>;

}  // namespace uroce::sim
