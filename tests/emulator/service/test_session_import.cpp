// Importing a session (ibv_import_device; emulator/daemon/control_adapter.hpp): a hello that says "import"
// and carries a descriptor of another connection's socket (its client end) joins that connection's
// session. The verbs service behind the real control server and ControlAdapter, and the real client
// library, which shows every connection's own end with its hello.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "emulator/client/control_connection.hpp"
#include "tests/emulator/service/served_harness.hpp"

namespace uroce::test::service {
namespace {

using emulator::client::ControlConnection;
using emulator::client::ControlError;

void wait_for_sessions(ServedHarness& s, size_t n) {
  for (int i = 0; i < 200 && s.sessions() != n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace

TEST_CASE("session import: a connection with another's command descriptor acts on its session",
          "[verbs][import]") {
  ServedHarness s;
  auto exporter = ControlConnection::connect(s.path, "exporter");
  const uint64_t session = exporter->server_hello().at("session");
  const uint32_t pd = exporter->call({{"op", "alloc_pd"}}).at("pd");

  auto importer = ControlConnection::connect(s.path, "importer", exporter->fd());
  CHECK(importer->server_hello().at("joined") == session);
  CHECK(s.sessions() == 1);  // no session of its own
  // The exporter's PD is the importer's to use and to import; a PD the session does not hold is not.
  CHECK(importer->call({{"op", "import_pd"}, {"pd", pd}}).at("pd") == pd);
  try {
    importer->call({{"op", "import_pd"}, {"pd", pd + 100}});
    FAIL("a PD the session does not hold was imported");
  } catch (const ControlError& e) {
    CHECK(e.error_number() == EINVAL);
  }
  const json mw = importer->call({{"op", "alloc_mw"}, {"pd", pd}, {"type", 1}});
  exporter->call({{"op", "dealloc_mw"}, {"mw", mw.at("rkey").get<uint32_t>() >> 8}});  // one table for both
  const uint32_t importers_pd = importer->call({{"op", "alloc_pd"}}).at("pd");
  exporter->call({{"op", "dealloc_pd"}, {"pd", importers_pd}});

  // An importer of the importer joins the same session.
  auto second = ControlConnection::connect(s.path, "second", importer->fd());
  CHECK(second->server_hello().at("joined") == session);

  // The session lives while any of its connections does, the exporter's included.
  exporter.reset();
  importer.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(s.sessions() == 1);
  CHECK(second->call({{"op", "dealloc_pd"}, {"pd", pd}}).is_object());
  second.reset();
  wait_for_sessions(s, 0);
  CHECK(s.sessions() == 0);
}

TEST_CASE("session import: descriptors that are no open context's are refused", "[verbs][import]") {
  ServedHarness s;
  auto exporter = ControlConnection::connect(s.path, "exporter");
  int pipe_fds[2], pair[2];
  REQUIRE(pipe(pipe_fds) == 0);
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) == 0);
  const int own_end = pair[1];  // stands in for a connection's own end where one is needed first
  CHECK(errno_of(hello_by_hand(s.path, {{"import", true}}, {})) == EBADF);                        // nothing shown
  CHECK(errno_of(hello_by_hand(s.path, {{"import", true}}, {own_end})) == EBADF);                 // no second
  CHECK(errno_of(hello_by_hand(s.path, {{"import", true}}, {own_end, pipe_fds[0]})) == EBADF);    // not a socket
  CHECK(errno_of(hello_by_hand(s.path, {{"import", true}}, {own_end, pair[0]})) == EPERM);        // not uroced's
  CHECK(errno_of(hello_by_hand(s.path, {{"import", 1}}, {own_end, exporter->fd()})) == EINVAL);   // not a boolean
  CHECK(errno_of(hello_by_hand(s.path, {{"import", true}}, {own_end, exporter->fd()})) == 0);     // the real one
  CHECK(s.sessions() == 1);
  for (int fd : {pipe_fds[0], pipe_fds[1], pair[0], pair[1]}) close(fd);
}

TEST_CASE("session import: the first connection to show a socket keeps it", "[verbs][import]") {
  // A connection that shows, with its hello, another connection's end it was given (not its own) does not
  // take that end over: importing it still joins the session of the connection it belongs to.
  ServedHarness s;
  auto exporter = ControlConnection::connect(s.path, "exporter");
  const uint64_t session = exporter->server_hello().at("session");
  int claimer = -1;
  const json claimed = hello_by_hand(s.path, json::object(), {exporter->fd()}, &claimer);
  REQUIRE(errno_of(claimed) == 0);
  CHECK(claimed.at("session") != session);
  auto importer = ControlConnection::connect(s.path, "importer", exporter->fd());
  CHECK(importer->server_hello().at("joined") == session);
  close(claimer);
}

TEST_CASE("session import: an attached context shares the session's async events and doorbell",
          "[verbs][import]") {
  ServedHarness s;
  auto exporter = ControlConnection::connect(s.path, "exporter");
  auto importer = ControlConnection::connect(s.path, "importer", exporter->fd());
  std::vector<int> fds;
  try {
    importer->call({{"op", "open_device"}, {"attach", true}}, &fds);
    FAIL("attached to a session with no device open");
  } catch (const ControlError& e) {
    CHECK(e.error_number() == EINVAL);
  }
  const json opened = exporter->call({{"op", "open_device"}, {"doorbell", true}}, &fds);
  CHECK(fds.size() == 4);
  for (int fd : fds) close(fd);
  fds.clear();
  try {
    importer->call({{"op", "open_device"}, {"doorbell", true}}, &fds);
    FAIL("opened the device twice in one session");
  } catch (const ControlError& e) {
    CHECK(e.error_number() == EBUSY);
  }
  const json attached = importer->call({{"op", "open_device"}, {"doorbell", true}, {"attach", true}}, &fds);
  CHECK(attached.at("fds") == opened.at("fds"));  // async events, wake, engine status and the same doorbell
  REQUIRE(fds.size() == 4);
  for (int fd : fds) close(fd);
}

}  // namespace uroce::test::service
