// DPDK's own log (rte_log) routed into spdlog, so the daemon has one log with one format and one level.
#pragma once

#include <spdlog/common.h>

#include <cstdint>
#include <string>

namespace uroce::emulator::port {

// The rte_log level (RTE_LOG_EMERG=1 ... RTE_LOG_DEBUG=8) that lets through what `level` would show.
// DPDK's debug output is very chatty (every memseg, every plugin), so spdlog's debug maps to DPDK's INFO
// and only trace opens DPDK's DEBUG.
uint32_t rte_level_for(spdlog::level::level_enum level);
// The reverse, for one message DPDK logs.
spdlog::level::level_enum spdlog_level_for(uint32_t rte_level);

// Points rte_log at a stream whose writes become spdlog messages (logger "dpdk"). Safe to call before
// rte_eal_init, which is the point: EAL's start-up messages (and its reasons for failing) are kept.
// install() is idempotent; uninstall() restores DPDK's default stream (stderr + syslog).
class DpdkLogBridge {
 public:
  static void install();
  static void uninstall();
  // The last message DPDK logged at ERR or worse (empty if none): rte_eal_init explains its failures only
  // in the log, so Eal puts this into its exception.
  static std::string last_error();
};

}  // namespace uroce::emulator::port
