#include "emulator/port/eal_args.hpp"

#include "emulator/port/dpdk_log.hpp"

#include <charconv>
#include <fstream>
#include <sstream>

namespace uroce::emulator::port {
namespace {

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The number after "key:" in /proc/meminfo's text, 0 if absent.
uint64_t meminfo_value(std::string_view meminfo, std::string_view key) {
  size_t at = 0;
  while ((at = meminfo.find(key, at)) != std::string_view::npos) {
    bool line_start = at == 0 || meminfo[at - 1] == '\n';
    size_t colon = at + key.size();
    if (line_start && colon < meminfo.size() && meminfo[colon] == ':') {
      size_t digit = meminfo.find_first_of("0123456789", colon);
      uint64_t value = 0;
      if (digit != std::string_view::npos)
        std::from_chars(meminfo.data() + digit, meminfo.data() + meminfo.size(), value);
      return value;
    }
    at = colon;
  }
  return 0;
}

}  // namespace

uint64_t free_hugepage_mb(std::string_view meminfo) {
  uint64_t pages = meminfo_value(meminfo, "HugePages_Free");
  uint64_t page_kb = meminfo_value(meminfo, "Hugepagesize");
  return pages * page_kb / 1024;
}

bool has_hugetlbfs_mount(std::string_view mounts) {
  // Lines are "device mountpoint fstype options ..."; match the fstype field.
  std::istringstream lines{std::string(mounts)};
  std::string device, mountpoint, fstype, rest;
  while (lines >> device >> mountpoint >> fstype) {
    if (fstype == "hugetlbfs") return true;
    std::getline(lines, rest);
  }
  return false;
}

bool hugepages_usable(unsigned memory_mb) {
  return free_hugepage_mb(read_file("/proc/meminfo")) >= memory_mb &&
         has_hugetlbfs_mount(read_file("/proc/mounts"));
}

std::vector<std::string> eal_arguments(const EalOptions& options, bool use_hugepages, int pid) {
  std::vector<std::string> args{"uroced"};
  std::string cores;
  for (unsigned core : options.cores) cores += (cores.empty() ? "" : ",") + std::to_string(core);
  args.insert(args.end(), {"-l", cores.empty() ? "0" : cores});
  if (!options.cores.empty()) args.insert(args.end(), {"--main-lcore", std::to_string(options.cores[0])});
  args.insert(args.end(), {"-m", std::to_string(options.memory_mb)});
  if (!use_hugepages) args.push_back("--no-huge");
  if (options.shared_config) {
    args.push_back("--file-prefix=" +
                   (options.file_prefix.empty() ? "uroce-" + std::to_string(pid) : options.file_prefix));
  } else if (use_hugepages) {
    // No files in hugetlbfs or /var/run/dpdk that outlive the process (a crash leaves nothing behind).
    args.push_back("--in-memory");
  } else {
    args.push_back("--no-shconf");  // --in-memory is rejected together with --no-huge
  }
  if (options.pci_devices.empty()) {
    args.push_back("--no-pci");  // no scan of the PCI bus: no device is taken by accident
  } else {
    for (const auto& address : options.pci_devices) args.insert(args.end(), {"-a", address});
  }
  if (!options.telemetry) args.push_back("--no-telemetry");
  args.push_back("--log-level=" + std::to_string(rte_level_for(options.log_level)));
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  return args;
}

}  // namespace uroce::emulator::port
