// Which GID a connection goes out from (rdma_cm's address resolution and the CM's MADs): same family, and
// for IPv6 the same scope.
#include <catch2/catch.hpp>

#include "emulator/daemon/source_gid.hpp"
#include "tests/unit/transport/transport_fixture.hpp"

namespace uroce::test::service {
namespace {

using emulator::is_link_local;
using emulator::is_loopback;
using emulator::is_wildcard;
using emulator::source_gid_index;

TEST_CASE("source GID: the same family, and for IPv6 the same scope", "[source-gid]") {
  // As uroced orders them: IPv4, configured IPv6, then the link-local one.
  const std::vector<wire::IpAddress> gids{ip("10.0.0.1"), ip("fd00::1"), ip("fe80::5054:ff:fe00:1")};
  CHECK(source_gid_index(gids, ip("10.0.0.2")) == 0u);
  CHECK(source_gid_index(gids, ip("127.0.0.1")) == 0u);
  CHECK(source_gid_index(gids, ip("fd00::2")) == 1u);
  CHECK(source_gid_index(gids, ip("2001:db8::7")) == 1u);
  CHECK(source_gid_index(gids, ip("::1")) == 1u);
  CHECK(source_gid_index(gids, ip("fe80::1")) == 2u);
  CHECK(source_gid_index(gids, ip("febf::1")) == 2u);  // fe80::/10 ends at febf
}

TEST_CASE("source GID: another scope of the family when the right one is missing", "[source-gid]") {
  CHECK(source_gid_index({ip("10.0.0.1"), ip("fe80::1")}, ip("fd00::2")) == 1u);
  CHECK(source_gid_index({ip("10.0.0.1"), ip("fd00::1")}, ip("fe80::2")) == 1u);
}

TEST_CASE("source GID: none when the port has no address of the family", "[source-gid]") {
  CHECK_FALSE(source_gid_index({ip("10.0.0.1")}, ip("fd00::2")));
  CHECK_FALSE(source_gid_index({ip("fd00::1"), ip("fe80::1")}, ip("10.0.0.2")));
  CHECK_FALSE(source_gid_index({}, ip("10.0.0.2")));
}

TEST_CASE("source GID: address classes", "[source-gid]") {
  CHECK(is_link_local(ip("fe80::1")));
  CHECK_FALSE(is_link_local(ip("fec0::1")));
  CHECK_FALSE(is_link_local(ip("10.0.0.1")));
  CHECK(is_loopback(ip("::1")));
  CHECK(is_loopback(ip("127.3.2.1")));
  CHECK_FALSE(is_loopback(ip("::")));
  CHECK_FALSE(is_loopback(ip("::ffff:0.0.0.1")));
  CHECK(is_wildcard(ip("::")));
  CHECK(is_wildcard(ip("0.0.0.0")));
  CHECK_FALSE(is_wildcard(ip("::1")));
}

}  // namespace
}  // namespace uroce::test::service
