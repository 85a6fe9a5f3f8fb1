// Catch2 v2 entry point for uroce_service_tests. The verbs service logs every session it opens and closes;
// only warnings and worse are shown, so that a failure's output stays readable.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <csignal>
#include <spdlog/spdlog.h>

int main(int argc, char* argv[]) {
  spdlog::set_level(spdlog::level::warn);
  // As uroced does (uroced.cpp): the engine writes event pipes whose reader may be gone; that must be a
  // failed write, not the death of the process.
  std::signal(SIGPIPE, SIG_IGN);
  return Catch::Session().run(argc, argv);
}
