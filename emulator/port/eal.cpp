#include "emulator/port/eal.hpp"

#include "emulator/port/dpdk_log.hpp"
#include "emulator/port/interrupt_thread.hpp"

#include <rte_eal.h>
#include <rte_errno.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

namespace uroce::emulator::port {
namespace {
std::atomic<bool> eal_started{false};

// Start-up cost (measured on the 2-core VM, --no-huge, no hugepages): rte_eal_init takes 150-220 ms with
// Debian's shared DPDK (320 ms on a cold page cache). 100 ms of it is EAL's TSC calibration, a plain
// 100 ms sleep when the CPU does not report its TSC frequency (as in this VM); the rest is mostly loading
// plugins: a shared-linked EAL dlopens every library in its compiled-in plugin directory
// (RTE_EAL_PMD_PATH = /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0, ~130 drivers, mlx4/mlx5 and so libibverbs
// included). No option or environment variable turns that scan off, and `-d` only adds more. So `uroced`
// links its drivers statically (no scan, no libibverbs, 115-140 ms) and only `uroced-all-pmds`, run for
// mlx ports, pays for the scan (emulator/dpdk.cmake).
}  // namespace

Eal::Eal(const EalOptions& options) {
  if (eal_started.exchange(true))
    throw EalError("the DPDK EAL was already started in this process (it can start only once)");
  hugepages_ = options.hugepages == HugepageMode::On ||
               (options.hugepages == HugepageMode::Auto && hugepages_usable(options.memory_mb));
  arguments_ = eal_arguments(options, hugepages_, static_cast<int>(getpid()));

  DpdkLogBridge::install();
  std::vector<std::string> owned = arguments_;  // rte_eal_init may permute argv
  std::vector<char*> argv;
  for (auto& arg : owned) argv.push_back(arg.data());
  argv.push_back(nullptr);

  std::string command_line;
  for (const auto& arg : arguments_) command_line += (command_line.empty() ? "" : " ") + arg;
  spdlog::debug("starting DPDK EAL: {}", command_line);
  auto start = std::chrono::steady_clock::now();
  int parsed = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  init_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (parsed < 0) {
    std::string reason = rte_strerror(rte_errno);
    std::string detail = DpdkLogBridge::last_error();
    DpdkLogBridge::uninstall();
    throw EalError("DPDK EAL failed to start (" + command_line + "): " + reason +
                   (detail.empty() ? "" : " - " + detail));
  }
  spdlog::info("DPDK EAL started in {:.0f} ms ({}, {} MB)", init_ms_,
               hugepages_ ? "hugepages" : "no hugepages", options.memory_mb);
}

Eal::~Eal() {
  park_interrupt_thread();  // it would otherwise outlive cleanup and read unmapped sources (interrupt_thread.hpp)
  int rc = rte_eal_cleanup();
  if (rc != 0) spdlog::warn("rte_eal_cleanup failed: {}", rte_strerror(-rc));
  DpdkLogBridge::uninstall();
}

}  // namespace uroce::emulator::port
