// Names shared by the simulation network's pieces: node ids, the clock type, and why frames are lost.
#pragma once

#include <cstdint>
#include <string_view>

#include "transport/packet_io.hpp"

namespace uroce::sim {

using transport::Nanos;
using transport::never;

// Index of a node in its SimNetwork, in the order add_node() was called.
using NodeId = uint32_t;
inline constexpr NodeId no_node = ~NodeId(0);

enum class DropReason : uint8_t {
  none,
  loss,                 // the link's loss probability
  queue_full,           // tail drop: the link's queue would exceed its byte limit
  blackhole,            // the link or one of its nodes is down, or the destination has no endpoint
  unknown_destination,  // no node owns the destination IP address
  invalid_packet,       // no destination, an sgid_index the node does not have, or the builder refused it
};

std::string_view to_string(DropReason reason);

}  // namespace uroce::sim
