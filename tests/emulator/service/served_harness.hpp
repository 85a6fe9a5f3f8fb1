// The verbs service of a ServiceHarness behind the real control server and ControlAdapter, on a socket of
// its own, served on a thread of its own: for tests that talk to it through the client library.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "emulator/control/control_server.hpp"
#include "emulator/control/datagram.hpp"
#include "emulator/daemon/control_adapter.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {

struct ServedHarness {
  ServedHarness() : work(boost::asio::make_work_guard(io)) {
    char pattern[] = "/tmp/uroce-served-XXXXXX";
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

// A hello sent by hand on a new connection, with `fds` attached; the answer (and the connection, which
// `keep` receives if given, else closes).
inline json hello_by_hand(const std::string& path, const json& extra, std::vector<int> fds, int* keep = nullptr) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  REQUIRE(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  json hello = {{"v", 1}, {"id", 1}, {"op", "hello"}, {"client", "t"}};
  hello.update(extra);
  namespace control = emulator::control;
  REQUIRE(control::send_datagram(fd, hello.dump(), fds, control::Blocking::wait).status == control::IoStatus::done);
  const control::ReceiveResult r = control::receive_datagram(fd, control::Blocking::wait);
  REQUIRE(r.status == control::IoStatus::done);
  if (keep != nullptr) {
    *keep = fd;
  } else {
    close(fd);
  }
  return json::parse(r.datagram.text);
}

// The errno of a refused answer, 0 for success.
inline int errno_of(const json& reply) { return reply.value("ok", false) ? 0 : reply.value("errno", -1); }

}  // namespace uroce::test::service
