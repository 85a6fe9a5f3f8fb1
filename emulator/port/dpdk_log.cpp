#include "emulator/port/dpdk_log.hpp"

#include <rte_log.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <mutex>
#include <string_view>

namespace uroce::emulator::port {
namespace {

std::mutex state_mutex;
FILE* bridge_stream = nullptr;
std::string pending;     // a message DPDK wrote in several pieces, up to its newline
std::string last_error_text;

std::shared_ptr<spdlog::logger> dpdk_logger() {
  // A logger of its own so its messages are marked [dpdk]; it shares the default logger's sinks, so it
  // writes wherever the daemon's log goes.
  auto logger = spdlog::get("dpdk");
  if (!logger) {
    auto base = spdlog::default_logger();
    logger = std::make_shared<spdlog::logger>("dpdk", base->sinks().begin(), base->sinks().end());
    logger->set_level(spdlog::level::trace);  // rte_log's own level already filtered
    spdlog::register_logger(logger);
  }
  return logger;
}

void emit_line(std::string_view line) {
  if (line.empty()) return;
  // Valid while DPDK is inside rte_log(): the level of the message being written.
  auto level = spdlog_level_for(static_cast<uint32_t>(rte_log_cur_msg_loglevel()));
  if (level >= spdlog::level::err) last_error_text.assign(line);
  dpdk_logger()->log(level, "{}", line);
}

// fopencookie write: rte_vlog does vfprintf + fflush per message, so a call normally carries one whole
// message; lines are split and a trailing piece without newline waits for the rest.
ssize_t write_cookie(void*, const char* data, size_t size) {
  std::lock_guard lock(state_mutex);
  std::string_view text(data, size);
  while (!text.empty()) {
    auto nl = text.find('\n');
    if (nl == std::string_view::npos) {
      pending.append(text);
      break;
    }
    pending.append(text.substr(0, nl));
    emit_line(pending);
    pending.clear();
    text.remove_prefix(nl + 1);
  }
  return static_cast<ssize_t>(size);
}

}  // namespace

uint32_t rte_level_for(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return RTE_LOG_DEBUG;
    case spdlog::level::debug: return RTE_LOG_INFO;
    case spdlog::level::info: return RTE_LOG_NOTICE;
    case spdlog::level::warn: return RTE_LOG_WARNING;
    case spdlog::level::err: return RTE_LOG_ERR;
    case spdlog::level::critical: return RTE_LOG_CRIT;
    default: return RTE_LOG_EMERG;  // off: only what precedes an abort
  }
}

spdlog::level::level_enum spdlog_level_for(uint32_t rte_level) {
  switch (rte_level) {
    case RTE_LOG_EMERG:
    case RTE_LOG_ALERT:
    case RTE_LOG_CRIT: return spdlog::level::critical;
    case RTE_LOG_ERR: return spdlog::level::err;
    case RTE_LOG_WARNING: return spdlog::level::warn;
    case RTE_LOG_NOTICE: return spdlog::level::info;
    case RTE_LOG_INFO: return spdlog::level::debug;
    default: return spdlog::level::trace;
  }
}

void DpdkLogBridge::install() {
  std::lock_guard lock(state_mutex);
  if (bridge_stream) return;
  cookie_io_functions_t io{};
  io.write = write_cookie;
  bridge_stream = fopencookie(nullptr, "w", io);
  if (!bridge_stream) return;  // keep DPDK's default stream rather than fail start-up over logging
  setvbuf(bridge_stream, nullptr, _IOLBF, 0);
  rte_openlog_stream(bridge_stream);
}

void DpdkLogBridge::uninstall() {
  FILE* stream = nullptr;
  {
    std::lock_guard lock(state_mutex);
    stream = bridge_stream;
    bridge_stream = nullptr;
  }
  if (!stream) return;
  rte_openlog_stream(nullptr);
  std::fclose(stream);  // flushes a last partial line through write_cookie (which takes the lock)
  std::lock_guard lock(state_mutex);
  emit_line(pending);
  pending.clear();
}

std::string DpdkLogBridge::last_error() {
  std::lock_guard lock(state_mutex);
  return last_error_text;
}

}  // namespace uroce::emulator::port
