// What the daemon plugs into the control server: the meaning of each request. The server owns the
// transport (framing, descriptors, hello, errors for malformed input); a Handler only ever sees
// well-formed requests from sessions that said hello.
//
// Every call is made on the io_context's thread (the daemon's control thread), one at a time.
#pragma once

#include <cerrno>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/control/unique_fd.hpp"

namespace uroce::emulator::control {

class Session;

// The answer a handler builds. On success the response is `body` plus "id" and "ok"; the descriptors are
// attached to it and closed by the server once sent. After fail(), body and descriptors are dropped.
class Reply {
 public:
  nlohmann::json body = nlohmann::json::object();

  void attach(UniqueFd fd) { fds_.push_back(std::move(fd)); }
  void fail(int error_number, std::string text) {
    failed_ = true;
    error_number_ = error_number;
    error_text_ = std::move(text);
  }

  bool failed() const { return failed_; }
  int error_number() const { return error_number_; }
  const std::string& error_text() const { return error_text_; }
  std::vector<UniqueFd>& fds() { return fds_; }

 private:
  std::vector<UniqueFd> fds_;
  bool failed_ = false;
  int error_number_ = 0;
  std::string error_text_;
};

class Handler {
 public:
  virtual ~Handler() = default;

  // A client connected (before its hello). Every session that was opened is closed exactly once.
  virtual void on_open(Session&) {}
  // A valid hello from `session`: the server has filled reply.body with "v", "server", "session" and an
  // empty "capabilities"; the handler may add to it, or refuse the client with reply.fail().
  virtual void on_hello(Session&, const nlohmann::json& /*request*/, Reply&) {}
  // Any other request. The descriptors that came with it are in session.received_fds(): move out the ones
  // to keep, the rest are closed on return. An exception becomes an EIO error reply and a log line.
  virtual void handle(Session& session, const nlohmann::json& request, Reply& reply) = 0;
  // The peer closed or died, the session was dropped for a protocol violation, or the server stopped.
  // Called exactly once per session; nothing can be sent to the session any more.
  virtual void on_close(Session&) {}
};

}  // namespace uroce::emulator::control
