// rdma_cm's service level on a VLAN: Linux's TOS -> priority table, then the egress QoS map.
#include <catch2/catch.hpp>

#include "transport/cm/service_level.hpp"

using uroce::cm::EgressQosMap;
using uroce::cm::priority_of_tos;
using uroce::cm::service_level_of_tos;

TEST_CASE("a TOS becomes Linux's packet priority (rt_tos2priority)", "[cm][service_level]") {
  // net/ipv4/route.c's ip_tos2prio, indexed by (tos & 0x1e) >> 1, spelt out here as Linux has it.
  constexpr uint8_t linux_table[16] = {0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6, 4, 4, 4, 4};
  for (unsigned tos = 0; tos < 256; ++tos) {
    INFO("tos " << tos);
    CHECK(priority_of_tos(uint8_t(tos)) == linux_table[(tos & 0x1e) >> 1]);
  }
  CHECK(priority_of_tos(0x00) == 0);  // the default
  CHECK(priority_of_tos(0x08) == 2);  // IPTOS_THROUGHPUT: bulk
  CHECK(priority_of_tos(0x10) == 6);  // IPTOS_LOWDELAY: interactive
  CHECK(priority_of_tos(0x18) == 4);  // both: interactive bulk
  CHECK(priority_of_tos(0x68) == 2);  // AF31: only the low DSCP bits count
  CHECK(priority_of_tos(0xb8) == 4);  // EF
  CHECK(priority_of_tos(0x03) == 0);  // ECN bits do not count
}

TEST_CASE("the egress QoS map turns the priority into the SL", "[cm][service_level]") {
  const EgressQosMap none{};
  CHECK(service_level_of_tos(0x10, none) == 0);  // a VLAN device's map starts empty: everything at 0

  EgressQosMap map{};
  map[0] = 3;  // egress-qos-map 0:3 6:5
  map[6] = 5;
  CHECK(service_level_of_tos(0x00, map) == 3);
  CHECK(service_level_of_tos(0x10, map) == 5);
  CHECK(service_level_of_tos(0x08, map) == 0);  // priority 2 is not mapped
}
