// Hands the addresses stateless autoconfiguration holds valid (net/address_autoconf.hpp, on the engine
// thread) to the control thread's port address service, which adds and removes them in the GID table. The
// engine learns prefixes from Router Advertisements; the table belongs to the control thread, whose
// changes reach the engine, the services and every client together (port_address_service.hpp). It polls,
// as LinkWatch does: lifetimes are seconds long at the least, and a look costs one trip to the engine.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "emulator/daemon/engine_access.hpp"
#include "emulator/daemon/periodic.hpp"
#include "emulator/net/address_autoconf.hpp"

namespace uroce::emulator {

class AutoconfWatch {
 public:
  static constexpr std::chrono::milliseconds default_period{500};
  using Follow = std::function<void(const std::vector<net::AutoconfAddress>& valid)>;

  // Every `period`, asks the engine for the valid addresses and calls `follow` with them on the
  // io_context's thread.
  AutoconfWatch(boost::asio::io_context& io, EngineAccess& engine, Follow follow,
                std::chrono::milliseconds period = default_period);
  // Stops polling, so that io_context::run can return.
  void stop();

 private:
  bool tick();

  EngineAccess& engine_;
  Follow follow_;
  Periodic poll_;  // last: it starts once the rest is set
};

}  // namespace uroce::emulator
