// What the simulation network drives: exactly the engine half of transport::Device, so that the network
// can be tested with scripted fakes and later run real devices through DeviceEndpoint.
#pragma once

#include <cstdint>
#include <span>

#include "transport/sim/types.hpp"

namespace uroce::sim {

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  virtual void receive(std::span<const uint8_t> frame, Nanos now) = 0;  // one Ethernet frame, as delivered
  virtual void run(Nanos now) = 0;
  virtual Nanos next_deadline() const = 0;     // never when no timer is armed
  virtual bool has_pending_work() const = 0;   // wants run() at the current instant
};

}  // namespace uroce::sim
