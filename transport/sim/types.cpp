#include "transport/sim/types.hpp"

namespace uroce::sim {

std::string_view to_string(DropReason reason) {
  switch (reason) {
    case DropReason::none: return "none";
    case DropReason::loss: return "loss";
    case DropReason::queue_full: return "queue full";
    case DropReason::blackhole: return "blackhole";
    case DropReason::unknown_destination: return "unknown destination";
    case DropReason::invalid_packet: return "invalid packet";
  }
  return "?";
}

}  // namespace uroce::sim
