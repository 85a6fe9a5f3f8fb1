// A control server at a fresh socket path, on its own thread, as the daemon runs it; plus a raw peer
// that speaks the wire format without the client library (for input no client library would send).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "emulator/control/control_server.hpp"
#include "emulator/control/unique_fd.hpp"
#include "test_handler.hpp"

namespace uroce::emulator::control::testing {

// A directory of its own under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class ServerFixture {
 public:
  // The socket exists when the constructor returns; requests are served once start() ran (tests that
  // fork do it first, so that the child is forked from a process with one thread).
  // `before_listening` runs with the socket path before the server is created (to leave files there).
  explicit ServerFixture(bool start_now = true,
                         const std::function<void(const std::string& path)>& before_listening = {});
  ~ServerFixture();

  void start();
  // Stops the server (on its thread) and waits for its thread to finish. Idempotent.
  void stop();
  // Runs `task` on the server's thread and waits for it.
  void on_server_thread(const std::function<void()>& task);
  std::size_t session_count();

  TempDir dir;
  std::string path;
  boost::asio::io_context io;
  TestHandler handler;
  std::optional<ControlServer> server;

 private:
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

// A connection that sends and receives raw datagrams.
class RawPeer {
 public:
  explicit RawPeer(const std::string& path);
  void send(std::string_view text, std::span<const int> fds = {});
  // The next message (JSON) within `timeout`, or nullopt if none came or the server hung up.
  std::optional<nlohmann::json> receive(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // True when the server closed the connection within `timeout` (messages before that are skipped).
  bool hung_up(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  int fd() const { return socket_.get(); }

 private:
  UniqueFd socket_;
};

// True when `fd` has FD_CLOEXEC set.
bool is_close_on_exec(int fd);
// True when reading `fd` (the read end of a pipe) reaches end of file within `timeout`: every copy of the
// write end has been closed.
bool pipe_reaches_eof(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace uroce::emulator::control::testing
