// Starts the EAL once for the whole test run (it cannot be started twice in a process), then runs Catch2.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "memif_peer.hpp"
#include "test_env.hpp"

namespace uroce::emulator::port::test {
namespace {
std::unique_ptr<Eal> the_eal;
}
Eal& eal() { return *the_eal; }
}  // namespace uroce::emulator::port::test

int main(int argc, char* argv[]) {
  using namespace uroce::emulator::port;
  if (argc == 3 && std::string(argv[1]) == "--memif-peer") return test::run_memif_echo_peer(argv[2]);
  // UROCE_TEST_LOG=debug shows DPDK's and our log; quiet by default.
  const char* level = std::getenv("UROCE_TEST_LOG");
  spdlog::set_level(level ? spdlog::level::from_str(level) : spdlog::level::warn);
  EalOptions options;
  options.memory_mb = 512;  // several jumbo pools (~40 MB each) at once
  options.hugepages = HugepageMode::Off;  // the machine's default; the tests do not depend on hugepages
  options.log_level = spdlog::get_level();
  // UROCE_TEST_EAL_ARGS="--log-level=pmd.net.memif:debug" adds EAL arguments (space separated).
  if (const char* extra = std::getenv("UROCE_TEST_EAL_ARGS")) {
    std::istringstream words(extra);
    for (std::string word; words >> word;) options.extra_args.push_back(word);
  }
  test::the_eal = std::make_unique<Eal>(options);
  int result = Catch::Session().run(argc, argv);
  test::the_eal.reset();
  return result;
}
