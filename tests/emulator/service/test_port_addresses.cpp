// The port's addresses while uroced runs (emulator/daemon/port_address_service.hpp): which GID entry an
// address takes or empties, the routes that go with it, who may change them, and what the engine, the
// services and the clients are told. tests/integration/test_port_addresses.py runs it in a real daemon.
#include <fcntl.h>
#include <unistd.h>

#include "emulator/daemon/port_address_service.hpp"
#include "emulator/daemon/source_gid.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using emulator::PortAddressService;
using emulator::ServiceError;

constexpr uid_t owner = 1000;

// An engine that keeps what it is given: the table, the routes and the generation.
class RecordingEngine final : public emulator::EngineAccess {
 public:
  explicit RecordingEngine(ServiceHarness& h) : context_{*h.device, *h.queues, 0} {
    context_.set_addresses = [this](std::vector<wire::IpAddress> table, emulator::net::Routes r, uint32_t g) {
      gids = std::move(table);
      routes = std::move(r);
      generation = g;
    };
  }
  void run_on_engine(const std::function<void(emulator::EngineContext&)>& fn) override { fn(context_); }

  std::vector<wire::IpAddress> gids;
  emulator::net::Routes routes;
  uint32_t generation = 0;

 private:
  emulator::EngineContext context_;
};

struct Fixture {
  Fixture()
      : engine(harness),
        addresses(engine, {ip("10.0.0.1"), ip("fe80::1")},
                  emulator::net::Routes({*emulator::net::parse_subnet("10.0.0.1/24")}, {ip("10.0.0.254")}), owner,
                  [this](const std::vector<wire::IpAddress>& gids, uint32_t generation) {
                    told.push_back(gids);
                    generations.push_back(generation);
                  }) {}

  json change(const char* op, const char* address, uid_t who = owner) {
    return addresses.handle(who, {{"op", op}, {"address", address}});
  }
  int error_of(const char* op, const char* address, uid_t who = owner) {
    try {
      change(op, address, who);
    } catch (const ServiceError& e) {
      return e.error;
    }
    FAIL("no error");
    return 0;
  }

  ServiceHarness harness;
  RecordingEngine engine;
  PortAddressService addresses;
  std::vector<std::vector<wire::IpAddress>> told;
  std::vector<uint32_t> generations;
};

}  // namespace

TEST_CASE("an added address takes the first empty GID entry; a removed one leaves its entry empty",
          "[port-addresses]") {
  Fixture f;
  CHECK(f.change("port_address_add", "10.0.1.1/24").at("gid_index") == 2);
  CHECK(f.change("port_address_add", "fd00::1/64").at("gid_index") == 3);
  CHECK(f.change("port_address_del", "10.0.1.1").at("gid_index") == 2);
  const std::vector<wire::IpAddress> holed{ip("10.0.0.1"), ip("fe80::1"), {}, ip("fd00::1")};
  CHECK(f.engine.gids == holed);
  CHECK(f.told.back() == holed);
  // The empty entry is no source: the IPv4 destination gets GID 0, never the empty (all-zero) one.
  CHECK(emulator::source_gid_index(holed, ip("10.0.1.7")) == 0u);
  CHECK(emulator::source_gid_index(holed, ip("fd00::7")) == 3u);
  CHECK(f.change("port_address_add", "10.0.2.1").at("gid_index") == 2);
  // An empty entry at the end is no entry.
  f.change("port_address_del", "fd00::1");
  CHECK(f.engine.gids == std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1"), ip("10.0.2.1")});
  // Each change has the next generation, for the engine and the services alike.
  CHECK(f.generations == std::vector<uint32_t>{1, 2, 3, 4, 5});
  CHECK(f.engine.generation == 5);
  const json listed = f.addresses.handle(0, {{"op", "port_addresses"}});
  REQUIRE(listed.at("addresses").size() == 3);
  CHECK(listed.at("addresses")[2] == json{{"gid_index", 2}, {"address", "10.0.2.1"}, {"gid", "::ffff:10.0.2.1"}});
}

TEST_CASE("an entry an address handle still names is given to no new address until it is let go",
          "[port-addresses]") {
  Fixture f;
  CHECK(f.change("port_address_add", "10.0.1.1/24").at("gid_index") == 2);
  CHECK(f.change("port_address_add", "10.0.2.1/24").at("gid_index") == 3);
  transport::Device& device = *f.harness.device;
  uint32_t pd = 0, ah_2 = 0, ah_3 = 0;
  REQUIRE(device.alloc_pd(pd) == 0);
  verbs::AddressVector av;
  av.dgid = ip("10.0.1.7");
  av.sgid_index = 2;
  REQUIRE(device.create_ah(pd, av, ah_2) == 0);
  av.dgid = ip("10.0.2.7");
  av.sgid_index = 3;
  REQUIRE(device.create_ah(pd, av, ah_3) == 0);
  f.change("port_address_del", "10.0.1.1");
  f.change("port_address_del", "10.0.2.1");  // the table ends at entry 1 again
  CHECK(f.engine.gids == std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1")});
  // Entries 2 and 3 are still named: the next address goes past them, with empty entries between.
  CHECK(f.change("port_address_add", "10.0.3.1/24").at("gid_index") == 4);
  CHECK(f.engine.gids == std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1"), {}, {}, ip("10.0.3.1")});
  // Let go, entry 2 is free again, and the first free.
  REQUIRE(device.destroy_ah(ah_2) == 0);
  CHECK(f.change("port_address_add", "10.0.4.1/24").at("gid_index") == 2);
  REQUIRE(device.destroy_ah(ah_3) == 0);
  CHECK(f.change("port_address_add", "10.0.5.1/24").at("gid_index") == 3);
}

TEST_CASE("the GID table holds 255 entries", "[port-addresses]") {
  Fixture f;
  for (int i = 2; i < 255; ++i) {
    const std::string a = "10.1." + std::to_string(i) + ".1";
    REQUIRE(f.change("port_address_add", a.c_str()).at("gid_index") == i);
  }
  CHECK(f.error_of("port_address_add", "10.2.0.1") == ENOSPC);
  CHECK(f.engine.gids.size() == 255);
}

TEST_CASE("an address's subnet comes and goes with it", "[port-addresses]") {
  Fixture f;
  f.change("port_address_add", "10.0.1.1/24");
  CHECK(f.engine.routes.on_link(ip("10.0.1.7")));
  CHECK(f.engine.routes.gateway(true) == ip("10.0.0.254"));  // kept
  f.change("port_address_del", "10.0.1.1");
  CHECK_FALSE(f.engine.routes.on_link(ip("10.0.1.7")));
  // The address whose subnet holds the gateway stays: the gateway would be off the link.
  CHECK(f.error_of("port_address_del", "10.0.0.1") == EBUSY);
  CHECK(f.told.size() == 2);
}

TEST_CASE("port address requests that cannot be are refused, and change nothing", "[port-addresses]") {
  Fixture f;
  CHECK(f.error_of("port_address_add", "10.0.0.1") == EEXIST);
  CHECK(f.error_of("port_address_add", "224.0.0.1") == EINVAL);
  CHECK(f.error_of("port_address_add", "255.255.255.255") == EINVAL);
  CHECK(f.error_of("port_address_add", "0.0.0.0") == EINVAL);
  CHECK(f.error_of("port_address_add", "::1") == EINVAL);
  CHECK(f.error_of("port_address_add", "10.0.0.1/40") == EINVAL);
  CHECK(f.error_of("port_address_del", "10.9.9.9") == EADDRNOTAVAIL);
  CHECK(f.error_of("port_address_del", "::") == EADDRNOTAVAIL);
  CHECK(f.error_of("port_address_del", "nonsense") == EINVAL);
  CHECK_THROWS_AS(f.addresses.handle(owner, {{"op", "port_address_add"}}), ServiceError);
  CHECK_THROWS_AS(f.addresses.handle(owner, {{"op", "port_address_add"}, {"address", 7}}), ServiceError);
  // Another user may look, not change; root may.
  CHECK(f.error_of("port_address_add", "10.0.1.1", owner + 1) == EPERM);
  CHECK(f.addresses.handle(owner + 1, {{"op", "port_addresses"}}).at("addresses").size() == 2);
  CHECK(f.told.empty());
  CHECK(f.change("port_address_add", "10.0.1.1", 0).at("gid_index") == 2);
}

TEST_CASE("a GID table change is IBV_EVENT_GID_CHANGE for port 1 on every open context", "[port-addresses]") {
  Fixture f;
  ServiceHarness& h = f.harness;
  std::vector<int> fds1, fds2;
  h.service->open_session(1, getpid(), getuid());
  h.service->open_session(2, getpid(), getuid());
  h.call(1, {{"op", "open_device"}}, &fds1);
  h.call(2, {{"op", "open_device"}}, &fds2);
  for (int fd : {fds1[0], fds2[0]}) REQUIRE(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
  f.change("port_address_add", "10.0.1.1/24");
  for (int fd : {fds1[0], fds2[0]}) {
    const auto events = drain_records<protocol::AsyncEventRecord>(fd);
    REQUIRE(events.size() == 1);
    CHECK(events[0].type == uint32_t(verbs::EventType::gid_change));
    CHECK(events[0].object == 1);
  }
  close_all(fds1);
  close_all(fds2);
}

}  // namespace uroce::test::service

namespace uroce::test::service {

// Addresses SLAAC forms (net/address_autoconf.hpp; the engine's list, handed over by AutoconfWatch) join the
// table as an added address does, subnet and all, and leave it when they are no longer valid; an address
// the port has already stays the administrator's, and one the administrator removed is not put back while
// its prefix stays advertised.
TEST_CASE("SLAAC's addresses come and go in the GID table with their lifetimes", "[port-addresses][slaac]") {
  Fixture f;
  const auto slaac = [](const char* subnet) {
    return emulator::net::AutoconfAddress{*emulator::net::parse_subnet(subnet), emulator::net::never,
                                          emulator::net::never};
  };
  const auto a = slaac("fd81:1::5054:ff:fe12:3456/64"), b = slaac("fd81:2::5054:ff:fe12:3456/64");
  f.addresses.follow_autoconf({a, b});
  CHECK(f.engine.gids ==
        std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1"), a.subnet.address, b.subnet.address});
  CHECK(f.engine.routes.next_hop(ip("fd81:1::9")) == ip("fd81:1::9"));  // its /64 is on the link
  const json listed = f.addresses.handle(1234, {{"op", "port_addresses"}}).at("addresses");
  CHECK(listed.at(2).at("prefix_length") == 64);
  CHECK(listed.at(2).value("autoconf", false));
  CHECK_FALSE(listed.at(0).value("autoconf", false));
  // The same list again changes nothing (and tells nobody).
  const size_t told = f.told.size();
  f.addresses.follow_autoconf({a, b});
  CHECK(f.told.size() == told);
  // a lapses: its entry empties, its subnet goes.
  f.addresses.follow_autoconf({b});
  CHECK(f.engine.gids == std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1"), {}, b.subnet.address});
  CHECK_FALSE(f.engine.routes.next_hop(ip("fd81:1::9")));
  // Removed by hand, b is not put back while it stays valid; once it has lapsed, it may come again.
  f.change("port_address_del", "fd81:2::5054:ff:fe12:3456");
  f.addresses.follow_autoconf({b});
  CHECK(f.engine.gids == std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1")});
  f.addresses.follow_autoconf({});
  f.addresses.follow_autoconf({b});
  CHECK(f.engine.gids == std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1"), b.subnet.address});
  // An address the administrator gave the port first is theirs: not added twice, not removed with SLAAC's.
  f.change("port_address_add", "fd81:3::5054:ff:fe12:3456/64");
  const auto c = slaac("fd81:3::5054:ff:fe12:3456/64");
  f.addresses.follow_autoconf({b, c});
  f.addresses.follow_autoconf({b});
  CHECK(f.engine.gids ==
        std::vector<wire::IpAddress>{ip("10.0.0.1"), ip("fe80::1"), b.subnet.address, c.subnet.address});
}

}  // namespace uroce::test::service
