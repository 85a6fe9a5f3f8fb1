// "At most once per interval", for the engine's warnings (drop_log.hpp, conflict_log.hpp): a line per
// frame would flood the log and slow the engine, one per interval still tells the operator at once.
#pragma once

#include <cstdint>

namespace uroce::emulator::engine {

class RateLimit {
 public:
  explicit RateLimit(uint64_t interval_ns) : interval_ns_(interval_ns) {}
  // True at most once per interval (the first call always); a true answer starts the next interval.
  bool allow(uint64_t now) {
    if (now < next_) return false;
    next_ = now + interval_ns_;
    return true;
  }
  uint64_t interval_ns() const { return interval_ns_; }

 private:
  uint64_t interval_ns_;
  uint64_t next_ = 0;
};

}  // namespace uroce::emulator::engine
