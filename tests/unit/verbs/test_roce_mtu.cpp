// The RoCE port's active MTU from its IP MTU: Linux's iboe_get_mtu keeps 96 bytes for the headers
// (IPv6-sized IP header 40, UDP 8, BTH 12, XRCETH 4, AtomicETH 28, ICRC 4). The figures below are that
// arithmetic done by hand at each boundary.
#include <catch2/catch.hpp>

#include "transport/verbs/types.hpp"

using uroce::verbs::largest_roce_mtu;
using uroce::verbs::Mtu;

TEST_CASE("largest_roce_mtu: Linux's iboe_get_mtu boundaries", "[verbs][mtu]") {
  CHECK(largest_roce_mtu(1500) == Mtu::mtu_1024);  // Ethernet's default
  CHECK(largest_roce_mtu(9000) == Mtu::mtu_4096);  // jumbo frames
  CHECK(largest_roce_mtu(4200) == Mtu::mtu_4096);
  CHECK(largest_roce_mtu(4192) == Mtu::mtu_4096);  // 4096 + 96
  CHECK(largest_roce_mtu(4191) == Mtu::mtu_2048);
  CHECK(largest_roce_mtu(2144) == Mtu::mtu_2048);
  CHECK(largest_roce_mtu(2143) == Mtu::mtu_1024);
  CHECK(largest_roce_mtu(1120) == Mtu::mtu_1024);
  CHECK(largest_roce_mtu(1119) == Mtu::mtu_512);   // an IPv4-only count (72 bytes) would say 1024
  CHECK(largest_roce_mtu(608) == Mtu::mtu_512);
  CHECK(largest_roce_mtu(607) == Mtu::mtu_256);
  CHECK(largest_roce_mtu(352) == Mtu::mtu_256);
  CHECK(largest_roce_mtu(351) == Mtu(0));          // nothing fits
  CHECK(largest_roce_mtu(351, Mtu::mtu_256) == Mtu::mtu_256);
  CHECK(largest_roce_mtu(65535) == Mtu::mtu_4096);
}
