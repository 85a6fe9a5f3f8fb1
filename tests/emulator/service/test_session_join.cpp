// Joining a session (emulator/daemon/control_adapter.hpp): the verbs service behind the real control
// server and ControlAdapter, on a socket of its own, and the real client library. A child made by fork()
// that uses its parent's connection joins the parent's session; a hello with a wrong token, or for a
// session that does not exist, is refused; a session lives while any of its connections does.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "emulator/client/control_connection.hpp"
#include "tests/emulator/service/served_harness.hpp"

namespace uroce::test::service {
namespace {

// A hello that joins `join` (the client library only joins with its own token); the answer's errno, 0 for
// success.
int hello_errno(const std::string& path, const json& join) { return errno_of(hello_by_hand(path, {{"join", join}}, {})); }

// Runs `body` in a child made by fork(), which exits 0 if it returned true, 1 if not or if it threw.
pid_t in_child(const std::function<bool()>& body) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid != 0) return pid;
  int status = 1;
  try {
    status = body() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
  }
  std::_Exit(status);
}

}  // namespace

TEST_CASE("session join: a forked child's calls act on its parent's session; bad tokens are refused",
          "[verbs][join]") {
  ServedHarness s;
  auto parent = emulator::client::ControlConnection::connect(s.path, "parent");
  const json hello = parent->server_hello();
  const std::string token = hello.at("join_token");
  CHECK(token.size() == 32);
  const uint64_t session = hello.at("session");
  const uint32_t parents_pd = parent->call({{"op", "alloc_pd"}}).at("pd");

  // Refused: another token, a session that does not exist, a join that says neither.
  std::string wrong = token;
  wrong[0] = wrong[0] == '0' ? '1' : '0';
  CHECK(hello_errno(s.path, {{"session", session}, {"token", wrong}}) == EPERM);
  CHECK(hello_errno(s.path, {{"session", session + 100}, {"token", token}}) == EPERM);
  CHECK(hello_errno(s.path, json::object()) == EINVAL);
  CHECK(hello_errno(s.path, {{"session", session}, {"token", token}}) == 0);  // the right one joins

  // The child's first call joins; its PD is the session's (the parent frees it), and the parent's PD is
  // the child's to use too. The child sends its PD's number and exits 0 when all went so.
  int to_parent[2];
  REQUIRE(pipe(to_parent) == 0);
  const pid_t pid = in_child([&] {
    const uint32_t pd = parent->call({{"op", "alloc_pd"}}).at("pd");
    const json mw = parent->call({{"op", "alloc_mw"}, {"pd", parents_pd}, {"type", 1}});
    parent->call({{"op", "dealloc_mw"}, {"mw", mw.at("rkey").get<uint32_t>() >> 8}});
    return write(to_parent[1], &pd, sizeof pd) == ssize_t(sizeof pd);
  });
  close(to_parent[1]);
  uint32_t childs_pd = 0;
  CHECK(read(to_parent[0], &childs_pd, sizeof childs_pd) == ssize_t(sizeof childs_pd));
  close(to_parent[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(childs_pd != parents_pd);
  parent->call({{"op", "dealloc_pd"}, {"pd", childs_pd}});  // the child's PD, freed by the parent
  CHECK(s.sessions() == 1);  // the child's connection closed; the session stays with the parent's
  parent.reset();
  for (int i = 0; i < 200 && s.sessions() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(s.sessions() == 0);
}

TEST_CASE("session join: a session outlives the connection that opened it while one that joined is open",
          "[verbs][join]") {
  ServedHarness s;
  auto parent = emulator::client::ControlConnection::connect(s.path, "parent");
  const uint32_t pd = parent->call({{"op", "alloc_pd"}}).at("pd");
  int joined[2], parent_left[2];
  REQUIRE(pipe(joined) == 0);
  REQUIRE(pipe(parent_left) == 0);
  const pid_t pid = in_child([&] {
    parent->call({{"op", "query_device"}});  // joins
    char c = 'j';
    if (write(joined[1], &c, 1) != 1 || read(parent_left[0], &c, 1) != 1) return false;
    parent->call({{"op", "dealloc_pd"}, {"pd", pd}});  // the parent's PD, after the parent left
    return true;
  });
  char c = 0;
  REQUIRE(read(joined[0], &c, 1) == 1);
  parent.reset();  // the connection that opened the session closes
  for (int i = 0; i < 20; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // served its close
  CHECK(s.sessions() == 1);
  REQUIRE(write(parent_left[1], &c, 1) == 1);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  for (int i = 0; i < 200 && s.sessions() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(s.sessions() == 0);
  for (int fd : {joined[0], joined[1], parent_left[0], parent_left[1]}) close(fd);
}

}  // namespace uroce::test::service
