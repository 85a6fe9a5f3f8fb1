#include "emulator/client/logger.hpp"

#include <cstdlib>
#include <memory>

#include <spdlog/sinks/stdout_sinks.h>  // (stderr_sink_mt too)

namespace uroce::emulator::client {

spdlog::logger& logger() {
  // Never destroyed: a program's last verbs calls may come from its atexit handlers and static
  // destructors, after this library's own statics are gone.
  static spdlog::logger* const log = [] {
    auto* l = new spdlog::logger("uroce", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("uroce[%P] %l: %v");
    const char* level = std::getenv("UROCE_LOG_LEVEL");
    l->set_level(level != nullptr && *level != '\0' ? spdlog::level::from_str(level) : spdlog::level::info);
    return l;
  }();
  return *log;
}

}  // namespace uroce::emulator::client
