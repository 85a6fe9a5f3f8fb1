// Next hops: on-link destinations go straight, others through the family's gateway, or nowhere.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "emulator/net/routes.hpp"

using uroce::emulator::net::parse_subnet;
using uroce::emulator::net::Routes;
using uroce::emulator::net::Subnet;
using uroce::wire::IpAddress;

namespace {

IpAddress ip(const char* text) { return *uroce::wire::parse_ip(text); }
Subnet net(const char* text) { return *parse_subnet(text); }

}  // namespace

TEST_CASE("routes: parse_subnet takes an address with or without a prefix length", "[routes]") {
  CHECK(net("10.81.1.1/24").prefix_length == 24);
  CHECK(net("10.81.1.1/24").address == ip("10.81.1.1"));
  CHECK(net("10.81.1.1").prefix_length == 0);
  CHECK(net("fd81:1::1/64").prefix_length == 64);
  CHECK(net("10.0.0.1/32").prefix_length == 32);
  CHECK(net("fd00::1/128").prefix_length == 128);
  CHECK_FALSE(parse_subnet("10.0.0.1/33"));
  CHECK_FALSE(parse_subnet("fd00::1/129"));
  CHECK_FALSE(parse_subnet("10.0.0.1/"));
  CHECK_FALSE(parse_subnet("10.0.0.1/2x"));
  CHECK_FALSE(parse_subnet("10.0.0.1/-1"));
  CHECK_FALSE(parse_subnet("10.0.0/24"));
  CHECK_FALSE(parse_subnet("/24"));
}

TEST_CASE("routes: subnets contain what shares their prefix, bit by bit", "[routes]") {
  CHECK(net("10.81.1.1/24").contains(ip("10.81.1.200")));
  CHECK_FALSE(net("10.81.1.1/24").contains(ip("10.81.2.1")));
  CHECK(net("10.81.1.1/23").contains(ip("10.81.0.5")));
  CHECK_FALSE(net("10.81.1.1/23").contains(ip("10.81.2.5")));
  CHECK(net("10.81.1.1/0").contains(ip("192.0.2.7")));
  CHECK_FALSE(net("10.81.1.1/0").contains(ip("fd00::1")));  // never across families
  CHECK(net("fd81:1::1/64").contains(ip("fd81:1::99")));
  CHECK_FALSE(net("fd81:1::1/64").contains(ip("fd81:2::1")));
  CHECK(net("fd81:1::1/60").contains(ip("fd81:1:0:f::1")));
  CHECK_FALSE(net("fd81:1::1/60").contains(ip("fd81:1:0:10::1")));
}

TEST_CASE("routes: on the link, through the gateway, or no route", "[routes]") {
  const Routes r({net("10.81.1.1/24"), net("fd81:1::1/64")}, {ip("10.81.1.254"), ip("fd81:1::fe")});
  CHECK(r.next_hop(ip("10.81.1.9")) == ip("10.81.1.9"));
  CHECK(r.next_hop(ip("10.81.2.1")) == ip("10.81.1.254"));
  CHECK(r.next_hop(ip("fd81:1::9")) == ip("fd81:1::9"));
  CHECK(r.next_hop(ip("fd81:2::1")) == ip("fd81:1::fe"));
  CHECK(r.next_hop(ip("fe80::1234")) == ip("fe80::1234"));  // link-local: always on the link

  const Routes no_gateway({net("10.81.1.1/24")}, {});
  CHECK(no_gateway.next_hop(ip("10.81.1.2")) == ip("10.81.1.2"));
  CHECK_FALSE(no_gateway.next_hop(ip("10.81.9.9")));
  // A family with no subnet at all is on the link, as an address without a prefix makes it.
  CHECK(no_gateway.next_hop(ip("fd00::5")) == ip("fd00::5"));
  const Routes legacy({net("10.81.1.1")}, {});
  CHECK(legacy.next_hop(ip("172.16.0.1")) == ip("172.16.0.1"));
  CHECK(Routes().next_hop(ip("8.8.8.8")) == ip("8.8.8.8"));
}

TEST_CASE("routes: gateways that cannot be are refused", "[routes]") {
  CHECK_THROWS_AS(Routes({net("10.81.1.1/24")}, {ip("10.81.2.254")}), std::invalid_argument);  // off the link
  CHECK_THROWS_AS(Routes({net("10.81.1.1/24")}, {ip("fd81:1::fe")}), std::invalid_argument);   // no IPv6 address
  CHECK_THROWS_AS(Routes({net("10.81.1.1/24")}, {ip("10.81.1.254"), ip("10.81.1.253")}), std::invalid_argument);
  CHECK_THROWS_AS(Routes({net("10.81.1.1/0")}, {ip("224.0.0.1")}), std::invalid_argument);  // a group
  CHECK_NOTHROW(Routes({net("10.81.1.1/24")}, {ip("10.81.1.254")}));
}
