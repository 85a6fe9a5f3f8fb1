// Warns about address conflicts (net/address_conflicts.hpp): at most one line per interval, naming the
// latest address and the MAC that claimed it, so that a station answering ARP or ND for uroced's address
// (the usual cause of a link that loses traffic for no visible reason) shows in the log at once.
#pragma once

#include <cstdint>

#include "emulator/engine/rate_limit.hpp"
#include "emulator/net/address_conflicts.hpp"

namespace uroce::emulator::engine {

class ConflictLog {
 public:
  explicit ConflictLog(uint64_t interval_ns = 10'000'000'000) : limit_(interval_ns) {}
  // Called every engine turn; cheap unless a conflict came since the last line and the interval has passed.
  void maybe_report(uint64_t now, const net::AddressConflicts& conflicts);

 private:
  RateLimit limit_;
  uint64_t reported_ = 0;  // conflicts.count at the last line
};

}  // namespace uroce::emulator::engine
