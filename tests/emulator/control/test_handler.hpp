// A Handler for the tests: a few operations that exercise every way a request can travel (plain data,
// descriptors each way, events, failures, exceptions), and a record of the sessions it saw, which the
// test thread can wait on.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "emulator/control/control_server.hpp"
#include "emulator/control/handler.hpp"
#include "emulator/control/session.hpp"

namespace uroce::emulator::control::testing {

struct SessionRecord {
  std::uint64_t id;
  pid_t pid;
};

class TestHandler : public Handler {
 public:
  // The server for "broadcast"; set once it exists.
  ControlServer* server = nullptr;

  void on_open(Session& session) override;
  void on_hello(Session& session, const nlohmann::json& request, Reply& reply) override;
  void handle(Session& session, const nlohmann::json& request, Reply& reply) override;
  void on_close(Session& session) override;

  std::vector<SessionRecord> opened() const;
  std::vector<SessionRecord> closed() const;
  // How many times on_close ran for sessions of process `pid`.
  std::size_t closes_of(pid_t pid) const;
  // Waits until `done(opened, closed)` holds; false on timeout.
  using Condition = std::function<bool(const std::vector<SessionRecord>& opened,
                                       const std::vector<SessionRecord>& closed)>;
  bool wait_until(const Condition& done,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) const;

 private:
  void answer(Session& session, const std::string& op, const nlohmann::json& request, Reply& reply);

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<SessionRecord> opened_;
  std::vector<SessionRecord> closed_;
  // The server's own copies of the memfd and eventfd each session was given, by session id.
  std::map<std::uint64_t, UniqueFd> memfds_;
  std::map<std::uint64_t, UniqueFd> eventfds_;
};

}  // namespace uroce::emulator::control::testing
