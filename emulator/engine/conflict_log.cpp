#include "emulator/engine/conflict_log.hpp"

#include <spdlog/spdlog.h>

namespace uroce::emulator::engine {

void ConflictLog::maybe_report(uint64_t now, const net::AddressConflicts& conflicts) {
  if (conflicts.count == reported_ || !limit_.allow(now)) return;
  spdlog::warn("address {} is also in use by {} on this link ({} conflicting ARP/ND message(s) since the last "
               "warning): peers that learn that MAC send it our traffic",
               wire::to_string(conflicts.address), wire::to_string(conflicts.claimed_by),
               conflicts.count - reported_);
  reported_ = conflicts.count;
}

}  // namespace uroce::emulator::engine
