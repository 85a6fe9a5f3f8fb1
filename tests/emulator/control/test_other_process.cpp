// Clients in another process: credentials are the child's, descriptors cross processes, and a client
// killed mid-session is noticed once.
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <catch2/catch.hpp>

#include "emulator/client/control_connection.hpp"
#include "server_fixture.hpp"

using uroce::emulator::client::ControlConnection;
using uroce::emulator::control::UniqueFd;
using uroce::emulator::control::testing::SessionRecord;
using uroce::emulator::control::testing::ServerFixture;

namespace {

// The child's side of "a client in another process"; its exit status says what went wrong (no Catch2 in
// the child).
int child_session(const std::string& path) {
  try {
    auto connection = ControlConnection::connect(path, "child");
    if (connection->call({{"op", "whoami"}})["pid"] != ::getpid()) return 2;
    std::vector<int> fds;
    const std::size_t size = connection->call({{"op", "memfd"}}, &fds)["size"];
    if (fds.size() != 1) return 3;
    UniqueFd memfd(fds[0]);
    void* mapping = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
    if (mapping == MAP_FAILED) return 4;
    std::strcpy(static_cast<char*>(mapping), "from the child");
    if (connection->call({{"op", "read_memfd"}})["text"] != "from the child") return 5;
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

// Connects, proves the session works, tells the parent through `ready`, then waits to be killed.
[[noreturn]] void child_that_waits_to_die(const std::string& path, int ready) {
  try {
    auto connection = ControlConnection::connect(path, "doomed");
    connection->call({{"op", "memfd"}});
    const char byte = 'r';
    if (::write(ready, &byte, 1) != 1) ::_exit(2);
    for (;;) ::pause();
  } catch (const std::exception&) {
    ::_exit(1);
  }
}

bool has_pid(const std::vector<SessionRecord>& records, pid_t pid) {
  for (const SessionRecord& record : records) {
    if (record.pid == pid) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a client in a forked process works and is identified by its own pid", "[control][fork]") {
  ServerFixture fixture(/*start_now=*/false);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(child_session(fixture.path));
  fixture.start();

  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(fixture.handler.wait_until([&](const auto& opened, const auto& closed) {
    return has_pid(opened, child) && has_pid(closed, child);
  }));
  CHECK(fixture.handler.closes_of(child) == 1);
}

TEST_CASE("a client killed mid-session closes its session exactly once", "[control][fork]") {
  ServerFixture fixture(/*start_now=*/false);
  int ready[2];
  REQUIRE(::pipe2(ready, O_CLOEXEC) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) child_that_waits_to_die(fixture.path, ready[1]);
  ::close(ready[1]);
  fixture.start();

  pollfd readable{ready[0], POLLIN, 0};
  REQUIRE(::poll(&readable, 1, 10000) == 1);
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  CHECK(fixture.handler.closes_of(child) == 0);

  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(fixture.handler.wait_until([&](const auto&, const auto& closed) { return has_pid(closed, child); }));

  // Nothing later (more time, the server's own shutdown) closes it again.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fixture.stop();
  CHECK(fixture.handler.closes_of(child) == 1);
  CHECK(fixture.handler.opened().size() == fixture.handler.closed().size());
}
