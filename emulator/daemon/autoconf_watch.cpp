#include "emulator/daemon/autoconf_watch.hpp"

#include <exception>
#include <utility>

namespace uroce::emulator {

AutoconfWatch::AutoconfWatch(boost::asio::io_context& io, EngineAccess& engine, Follow follow,
                             std::chrono::milliseconds period)
    : engine_(engine), follow_(std::move(follow)), poll_(io, period, [this] { return tick(); }) {}

void AutoconfWatch::stop() { poll_.stop(); }

bool AutoconfWatch::tick() {
  std::vector<net::AutoconfAddress> valid;
  try {
    engine_.run_on_engine([&](EngineContext& c) { valid = c.autoconf_addresses(); });
  } catch (const std::exception&) {
    return false;  // the engine has stopped (uroced is on its way out): nothing more to follow
  }
  follow_(valid);
  return true;
}

}  // namespace uroce::emulator
