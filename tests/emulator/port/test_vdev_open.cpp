// Opening, reopening and closing ports from devargs (hotplug: probe at open, remove at close).
#include "emulator/port/dpdk_port.hpp"

#include <catch2/catch.hpp>
#include <unistd.h>

#include "veth_pair.hpp"

using namespace uroce::emulator::port;

TEST_CASE("A vdev port can be opened again after it was closed") {
  for (int i = 0; i < 3; ++i) {
    auto port = DpdkPort::open("net_null_again,no-rx=1");
    CHECK(port->name() == "net_null_again");
    rte_mbuf* mbuf = port->alloc();
    REQUIRE(mbuf);
    CHECK(port->tx_burst(&mbuf, 1) == 1);  // net_null frees what it "sends"
  }
}

TEST_CASE("Bad devargs are refused with the reason") {
  CHECK_THROWS_AS(DpdkPort::open("net_no_such_driver0"), PortError);
  CHECK_THROWS_AS(DpdkPort::open("net_af_packet_bad,iface=no-such-interface-x"), PortError);
}

TEST_CASE("A tap port makes its kernel interface, whose MTU it sets") {
  if (!test::can_create_interfaces()) return;
  std::string name = "urt" + std::to_string(getpid()) + "t";  // made and deleted by the tap PMD
  auto port = DpdkPort::open("net_tap_t,iface=" + name);
  CHECK(port->mtu() == 1500);
  port->set_mtu(9000);
  CHECK(port->mtu() == 9000);
  CHECK_THROWS_AS(port->set_mtu(9500), PortError);  // more than an mbuf holds
}
