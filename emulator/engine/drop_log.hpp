// Rate-limited logging of what the NIC dropped: hostile or unexpected traffic must not flood the log (or
// slow the engine with a line per frame), but an operator should see that it happens and why. At most
// one line per interval, with the counts by reason since the previous line.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "emulator/engine/rate_limit.hpp"
#include "emulator/net/counters.hpp"
#include "transport/device.hpp"

namespace uroce::emulator::engine {

class DropLog {
 public:
  explicit DropLog(uint64_t interval_ns = 1'000'000'000) : limit_(interval_ns) {}
  // Called every engine turn; cheap unless an interval has passed.
  void maybe_report(uint64_t now, const net::NetCounters& net, const transport::DeviceCounters& device);

 private:
  std::map<std::string, uint64_t> snapshot(const net::NetCounters& net, const transport::DeviceCounters& device) const;
  RateLimit limit_;
  std::map<std::string, uint64_t> previous_;
};

}  // namespace uroce::emulator::engine
