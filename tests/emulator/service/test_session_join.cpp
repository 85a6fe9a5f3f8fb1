// Joining a session (emulator/daemon/control_adapter.hpp): the verbs service behind the real control
// server and ControlAdapter, on a socket of its own, and the real client library. A child made by fork()
// that uses its parent's connection joins the parent's session; a hello with a wrong token, or for a
// session that does not exist, is refused; a session lives while any of its connections does.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "emulator/client/control_connection.hpp"
#include "emulator/control/control_server.hpp"
#include "emulator/daemon/control_adapter.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

// The verbs service of a ServiceHarness behind a ControlServer on its own thread.
struct ServedHarness {
  ServedHarness() : work(boost::asio::make_work_guard(io)) {
    char pattern[] = "/tmp/uroce-join-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    dir = pattern;
    path = dir + "/uroced.sock";
    server.emplace(io, path, adapter);
    thread = std::thread([this] { io.run(); });
  }
  ~ServedHarness() {
    on_server_thread([this] { server->stop(); });
    work.reset();
    thread.join();
    std::filesystem::remove_all(dir);
  }
  void on_server_thread(const std::function<void()>& task) {
    std::promise<void> done;
    boost::asio::post(io, [&] {
      task();
      done.set_value();
    });
    done.get_future().wait();
  }
  size_t sessions() {
    size_t n = 0;
    on_server_thread([&] { n = h.service->session_count(); });
    return n;
  }

  ServiceHarness h;
  emulator::ControlAdapter adapter{*h.service};
  std::string dir, path;
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
  std::optional<emulator::control::ControlServer> server;
  std::thread thread;
};

// A hello sent by hand (the client library only says the plain one, or joins with its own token); the
// answer's errno, 0 for success.
int hello_errno(const std::string& path, const json& join) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  const std::string hello = json{{"v", 1}, {"id", 1}, {"op", "hello"}, {"client", "t"}, {"join", join}}.dump();
  REQUIRE(send(fd, hello.data(), hello.size(), 0) == ssize_t(hello.size()));
  char answer[4096];
  const ssize_t n = recv(fd, answer, sizeof answer, 0);
  close(fd);
  REQUIRE(n > 0);
  const json reply = json::parse(std::string(answer, size_t(n)));
  return reply.value("ok", false) ? 0 : reply.value("errno", -1);
}

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
