// How the control thread reaches the transport: by running a function on the engine thread (which alone
// touches the Device) and waiting for it. Tests implement it by calling the function directly.
#pragma once

#include <functional>

#include <nlohmann/json.hpp>

#include "emulator/engine/queue_service.hpp"
#include "transport/device.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator {

struct EngineContext {
  transport::Device& device;
  engine::QueueService& queues;
  transport::Nanos now;
  // Adds what the engine, the port and the network layer counted (for `uroce stats`).
  std::function<void(nlohmann::json&)> report_counters = [](nlohmann::json&) {};
  // Whether the port knows the link-layer address of `ip` (ARP or neighbour discovery); if not, starts
  // finding it. Our own addresses and groups are known at once. rdma_resolve_addr waits for it, as Linux's
  // does. (Tests' engines know every address.)
  std::function<bool(const wire::IpAddress&)> neighbour_known = [](const wire::IpAddress&) { return true; };
  // Whether the port has a route to `ip`: on the link, or through a configured gateway or a router learned
  // from IPv6 router discovery. (Tests' engines route everything.)
  std::function<bool(const wire::IpAddress&)> has_route = [](const wire::IpAddress&) { return true; };
};

class EngineAccess {
 public:
  virtual ~EngineAccess() = default;
  // Runs `fn` on the engine thread and returns when it has run.
  virtual void run_on_engine(const std::function<void(EngineContext&)>& fn) = 0;
};

}  // namespace uroce::emulator
