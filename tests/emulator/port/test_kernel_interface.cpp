// What the port asks the kernel about an interface, for names that are no interface: no answer, never
// some other interface's. Needs no root ("lo" is there in every network namespace).
#include "emulator/port/kernel_interface.hpp"

#include "emulator/port/dpdk_port.hpp"

#include <string>

#include <catch2/catch.hpp>

using namespace uroce::emulator::port;

TEST_CASE("The kernel's loopback interface has a link and an MTU") {
  CHECK(kernel_link_up("lo") == true);
  CHECK(kernel_mtu("lo").has_value());
}

TEST_CASE("An interface that does not exist has no link state and no MTU") {
  // DpdkPort::link() then keeps the driver's answer, and the MTU falls back to ethdev's.
  for (const std::string& name : {std::string("no-such-if"), std::string(), std::string(15, 'x')}) {
    INFO(name);
    CHECK_FALSE(kernel_link_up(name).has_value());
    CHECK_FALSE(kernel_mtu(name).has_value());
    CHECK_THROWS_AS(set_kernel_mtu(name, 1500), PortError);
  }
}

TEST_CASE("A name that only a cut would make an interface's is refused") {
  // The kernel reads a name up to its NUL, within IFNAMSIZ bytes: each of these would have asked about "lo".
  for (const std::string& name : {std::string("lo\0x", 4), std::string("lo\0", 3) + std::string(16, 'x')}) {
    CHECK_FALSE(kernel_link_up(name).has_value());
    CHECK_FALSE(kernel_mtu(name).has_value());
    CHECK_THROWS_AS(set_kernel_mtu(name, 1500), PortError);
  }
}
