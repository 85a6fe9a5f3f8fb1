#include "emulator/port/eal.hpp"

#include <catch2/catch.hpp>
#include <rte_eal.h>
#include <rte_lcore.h>

#include <algorithm>

#include "test_env.hpp"

using namespace uroce::emulator::port;

TEST_CASE("The EAL runs without hugepages") {
  auto& eal = test::eal();
  const auto& args = eal.arguments();
  CHECK_FALSE(eal.hugepages());
  CHECK(std::find(args.begin(), args.end(), "--no-huge") != args.end());
  CHECK(rte_eal_has_hugepages() == 0);
  CHECK(rte_lcore_count() == 1);
  CHECK(eal.init_milliseconds() > 0);
  WARN("rte_eal_init took " << eal.init_milliseconds() << " ms");
}

TEST_CASE("A second EAL in the same process is refused with a reason") {
  CHECK_THROWS_AS(Eal(EalOptions{}), EalError);
}
