// Requests and responses through the client library, in this process: data, errors, descriptors both
// ways, events between responses, concurrent callers.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <catch2/catch.hpp>

#include "emulator/client/control_connection.hpp"
#include "server_fixture.hpp"

using uroce::emulator::client::ControlConnection;
using uroce::emulator::client::ControlError;
using uroce::emulator::control::UniqueFd;
using uroce::emulator::control::testing::is_close_on_exec;
using uroce::emulator::control::testing::ServerFixture;

namespace {

int error_number_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ControlError& e) {
    return e.error_number();
  }
  return 0;
}

}  // namespace

TEST_CASE("hello tells the client who the server is and who the client is", "[control]") {
  ServerFixture fixture;
  auto connection = ControlConnection::connect(fixture.path, "test-client");
  const auto& hello = connection->server_hello();
  CHECK(hello["ok"] == true);
  CHECK(hello["v"] == 1);
  CHECK(hello["server"] == "uroced");
  CHECK(hello["capabilities"] == nlohmann::json({"echo", "memfd", "eventfd"}));

  const nlohmann::json me = connection->call({{"op", "whoami"}});
  CHECK(me["pid"] == ::getpid());
  CHECK(me["uid"] == ::getuid());
  CHECK(me["gid"] == ::getgid());
  CHECK(me["client"] == "test-client");
  CHECK(me["session"] == hello["session"]);
  REQUIRE(fixture.handler.opened().size() == 1);
  CHECK(fixture.handler.opened()[0].pid == ::getpid());
}

TEST_CASE("a handler can refuse a client at hello", "[control]") {
  ServerFixture fixture;
  try {
    ControlConnection::connect(fixture.path, "refuse-me");
    FAIL("connect succeeded");
  } catch (const ControlError& e) {
    CHECK(e.error_number() == EPERM);
    CHECK_THAT(e.what(), Catch::Contains("not welcome"));
  }
}

TEST_CASE("responses carry data, errors and handler failures", "[control]") {
  ServerFixture fixture;
  auto connection = ControlConnection::connect(fixture.path);

  const nlohmann::json data = {{"text", "héllo"}, {"numbers", {1, 2, 3}}};
  const nlohmann::json echoed = connection->call({{"op", "echo"}, {"data", data}});
  CHECK(echoed["ok"] == true);
  CHECK(echoed["data"] == data);

  CHECK(error_number_of([&] { connection->call({{"op", "fail"}}); }) == ENOENT);
  CHECK(error_number_of([&] { connection->call({{"op", "throw"}}); }) == EIO);
  CHECK(error_number_of([&] { connection->call({{"op", "no-such-op"}}); }) == EOPNOTSUPP);
  // The session survives all of them.
  CHECK(connection->call({{"op", "echo"}, {"data", 7}})["data"] == 7);
}

TEST_CASE("a memfd from the server is shared memory with it", "[control]") {
  ServerFixture fixture;
  auto connection = ControlConnection::connect(fixture.path);
  std::vector<int> fds;
  const nlohmann::json reply = connection->call({{"op", "memfd"}}, &fds);
  REQUIRE(fds.size() == 1);
  UniqueFd memfd(fds[0]);
  CHECK(is_close_on_exec(memfd.get()));

  const std::size_t size = reply["size"];
  void* mapping = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  REQUIRE(mapping != MAP_FAILED);
  std::strcpy(static_cast<char*>(mapping), "written by the client");
  CHECK(connection->call({{"op", "read_memfd"}})["text"] == "written by the client");
  ::munmap(mapping, size);
}

TEST_CASE("an eventfd from the server signals both ways", "[control]") {
  ServerFixture fixture;
  auto connection = ControlConnection::connect(fixture.path);
  std::vector<int> fds;
  connection->call({{"op", "eventfd"}, {"initial", 7}}, &fds);
  REQUIRE(fds.size() == 1);
  UniqueFd event(fds[0]);
  CHECK(is_close_on_exec(event.get()));

  eventfd_t value = 0;
  REQUIRE(::eventfd_read(event.get(), &value) == 0);
  CHECK(value == 7);
  REQUIRE(::eventfd_write(event.get(), 5) == 0);
  CHECK(connection->call({{"op", "read_eventfd"}})["value"] == 5);
}

TEST_CASE("descriptors sent by the client reach the handler", "[control]") {
  ServerFixture fixture;
  auto connection = ControlConnection::connect(fixture.path);
  UniqueFd first(::memfd_create("first", MFD_CLOEXEC));
  UniqueFd second(::memfd_create("second", MFD_CLOEXEC));
  REQUIRE(::write(first.get(), "one", 3) == 3);
  REQUIRE(::write(second.get(), "two", 3) == 3);
  const int to_send[] = {first.get(), second.get()};
  const nlohmann::json reply = connection->call({{"op", "read_received"}}, to_send, nullptr);
  CHECK(reply["texts"] == nlohmann::json({"one", "two"}));
  CHECK(reply["close_on_exec"] == true);

  const std::vector<int> too_many(17, first.get());
  CHECK(error_number_of([&] { connection->call({{"op", "read_received"}}, too_many, nullptr); }) == E2BIG);
}

TEST_CASE("events are kept when they arrive between responses", "[control]") {
  ServerFixture fixture;
  auto connection = ControlConnection::connect(fixture.path);
  CHECK(connection->call({{"op", "event_then_reply"}})["done"] == true);
  auto events = connection->take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].message == nlohmann::json({{"event", "tick"}, {"n", 1}}));
  CHECK(connection->take_events().empty());
}

TEST_CASE("a broadcast reaches idle clients and makes their fd readable", "[control]") {
  ServerFixture fixture;
  auto listener = ControlConnection::connect(fixture.path, "listener");
  auto speaker = ControlConnection::connect(fixture.path, "speaker");
  CHECK(is_close_on_exec(listener->fd()));

  speaker->call({{"op", "broadcast"}, {"text", "hi"}});
  pollfd ready{listener->fd(), POLLIN, 0};
  REQUIRE(::poll(&ready, 1, 5000) == 1);
  auto events = listener->take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].message["event"] == "news");
  CHECK(events[0].message["text"] == "hi");
  CHECK(speaker->take_events().size() == 1);  // the speaker said hello too
}

TEST_CASE("concurrent calls on one connection each get their own answer", "[control]") {
  ServerFixture fixture;
  auto connection = ControlConnection::connect(fixture.path);
  constexpr int kThreads = 4;
  constexpr int kCalls = 100;
  std::atomic<int> wrong = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const int value = t * 1000 + i;
        if (connection->call({{"op", "echo"}, {"data", value}})["data"] != value) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(wrong == 0);
}

TEST_CASE("stopping the server tells clients and closes every session once", "[control]") {
  ServerFixture fixture;
  auto first = ControlConnection::connect(fixture.path);
  auto second = ControlConnection::connect(fixture.path);
  fixture.stop();

  pollfd ready{first->fd(), POLLIN, 0};
  REQUIRE(::poll(&ready, 1, 5000) == 1);
  auto events = first->take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].message["event"] == "shutdown");
  CHECK(first->closed());
  CHECK(error_number_of([&] { first->call({{"op", "echo"}}); }) == ECONNRESET);
  CHECK(error_number_of([&] { second->call({{"op", "echo"}}); }) == ECONNRESET);
  CHECK(second->take_events().size() == 1);  // the shutdown event that came before the hang-up

  CHECK(fixture.handler.opened().size() == 2);
  CHECK(fixture.handler.closed().size() == 2);
}
