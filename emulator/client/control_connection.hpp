// An application's connection to uroced's control socket (protocol: emulator/control/protocol.hpp,
// docs/control-protocol.md): blocking request/response calls with file descriptors, and the daemon's
// unsolicited events kept for the caller.
//
// Plain POSIX sockets and no Boost or DPDK: this ends up inside the verbs shim, a shared library loaded
// into arbitrary programs. Every descriptor it creates or receives is close-on-exec, so none leaks into a
// program the application execs.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "emulator/control/unique_fd.hpp"

namespace uroce::emulator::client {

// The daemon answered with an error, or could not be reached. error_number() is an errno value, the
// daemon's own when it refused a request.
class ControlError : public std::runtime_error {
 public:
  ControlError(int error_number, const std::string& message)
      : std::runtime_error(message), error_number_(error_number) {}
  int error_number() const { return error_number_; }

 private:
  int error_number_;
};

// An unsolicited message from the daemon: {"event":"<name>", ...} and the descriptors it carried.
struct ControlEvent {
  nlohmann::json message;
  std::vector<control::UniqueFd> fds;
};

class ControlConnection {
 public:
  // The daemons a program uses: $UROCE_SOCKET when set, a list of paths separated by ':' as PATH is (one
  // uroced, one RDMA device, each; empty entries are skipped), else /run/uroce/uroced.sock.
  static std::vector<std::string> socket_paths();
  // The first of socket_paths(): the daemon of whatever serves only one (`uroce stats`).
  static std::string default_socket_path();

  // Connects and says hello. Throws ControlError: "cannot reach uroced at PATH: ... (is uroced
  // running?)", or the daemon's refusal of the hello (e.g. another protocol version). The hello shows the
  // daemon this connection's own socket, so that a context on it can be imported. With `import_session`
  // (a descriptor of another connection's socket, ibv_import_device's cmd_fd), the connection joins that
  // connection's session instead of opening one.
  static std::unique_ptr<ControlConnection> connect(const std::string& path = default_socket_path(),
                                                    const std::string& client_name = "liburoce_client",
                                                    int import_session = -1);
  // The path of the daemon socket that `fd` (a connection to uroced) is connected to. ControlError EBADF
  // (ENOTSOCK, ...) if it is no connected Unix socket.
  static std::string daemon_path_of(int fd);
  ~ControlConnection();
  ControlConnection(const ControlConnection&) = delete;
  ControlConnection& operator=(const ControlConnection&) = delete;

  // Sends `request` (an object with "op"; "v" and "id" are filled in) and waits for its response, which
  // it returns whole. Descriptors that came with the response go to *fds_out (the caller owns them) or are
  // closed when fds_out is null. Throws ControlError on an error response or a broken connection.
  // Thread-safe: concurrent calls are serialized.
  nlohmann::json call(nlohmann::json request, std::vector<int>* fds_out = nullptr);
  // The same, sending `fds_to_send` (at most 16, still owned by the caller) with the request.
  nlohmann::json call(nlohmann::json request, std::span<const int> fds_to_send, std::vector<int>* fds_out);

  // The events received so far, oldest first, including any waiting on the socket right now (read
  // without blocking, after a call in progress on another thread has finished). Call it when fd() polls
  // readable; then check closed().
  std::vector<ControlEvent> take_events();

  // The connection's socket, for poll(): readable when an event arrived or the daemon went away. Only
  // poll it; reading is done by call() and take_events().
  int fd() const { return socket_.get(); }
  // True once the daemon closed the connection (it stopped or died): every call() now fails.
  bool closed() const { return closed_; }
  // The daemon's answer to hello: "v", "server", "session", "capabilities", ...
  const nlohmann::json& server_hello() const { return server_hello_; }

 private:
  explicit ControlConnection(control::UniqueFd socket);

  // A connected socket to uroced at `path`. Throws ControlError.
  static control::UniqueFd open_socket(const std::string& path);
  // call() with call_mutex_ held.
  nlohmann::json call_locked(nlohmann::json request, std::span<const int> fds_to_send, std::vector<int>* fds_out);
  // In a child made by fork(): a connection of its own that joins the session its parent opened.
  void rejoin();

  // One received message filed where it belongs: an event into the queue, anything else returned.
  // Returns false when the connection broke (closed_ is then set).
  bool receive_one(bool wait, nlohmann::json& message, std::vector<control::UniqueFd>& fds);
  void queue_event(nlohmann::json message, std::vector<control::UniqueFd> fds);

  control::UniqueFd socket_;
  std::mutex call_mutex_;  // one request in flight; guards the socket's reads and next_id_
  std::uint64_t next_id_ = 1;
  // The process that connected. A child made by fork() inherits the socket, but the daemon's answers to
  // parent and child would arrive on one socket, each read by whichever process reads first, with the
  // same request numbers: the child's first call connects again and joins its parent's session instead
  // (rejoin, with the session's number and the token the daemon gave at hello), as a child shares its
  // parent's uverbs file in Linux. Until then take_events() leaves the socket to the parent.
  pid_t owner_ = 0;
  std::string path_, client_name_;
  std::mutex events_mutex_;
  std::deque<ControlEvent> events_;
  std::atomic<bool> closed_ = false;
  nlohmann::json server_hello_;
};

}  // namespace uroce::emulator::client
