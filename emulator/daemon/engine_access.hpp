// How the control thread reaches the transport: by running a function on the engine thread (which alone
// touches the Device) and waiting for it. Tests implement it by calling the function directly.
#pragma once

#include <functional>

#include <nlohmann/json.hpp>

#include "emulator/engine/queue_service.hpp"
#include "transport/device.hpp"

namespace uroce::emulator {

struct EngineContext {
  transport::Device& device;
  engine::QueueService& queues;
  transport::Nanos now;
  // Adds what the engine, the port and the network layer counted (for `uroce stats`).
  std::function<void(nlohmann::json&)> report_counters = [](nlohmann::json&) {};
};

class EngineAccess {
 public:
  virtual ~EngineAccess() = default;
  // Runs `fn` on the engine thread and returns when it has run.
  virtual void run_on_engine(const std::function<void(EngineContext&)>& fn) = 0;
};

}  // namespace uroce::emulator
