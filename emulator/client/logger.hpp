// The log of what runs inside an application (liburoce_client, the verbs shim, rsockets).
//
// On the program's stderr, never its stdout, which may be its data (spdlog's default logger writes to
// stdout). Outside spdlog's registry and default logger, which the program may use itself through the same
// shared libspdlog. Its level is $UROCE_LOG_LEVEL (trace, debug, info, warn, error, critical, off), else
// info: the shim's debug lines (why a call failed) are there for anyone who asks.
#pragma once

#include <spdlog/logger.h>

namespace uroce::emulator::client {

spdlog::logger& logger();

}  // namespace uroce::emulator::client
