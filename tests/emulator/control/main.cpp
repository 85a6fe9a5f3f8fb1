// Catch2 v2 entry point for uroce_control_tests. The server logs every session it opens and closes; only
// warnings and worse are shown here, so that a failure's output stays readable.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

int main(int argc, char* argv[]) {
  spdlog::set_level(spdlog::level::warn);
  return Catch::Session().run(argc, argv);
}
