// af_packet ports on a veth pair the test creates and deletes: real kernel interfaces, traffic only there.
#include "emulator/port/dpdk_port.hpp"

#include <cstdlib>

#include <catch2/catch.hpp>

#include "frames.hpp"
#include "veth_pair.hpp"

using namespace uroce::emulator::port;
using namespace uroce::emulator::port::test;

TEST_CASE("Two af_packet ports on a veth pair exchange frames both ways, jumbo frames included") {
  if (!can_create_interfaces()) {
    WARN("skipped: creating a veth pair needs root and the ip tool");
    return;
  }
  VethPair veth("p", 9000);
  auto a = DpdkPort::open("net_af_packet_a" + veth.a() + ",iface=" + veth.a());
  auto b = DpdkPort::open("net_af_packet_b" + veth.b() + ",iface=" + veth.b());
  CHECK(a->mtu() == 9000);  // the kernel interface's MTU, which is what the kernel enforces
  CHECK(a->link().up);

  std::vector<Frame> a_to_b, b_to_a;
  for (uint32_t i = 0; i < 30; ++i) {
    a_to_b.push_back(make_frame(b->mac(), a->mac(), 60 + i * 50, i));
    b_to_a.push_back(make_frame(a->mac(), b->mac(), 1514, 500 + i));
  }
  a_to_b.push_back(make_frame(b->mac(), a->mac(), 9014, 99));  // 9000 bytes of MTU + Ethernet header
  b_to_a.push_back(make_frame(a->mac(), b->mac(), 9014, 999));
  send_frames(*a, a_to_b);
  CHECK(receive_frames(*b, a_to_b.size()) == a_to_b);
  send_frames(*b, b_to_a);
  CHECK(receive_frames(*a, b_to_a.size()) == b_to_a);
  CHECK(b->stats().ipackets >= a_to_b.size());
}

TEST_CASE("The MTU of an af_packet port is its kernel interface's") {
  if (!can_create_interfaces()) return;
  VethPair veth("m", 1500);
  auto a = DpdkPort::open("net_af_packet_m" + veth.a() + ",iface=" + veth.a());
  CHECK(a->mtu() == 1500);
  a->set_mtu(4200);
  CHECK(a->mtu() == 4200);
}

// DPDK's af_packet driver says "up" for as long as the port runs; the port reports the kernel interface's
// carrier instead (ETHTOOL_GLINK), which is what uroced's port events follow. It is current at once, not a
// second late like the interface's operational state.
TEST_CASE("An af_packet port's link is its kernel interface's carrier") {
  if (!can_create_interfaces()) return;
  VethPair veth("l", 1500);
  auto a = DpdkPort::open("net_af_packet_l" + veth.a() + ",iface=" + veth.a());
  CHECK(a->link().up);
  REQUIRE(std::system(("ip link set " + veth.b() + " down").c_str()) == 0);  // a loses its carrier
  CHECK_FALSE(a->link().up);
  REQUIRE(std::system(("ip link set " + veth.b() + " up").c_str()) == 0);
  CHECK(a->link().up);
  REQUIRE(std::system(("ip link set " + veth.a() + " down").c_str()) == 0);  // a itself down
  CHECK_FALSE(a->link().up);
  REQUIRE(std::system(("ip link set " + veth.a() + " up").c_str()) == 0);
  CHECK(a->link().up);
}
