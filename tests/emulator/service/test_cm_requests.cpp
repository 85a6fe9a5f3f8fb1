// rdma_cm requests to uroced's CM service as a broken or hostile client can send them, and the address
// choices it makes for IPv6 and UD IDs. A refused request is a ServiceError with an errno, never a crash.
// The CM runs on the harness's simulated device; its timers are never run (nothing here waits for a peer).
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include <boost/asio/io_context.hpp>

#include "emulator/daemon/cm_service.hpp"
#include "emulator/net/routes.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using emulator::CmService;

constexpr uint32_t ps_tcp = 0x0106, ps_udp = 0x0111, ps_ib = 0x013f;

// A CM service on the harness's device whose port has `gids`; session 1 holds one event channel.
struct CmHarness {
  explicit CmHarness(std::vector<wire::IpAddress> gids, emulator::net::Routes routes = {},
                     std::string port_range_file = emulator::kLocalPortRangeFile) {
    emulator::PortDescription port;
    port.port_name = "sim";
    port.gids = std::move(gids);
    // The engine routes as the port's configuration says (router discovery has learned nothing here).
    h.engine->set_has_route([routes](const wire::IpAddress& a) { return routes.next_hop(a).has_value(); });
    h.engine->set_on_link([routes](const wire::IpAddress& a) { return routes.next_hop(a) == a; });
    cm = std::make_unique<CmService>(*h.engine, io, port, std::move(port_range_file));
    channel = call({{"op", "cm_create_channel"}}).at("channel");
  }
  ~CmHarness() { cm->close_session(1); }

  json call(json request) {
    std::vector<int> fds;
    json reply = cm->handle(1, request, fds);
    for (int fd : fds) close(fd);
    return reply;
  }
  int error_of(json request) {
    std::vector<int> fds;
    try {
      cm->handle(1, request, fds);
    } catch (const emulator::ServiceError& e) {
      CHECK(fds.empty());
      return e.error;
    }
    for (int fd : fds) close(fd);
    FAIL("request succeeded but should have failed: " << request.dump());
    return 0;
  }
  uint32_t new_id(uint32_t port_space, int qp_type) {
    return call({{"op", "cm_create_id"}, {"channel", channel}, {"port_space", port_space}, {"qp_type", qp_type}})
        .at("cm_id");
  }
  json resolve(uint32_t id, const char* dst) {
    return call({{"op", "cm_resolve_addr"}, {"cm_id", id}, {"dst", dst}, {"dst_port", 7174}});
  }

  ServiceHarness h;
  boost::asio::io_context io;
  std::unique_ptr<CmService> cm;
  uint32_t channel = 0;
};

TEST_CASE("rdma_cm picks the source GID of the destination's family and scope", "[cm][ipv6]") {
  CmHarness c({ip("10.0.0.1"), ip("fd00::1"), ip("fe80::1")});
  const auto source_of = [&](const char* dst) {
    const json r = c.resolve(c.new_id(ps_tcp, 2), dst);
    return std::pair{r.at("src").get<std::string>(), r.at("sgid_index").get<int>()};
  };
  CHECK(source_of("10.0.0.2") == std::pair{std::string("10.0.0.1"), 0});
  CHECK(source_of("fd00::2") == std::pair{std::string("fd00::1"), 1});
  CHECK(source_of("fe80::2") == std::pair{std::string("fe80::1"), 2});
  // Loopback destinations are the port itself, from its address of that family.
  const json v6 = c.resolve(c.new_id(ps_tcp, 2), "::1");
  CHECK(v6.at("dst") == "fd00::1");
  const json v4 = c.resolve(c.new_id(ps_tcp, 2), "127.0.0.1");
  CHECK(v4.at("dst") == "10.0.0.1");
}

TEST_CASE("rdma_cm refuses addresses the port cannot use", "[cm][ipv6][bad]") {
  CmHarness v4only({ip("10.0.0.1")});
  CHECK(v4only.error_of({{"op", "cm_resolve_addr"}, {"cm_id", v4only.new_id(ps_tcp, 2)}, {"dst", "fd00::2"}}) ==
        EADDRNOTAVAIL);
  CHECK(v4only.error_of({{"op", "cm_bind"}, {"cm_id", v4only.new_id(ps_tcp, 2)}, {"addr", "fd00::1"}}) ==
        EADDRNOTAVAIL);
  CHECK(v4only.error_of({{"op", "cm_resolve_addr"}, {"cm_id", v4only.new_id(ps_tcp, 2)}, {"dst", "fd00::zz"}}) ==
        EINVAL);
  CHECK(v4only.error_of({{"op", "cm_resolve_addr"}, {"cm_id", v4only.new_id(ps_tcp, 2)}, {"dst", 7}}) == EINVAL);

  CmHarness dual({ip("10.0.0.1"), ip("fd00::1")});
  // A source of one family and a destination of the other.
  CHECK(dual.error_of({{"op", "cm_resolve_addr"}, {"cm_id", dual.new_id(ps_tcp, 2)}, {"src", "10.0.0.1"},
                       {"dst", "fd00::2"}}) == EINVAL);
  const uint32_t bound = dual.new_id(ps_tcp, 2);
  dual.call({{"op", "cm_bind"}, {"cm_id", bound}, {"addr", "fd00::1"}, {"port", 0}});
  CHECK(dual.error_of({{"op", "cm_resolve_addr"}, {"cm_id", bound}, {"dst", "10.0.0.2"}}) == EINVAL);
}

// As Linux binds them (rping -s -a 127.0.0.1 and -a ::1 listen on rxe, Linux 6.1): to no device, so the
// shim leaves the ID's verbs context unset. libfabric's verbs provider binds "localhost" to learn which
// devices there are. Nothing can connect to such a listener (a REQ's destination is a port's address), and
// an ID bound so resolves nothing: ENODEV, where Linux fails the route with ENODEV.
TEST_CASE("rdma_cm binds loopback addresses to no device, as Linux does", "[cm][address]") {
  CmHarness c({ip("10.0.0.1")});
  for (const char* loopback : {"127.0.0.1", "127.1.2.3", "::1"}) {
    INFO(loopback);
    const uint32_t id = c.new_id(ps_tcp, 2);
    const json bound = c.call({{"op", "cm_bind"}, {"cm_id", id}, {"addr", loopback}, {"port", 0}});
    CHECK(bound.at("addr") == loopback);
    CHECK(bound.at("on_port") == false);
    CHECK(c.call({{"op", "cm_listen"}, {"cm_id", id}, {"backlog", 4}}).at("port") == bound.at("port"));
    const uint32_t other = c.new_id(ps_tcp, 2);
    c.call({{"op", "cm_bind"}, {"cm_id", other}, {"addr", loopback}, {"port", 0}});
    CHECK(c.error_of({{"op", "cm_resolve_addr"}, {"cm_id", other}, {"dst", "10.0.0.2"}}) == ENODEV);
  }
  CHECK(c.call({{"op", "cm_bind"}, {"cm_id", c.new_id(ps_tcp, 2)}, {"addr", "10.0.0.1"}, {"port", 0}}).at("on_port") ==
        true);
  CHECK(c.call({{"op", "cm_bind"}, {"cm_id", c.new_id(ps_tcp, 2)}, {"addr", "0.0.0.0"}, {"port", 0}}).at("on_port") ==
        false);
  // Any other address is still refused: 127/8 is loopback, 128.0.0.1 and ::2 are not.
  CHECK(c.error_of({{"op", "cm_bind"}, {"cm_id", c.new_id(ps_tcp, 2)}, {"addr", "128.0.0.1"}}) == EADDRNOTAVAIL);
  CHECK(c.error_of({{"op", "cm_bind"}, {"cm_id", c.new_id(ps_tcp, 2)}, {"addr", "::2"}}) == EADDRNOTAVAIL);
}

// Linux's cma_check_port: IDs that each take one family only (AFONLY; an IPv4 ID always is) share a port
// across families. tgtd's iser driver binds :: and 0.0.0.0 to port 3260 so, each AFONLY, and its iSER
// target failed to start while uroce refused the second. A wildcard still clashes with everything else on
// its port (EADDRNOTAVAIL), and one address with itself (EADDRINUSE).
TEST_CASE("rdma_cm ports: AFONLY wildcards of both families share one; other clashes are refused", "[cm][address]") {
  CmHarness c({ip("10.0.0.1"), ip("fd00::1")});
  const auto bind = [&](uint32_t id, const char* addr, uint16_t port) {
    return c.call({{"op", "cm_bind"}, {"cm_id", id}, {"addr", addr}, {"port", port}});
  };
  const auto afonly = [&](uint32_t id, uint32_t on) {
    c.call({{"op", "cm_set_option"}, {"cm_id", id}, {"name", "afonly"}, {"value", on}});
  };
  const auto bind_error = [&](uint32_t id, const char* addr, uint16_t port) {
    return c.error_of({{"op", "cm_bind"}, {"cm_id", id}, {"addr", addr}, {"port", port}});
  };
  // tgtd's two portals, and both listen.
  const uint32_t v6 = c.new_id(ps_tcp, 2), v4 = c.new_id(ps_tcp, 2);
  afonly(v6, 1);
  afonly(v4, 1);
  bind(v6, "::", 3260);
  bind(v4, "0.0.0.0", 3260);
  c.call({{"op", "cm_listen"}, {"cm_id", v6}, {"backlog", 0}});
  c.call({{"op", "cm_listen"}, {"cm_id", v4}, {"backlog", 0}});
  // Without AFONLY, :: takes IPv4 too (net.ipv6.bindv6only 0), and clashes with 0.0.0.0 either way round.
  const uint32_t dual = c.new_id(ps_tcp, 2), v4_after = c.new_id(ps_tcp, 2);
  bind(dual, "::", 3261);
  CHECK(bind_error(v4_after, "0.0.0.0", 3261) == EADDRNOTAVAIL);
  const uint32_t v4_first = c.new_id(ps_tcp, 2), dual_after = c.new_id(ps_tcp, 2);
  bind(v4_first, "0.0.0.0", 3262);
  CHECK(bind_error(dual_after, "::", 3262) == EADDRNOTAVAIL);
  // A port's address under a wildcard of its family, and one address twice.
  CHECK(bind_error(c.new_id(ps_tcp, 2), "10.0.0.1", 3260) == EADDRNOTAVAIL);
  CHECK(bind_error(c.new_id(ps_tcp, 2), "fd00::1", 3260) == EADDRNOTAVAIL);
  bind(c.new_id(ps_tcp, 2), "10.0.0.1", 3263);
  CHECK(bind_error(c.new_id(ps_tcp, 2), "10.0.0.1", 3263) == EADDRINUSE);
  // The other port space is another set of ports.
  bind(c.new_id(ps_udp, 4), "0.0.0.0", 3260);
}

TEST_CASE("rdma_cm's ephemeral range is read as net.ipv4.ip_local_port_range prints it", "[cm][address]") {
  using emulator::parse_port_range;
  const auto range = parse_port_range("32768\t60999\n");
  REQUIRE(range);
  CHECK((range->low == 32768 && range->high == 60999));
  CHECK(parse_port_range("44000 44000")->high == 44000);
  for (const char* bad : {"", "32768", "60999 32768", "0 100", "1 65536", "1 2 3", "a b", "-1 5", "100\t200x"}) {
    CHECK_FALSE(parse_port_range(bad));
  }
}

// An ID bound to port 0 takes a port of the range in the file (the daemon's namespace's sysctl), read at
// each bind: a fixed port inside it is skipped, the range changed between binds is followed at once, and
// when every port of it is taken the bind fails with EADDRNOTAVAIL, as Linux's cma_alloc_any_port. An
// unreadable file falls back to Linux's default range.
TEST_CASE("rdma_cm's ephemeral ports come from the namespace's port range, read at each bind", "[cm][address]") {
  char dir_template[] = "/tmp/uroce-port-range-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string file = std::string(dir_template) + "/ip_local_port_range";
  const auto set_range = [&](const char* text) { std::ofstream(file) << text; };
  set_range("40000\t40002\n");
  CmHarness c({ip("10.0.0.1")}, {}, file);
  const auto bind_port = [&](uint32_t id, uint16_t port) -> uint16_t {
    return c.call({{"op", "cm_bind"}, {"cm_id", id}, {"addr", "10.0.0.1"}, {"port", port}}).at("port");
  };
  CHECK(bind_port(c.new_id(ps_tcp, 2), 40001) == 40001);
  std::set<uint16_t> taken;
  for (int i = 0; i < 2; ++i) taken.insert(bind_port(c.new_id(ps_tcp, 2), 0));
  CHECK(taken == std::set<uint16_t>{40000, 40002});
  CHECK(c.error_of({{"op", "cm_bind"}, {"cm_id", c.new_id(ps_tcp, 2)}, {"addr", "10.0.0.1"}, {"port", 0}}) ==
        EADDRNOTAVAIL);
  // The other port space has the whole range still.
  const uint16_t udp = bind_port(c.new_id(ps_udp, 4), 0);
  CHECK((udp >= 40000 && udp <= 40002));
  set_range("50000 50000\n");
  CHECK(bind_port(c.new_id(ps_tcp, 2), 0) == 50000);
  std::remove(file.c_str());
  const uint16_t fallback = bind_port(c.new_id(ps_tcp, 2), 0);
  CHECK((fallback >= 32768 && fallback <= 60999));
  rmdir(dir_template);
}

// rdma_resolve_addr binds an unbound ID once it knows the destination, and Linux's cma_port_is_unique then
// lets it take a port other IDs hold if each of them has another destination port, source address or
// destination address: with one port in the range, a client still reaches many servers. An ID bound to port
// 0 before it has a destination, or one headed where a holder of the port goes, gets no shared port.
TEST_CASE("rdma_cm's ephemeral port is shared by IDs that go to different destinations", "[cm][address]") {
  char dir_template[] = "/tmp/uroce-port-range-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string file = std::string(dir_template) + "/ip_local_port_range";
  std::ofstream(file) << "44000 44000\n";
  CmHarness c({ip("10.0.0.1"), ip("fd00::1")}, {}, file);
  const auto resolve = [&](uint32_t id, const char* dst, uint16_t dst_port) {
    return c.call({{"op", "cm_resolve_addr"}, {"cm_id", id}, {"dst", dst}, {"dst_port", dst_port}});
  };
  const auto resolve_error = [&](uint32_t id, const char* dst, uint16_t dst_port) {
    return c.error_of({{"op", "cm_resolve_addr"}, {"cm_id", id}, {"dst", dst}, {"dst_port", dst_port}});
  };
  // Three servers, and a second service on the first: the one port serves all four.
  for (const auto& [dst, dst_port] : {std::pair{"10.0.0.2", 7471}, {"10.0.0.3", 7471}, {"10.0.0.4", 7471},
                                      {"10.0.0.2", 7472}}) {
    CHECK(resolve(c.new_id(ps_tcp, 2), dst, uint16_t(dst_port)).at("src_port") == 44000);
  }
  // The same server and service again: the two connections would have one address and port pair.
  CHECK(resolve_error(c.new_id(ps_tcp, 2), "10.0.0.3", 7471) == EADDRNOTAVAIL);
  // No destination port ("any") cannot be told from 7471 or 7472 at 10.0.0.2, but 10.0.0.5 is new.
  CHECK(resolve_error(c.new_id(ps_tcp, 2), "10.0.0.2", 0) == EADDRNOTAVAIL);
  CHECK(resolve(c.new_id(ps_tcp, 2), "10.0.0.5", 0).at("src_port") == 44000);
  // Another source address (the port's IPv6 one) differs from every holder's.
  CHECK(resolve(c.new_id(ps_tcp, 2), "fd00::2", 7471).at("src_port") == 44000);
  // rdma_bind_addr to port 0 has no destination yet: only another source address would tell it apart.
  CHECK(c.error_of({{"op", "cm_bind"}, {"cm_id", c.new_id(ps_tcp, 2)}, {"addr", "10.0.0.1"}, {"port", 0}}) ==
        EADDRNOTAVAIL);
  // Once the holders are gone the port is free for anyone again.
  c.cm->close_session(1);
  c.channel = c.call({{"op", "cm_create_channel"}}).at("channel");
  const uint32_t bound = c.new_id(ps_tcp, 2);
  CHECK(c.call({{"op", "cm_bind"}, {"cm_id", bound}, {"addr", "10.0.0.1"}, {"port", 0}}).at("port") == 44000);
  // And a bound ID holding it alone, with a specific source, is one a resolving ID cannot be told from.
  CHECK(resolve_error(c.new_id(ps_tcp, 2), "10.0.0.2", 7471) == EADDRNOTAVAIL);
  std::remove(file.c_str());
  rmdir(dir_template);
}

// rdma_resolve_addr with a source that has a port binds the ID to that port (Linux's cma_bind_addr hands the
// whole source to rdma_bind_addr): a second ID on the same address and port is EADDRINUSE, whatever its
// destination, and a fixed port is taken outside the ephemeral range too.
TEST_CASE("rdma_resolve_addr binds to the source's port when it names one", "[cm][address]") {
  CmHarness c({ip("10.0.0.1")});
  const auto resolve = [&](const char* dst, uint16_t src_port) {
    return json{{"op", "cm_resolve_addr"}, {"cm_id", c.new_id(ps_tcp, 2)}, {"src", "10.0.0.1"},
                {"src_port", src_port}, {"dst", dst}, {"dst_port", 7471}};
  };
  CHECK(c.call(resolve("10.0.0.2", 2049)).at("src_port") == 2049);
  CHECK(c.error_of(resolve("10.0.0.3", 2049)) == EADDRINUSE);
  const uint16_t ephemeral = c.call(resolve("10.0.0.3", 0)).at("src_port");
  CHECK((ephemeral >= 32768 && ephemeral <= 60999));
}

TEST_CASE("UD rdma_cm requests: bad ones are refused, the QP attributes are the fixed ones", "[cm][ud][bad]") {
  CmHarness c({ip("10.0.0.1")});
  // RDMA_PS_IB is served (XRC connects on it); RDMA_PS_IPOIB is not.
  CHECK(c.new_id(ps_ib, 9) != 0);
  CHECK(c.error_of({{"op", "cm_create_id"}, {"channel", c.channel}, {"port_space", 0x0002u}, {"qp_type", 4}}) ==
        EPROTONOSUPPORT);

  const uint32_t id = c.new_id(ps_udp, 4);
  // Not yet routed; then too much private data (a SIDR_REQ has 180 bytes after rdma_cm's header), data
  // that is not hex, no QP number.
  CHECK(c.error_of({{"op", "cm_connect"}, {"cm_id", id}, {"qp_num", 5}}) == EINVAL);
  c.resolve(id, "10.0.0.2");
  c.call({{"op", "cm_resolve_route"}, {"cm_id", id}});
  CHECK(c.error_of({{"op", "cm_connect"}, {"cm_id", id}, {"qp_num", 5}, {"private_data", std::string(362, 'a')}}) ==
        EINVAL);
  CHECK(c.error_of({{"op", "cm_connect"}, {"cm_id", id}, {"qp_num", 5}, {"private_data", "xyz"}}) == EINVAL);
  CHECK(c.error_of({{"op", "cm_connect"}, {"cm_id", id}}) == EINVAL);
  // No SIDR_REQ came in: nothing to accept or reject.
  CHECK(c.error_of({{"op", "cm_accept"}, {"cm_id", id}, {"qp_num", 5}}) == EINVAL);
  CHECK(c.error_of({{"op", "cm_reject"}, {"cm_id", id}}) == EINVAL);

  const json init = c.call({{"op", "cm_init_qp_attr"}, {"cm_id", id}, {"state", "init"}});
  CHECK(init.at("qkey") == 0x01234567);  // RDMA_UDP_QKEY
  CHECK(c.call({{"op", "cm_init_qp_attr"}, {"cm_id", id}, {"state", "rts"}}).at("sq_psn") == 0);
  CHECK(c.error_of({{"op", "cm_init_qp_attr"}, {"cm_id", id}, {"state", "sqd"}}) == EINVAL);
}

TEST_CASE("rdma_resolve_addr waits for the peer's MAC: ADDR_RESOLVED once known, ADDR_ERROR -110 if never",
          "[cm][address]") {
  CmHarness c({ip("10.0.0.1")});
  bool answered = false;  // has 10.0.0.2 answered ARP?
  c.h.engine->set_neighbour_known([&](const wire::IpAddress& a) { return a == ip("10.0.0.2") && answered; });
  const auto take_event = [&] { return c.call({{"op", "cm_get_event"}, {"channel", c.channel}}); };
  const auto run_timers = [&](int ms) {  // (an io_context that ran out of work must be restarted)
    c.io.restart();
    c.io.run_for(std::chrono::milliseconds(ms));
  };
  const auto resolve = [&](uint32_t id, const char* dst, int timeout_ms) {
    c.call({{"op", "cm_resolve_addr"}, {"cm_id", id}, {"dst", dst}, {"timeout_ms", timeout_ms}});
  };

  // Our own address and groups need nobody: resolved at once.
  resolve(c.new_id(ps_tcp, 2), "10.0.0.1", 50);
  CHECK(take_event().at("type") == 0);
  resolve(c.new_id(ps_udp, 4), "239.1.1.1", 50);
  CHECK(take_event().at("type") == 0);

  // A peer that answers after a while: no event, no route resolution until then.
  const uint32_t late = c.new_id(ps_tcp, 2);
  resolve(late, "10.0.0.2", 5000);
  CHECK(take_event().value("none", false));
  CHECK(c.error_of({{"op", "cm_resolve_route"}, {"cm_id", late}}) == EINVAL);
  run_timers(30);
  CHECK(take_event().value("none", false));
  answered = true;
  run_timers(30);
  const json resolved = take_event();
  CHECK(resolved.at("type") == 0);
  CHECK(resolved.at("cm_id") == late);
  c.call({{"op", "cm_resolve_route"}, {"cm_id", late}});
  CHECK(take_event().at("type") == 2);  // ROUTE_RESOLVED

  // A peer that never answers: ADDR_ERROR with -ETIMEDOUT after the caller's timeout; the ID may try again.
  const uint32_t lost = c.new_id(ps_tcp, 2);
  resolve(lost, "10.0.0.3", 40);
  run_timers(100);
  const json error = take_event();
  CHECK(error.at("type") == 1);  // ADDR_ERROR
  CHECK(error.at("status") == -ETIMEDOUT);
  resolve(lost, "10.0.0.3", 40);

  // An ID destroyed while it waits is forgotten: no event, no crash when the timer fires.
  const uint32_t gone = c.new_id(ps_tcp, 2);
  resolve(gone, "10.0.0.4", 20);
  c.call({{"op", "cm_destroy_id"}, {"cm_id", gone}});
  c.call({{"op", "cm_destroy_id"}, {"cm_id", lost}});
  run_timers(60);
  CHECK(take_event().value("none", false));
}

TEST_CASE("rdma_cm multicast: joins answered with the group's address handle, bad ones refused", "[cm][multicast]") {
  CmHarness c({ip("10.0.0.1"), ip("fd00::1")});
  const auto take_event = [&] { return c.call({{"op", "cm_get_event"}, {"channel", c.channel}}); };
  const auto join = [&](uint32_t id, const char* group) {
    return c.call({{"op", "cm_join_multicast"}, {"cm_id", id}, {"addr", group}, {"join_flags", 0}});
  };
  const auto join_error = [&](uint32_t id, const char* group) {
    return c.error_of({{"op", "cm_join_multicast"}, {"cm_id", id}, {"addr", group}, {"join_flags", 0}});
  };

  // Only UD IDs join, only once they have an address, only groups, only of a family the ID can use.
  const uint32_t rc = c.new_id(ps_tcp, 2);
  c.resolve(rc, "10.0.0.2");
  take_event();
  CHECK(join_error(rc, "239.1.1.1") == EINVAL);
  const uint32_t id = c.new_id(ps_udp, 4);
  CHECK(join_error(id, "239.1.1.1") == EINVAL);
  c.resolve(id, "239.1.1.1");  // mckey resolves the group itself
  CHECK(take_event().at("type") == 0);  // ADDR_RESOLVED
  CHECK(join_error(id, "10.0.0.7") == EINVAL);
  CHECK(join_error(id, "ff0e::1") == EINVAL);  // the ID's source is IPv4
  CHECK(join_error(id, "not an address") == EINVAL);

  const uint32_t mc = join(id, "239.1.1.1").at("mc");
  const json e = take_event();
  CHECK(e.at("type") == 12);  // MULTICAST_JOIN
  CHECK(e.at("mc") == mc);
  const json& ud = e.at("ud");
  CHECK(ud.at("qp_num") == 0xffffff);
  CHECK(ud.at("qkey") == 0x01234567);
  CHECK(ud.at("dgid") == "239.1.1.1");
  CHECK(ud.at("sgid_index") == 0);
  CHECK(ud.at("hop_limit") == 64);

  // An IPv6 group on an ID bound to the port's IPv6 address: its GID index.
  const uint32_t v6 = c.new_id(ps_udp, 4);
  c.call({{"op", "cm_bind"}, {"cm_id", v6}, {"addr", "fd00::1"}, {"port", 0}});
  join(v6, "ff0e::1:2");
  const json e6 = take_event();
  CHECK(e6.at("ud").at("dgid") == "ff0e::1:2");
  CHECK(e6.at("ud").at("sgid_index") == 1);

  // Leaving: an unknown membership is refused; a join whose event was not taken yet is withdrawn with it.
  CHECK(c.error_of({{"op", "cm_leave_multicast"}, {"cm_id", id}, {"mc", mc + 100}}) == EADDRNOTAVAIL);
  c.call({{"op", "cm_leave_multicast"}, {"cm_id", id}, {"mc", mc}});
  CHECK(c.error_of({{"op", "cm_leave_multicast"}, {"cm_id", id}, {"mc", mc}}) == EADDRNOTAVAIL);
  const uint32_t again = join(id, "239.1.1.2").at("mc");
  c.call({{"op", "cm_leave_multicast"}, {"cm_id", id}, {"mc", again}});
  CHECK(take_event().value("none", false));
}

TEST_CASE("rdma_resolve_addr beyond the port's subnets: through the gateway, or ENETUNREACH at once", "[cm][address]") {
  using emulator::net::Subnet;
  const auto take_event = [](CmHarness& c) { return c.call({{"op", "cm_get_event"}, {"channel", c.channel}}); };
  const auto resolve = [](CmHarness& c, uint32_t id, const char* dst) {
    c.call({{"op", "cm_resolve_addr"}, {"cm_id", id}, {"dst", dst}, {"timeout_ms", 2000}});
  };
  {
    // No gateway: no route, ADDR_ERROR -ENETUNREACH with no waiting; on the link it resolves as ever.
    CmHarness c({ip("10.0.0.1")}, emulator::net::Routes({Subnet{ip("10.0.0.1"), 24}}, {}));
    const uint32_t far = c.new_id(ps_tcp, 2);
    resolve(c, far, "10.9.9.9");
    const json error = take_event(c);
    CHECK(error.at("type") == 1);  // ADDR_ERROR
    CHECK(error.at("status") == -ENETUNREACH);
    CHECK(error.at("cm_id") == far);
    resolve(c, c.new_id(ps_tcp, 2), "10.0.0.2");
    CHECK(take_event(c).at("type") == 0);
  }
  {
    // A gateway: the destination beyond it is resolved (the engine finds the gateway's MAC).
    CmHarness c({ip("10.0.0.1")}, emulator::net::Routes({Subnet{ip("10.0.0.1"), 24}}, {ip("10.0.0.254")}));
    resolve(c, c.new_id(ps_tcp, 2), "10.9.9.9");
    CHECK(take_event(c).at("type") == 0);  // ADDR_RESOLVED
  }
}

TEST_CASE("cm_route: how the port reaches an address, for a program choosing among its devices", "[cm][address]") {
  using emulator::net::Subnet;
  const auto route = [](CmHarness& c, const char* dst) {
    return c.call({{"op", "cm_route"}, {"dst", dst}}).at("route").get<std::string>();
  };
  CmHarness c({ip("10.0.0.1")}, emulator::net::Routes({Subnet{ip("10.0.0.1"), 24}}, {ip("10.0.0.254")}));
  CHECK(route(c, "10.0.0.1") == "local");
  CHECK(route(c, "10.0.0.7") == "link");
  CHECK(route(c, "192.0.2.1") == "gateway");
  CHECK(route(c, "fd00::1") == "none");  // no IPv6 address: no source for it
  CmHarness alone({ip("10.0.0.1")}, emulator::net::Routes({Subnet{ip("10.0.0.1"), 24}}, {}));
  CHECK(route(alone, "192.0.2.1") == "none");
  CHECK(c.error_of({{"op", "cm_route"}, {"dst", "not an address"}}) == EINVAL);
  CHECK(c.error_of({{"op", "cm_route"}}) == EINVAL);
}

TEST_CASE("A stopping daemon gives DEVICE_REMOVAL to the IDs on its device only", "[cm][removal]") {
  CmHarness c({ip("10.0.0.1")});
  const auto bind = [&](const char* addr, int port) {
    const uint32_t id = c.new_id(ps_tcp, 2);
    c.call({{"op", "cm_bind"}, {"cm_id", id}, {"addr", addr}, {"port", port}});
    return id;
  };
  const uint32_t on_port = bind("10.0.0.1", 7000);
  bind("0.0.0.0", 7001);    // a wildcard: on no device
  bind("127.0.0.1", 7002);  // a loopback address: on none either
  c.new_id(ps_tcp, 2);      // unbound
  c.cm->announce_removal();
  const json e = c.call({{"op", "cm_get_event"}, {"channel", c.channel}});
  CHECK(e.at("type") == 11);  // RDMA_CM_EVENT_DEVICE_REMOVAL
  CHECK(e.at("cm_id") == on_port);
  CHECK(e.at("status") == 0);
  CHECK(c.call({{"op", "cm_get_event"}, {"channel", c.channel}}).value("none", false));
}

TEST_CASE("cm_create_channel counts events on the client's own eventfd, and refuses any other descriptor",
          "[cm][channel][bad]") {
  CmHarness c({ip("10.0.0.1")});
  const int mine = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(mine >= 0);
  std::vector<int> fds;
  const int sent[] = {mine};
  const json r = c.cm->handle(1, {{"op", "cm_create_channel"}}, fds, sent);
  CHECK(fds.empty());  // nothing comes back: the client has its descriptor
  const uint32_t channel = r.at("channel");
  // An event on that channel is counted on our eventfd.
  const uint32_t id =
      c.call({{"op", "cm_create_id"}, {"channel", channel}, {"port_space", ps_tcp}, {"qp_type", 2}}).at("cm_id");
  c.call({{"op", "cm_resolve_addr"}, {"cm_id", id}, {"dst", "10.0.0.1"}, {"timeout_ms", 2000}});
  uint64_t count = 0;
  CHECK(read(mine, &count, sizeof count) == sizeof count);
  CHECK(count == 1);
  CHECK(c.call({{"op", "cm_get_event"}, {"channel", channel}}).at("type") == 0);  // ADDR_RESOLVED
  CHECK(read(mine, &count, sizeof count) < 0);  // one count per event
  close(mine);
  // A pipe (or anything but an eventfd) could block the daemon's writes: refused.
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  const int pipe_sent[] = {pipe_fds[1]};
  std::vector<int> none;
  CHECK_THROWS_AS(c.cm->handle(1, {{"op", "cm_create_channel"}}, none, pipe_sent), emulator::ServiceError);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

}  // namespace
}  // namespace uroce::test::service
