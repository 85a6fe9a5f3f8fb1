#include "emulator/port/eal_args.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace uroce::emulator::port;

namespace {
bool has(const std::vector<std::string>& args, const std::string& arg) {
  return std::find(args.begin(), args.end(), arg) != args.end();
}
}  // namespace

TEST_CASE("EAL arguments without hugepages need no system set-up") {
  EalOptions options;
  options.cores = {1};
  options.memory_mb = 128;
  auto args = eal_arguments(options, false, 42);
  CHECK(has(args, "--no-huge"));
  CHECK(has(args, "--no-shconf"));
  CHECK(has(args, "--no-pci"));
  CHECK(has(args, "--no-telemetry"));
  CHECK_FALSE(has(args, "--in-memory"));  // EAL rejects it together with --no-huge
  auto m = std::find(args.begin(), args.end(), "-m");
  REQUIRE(m != args.end());
  CHECK(*(m + 1) == "128");
  auto l = std::find(args.begin(), args.end(), "-l");
  REQUIRE(l != args.end());
  CHECK(*(l + 1) == "1");
}

TEST_CASE("EAL arguments with hugepages leave nothing behind, shared config gets a unique prefix") {
  EalOptions options;
  auto args = eal_arguments(options, true, 42);
  CHECK_FALSE(has(args, "--no-huge"));
  CHECK(has(args, "--in-memory"));
  options.shared_config = true;
  args = eal_arguments(options, true, 42);
  CHECK(has(args, "--file-prefix=uroce-42"));
  CHECK_FALSE(has(args, "--in-memory"));
}

TEST_CASE("EAL arguments allow the PCI devices asked for and map the log level") {
  EalOptions options;
  options.cores = {0, 1};
  options.pci_devices = {"0000:03:00.0"};
  options.log_level = spdlog::level::err;
  auto args = eal_arguments(options, false, 1);
  CHECK_FALSE(has(args, "--no-pci"));
  auto a = std::find(args.begin(), args.end(), "-a");
  REQUIRE(a != args.end());
  CHECK(*(a + 1) == "0000:03:00.0");
  CHECK(has(args, "0,1"));
  CHECK(has(args, "--log-level=4"));  // RTE_LOG_ERR
}

TEST_CASE("Hugepages are detected from /proc/meminfo and /proc/mounts") {
  CHECK(free_hugepage_mb("HugePages_Total:     512\nHugePages_Free:      256\nHugepagesize:       2048 kB\n") ==
        512);
  CHECK(free_hugepage_mb("HugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n") ==
        0);
  CHECK(free_hugepage_mb("") == 0);
  CHECK(has_hugetlbfs_mount("proc /proc proc rw 0 0\nhugetlbfs /dev/hugepages hugetlbfs rw,relatime 0 0\n"));
  CHECK_FALSE(has_hugetlbfs_mount("proc /proc proc rw 0 0\nnone /mnt/hugetlbfs tmpfs rw 0 0\n"));
}
