// The EAL command line the daemon uses, built from its options (pure: no EAL needed, unit-tested).
#pragma once

#include <spdlog/common.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::emulator::port {

enum class HugepageMode { Auto, Off, On };

struct EalOptions {
  std::vector<unsigned> cores{0};   // lcores; the first is the main lcore (the engine's)
  unsigned memory_mb = 256;         // -m: all DPDK memory (mbuf pools live here)
  HugepageMode hugepages = HugepageMode::Auto;  // Auto: use them when enough are free and mounted
  std::vector<std::string> pci_devices;  // PCI addresses to allow (-a); none means --no-pci
  // Shared config (/var/run/dpdk/<prefix>) is only needed for DPDK multi-process, which the daemon
  // does not use (platform.md: it does not work with --no-huge). Off: --no-shconf / --in-memory.
  bool shared_config = false;
  std::string file_prefix;          // with shared_config; empty: "uroce-<pid>", unique per process
  spdlog::level::level_enum log_level = spdlog::level::warn;
  bool telemetry = false;           // DPDK's telemetry socket and thread: not needed, costs a thread
  std::vector<std::string> extra_args;  // appended verbatim (e.g. "-d", "<plugin.so>")
};

// Free hugepage memory in MB from /proc/meminfo's text (HugePages_Free x Hugepagesize).
uint64_t free_hugepage_mb(std::string_view meminfo);
// Whether /proc/mounts' text has a hugetlbfs mount.
bool has_hugetlbfs_mount(std::string_view mounts);
// Both, from the running system: hugepages are usable for `memory_mb` of memory.
bool hugepages_usable(unsigned memory_mb);

// argv for rte_eal_init (argv[0] included). `use_hugepages` is the decision already made.
std::vector<std::string> eal_arguments(const EalOptions& options, bool use_hugepages, int pid);

}  // namespace uroce::emulator::port
