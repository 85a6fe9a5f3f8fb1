// The daemon's end of the control socket (protocol: protocol.hpp, docs/control-protocol.md): listens at
// a path, accepts connections, runs one Session per client and hands their requests to a Handler.
//
// Everything runs on the io_context's thread (the daemon's control thread, never the engine's), and every
// member function must be called there (post to the io_context from elsewhere). The Handler must outlive
// the server: stopping the server, which the destructor does, closes every session through on_close.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/seq_packet_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "emulator/control/handler.hpp"
#include "emulator/control/session.hpp"
#include "emulator/control/socket_path.hpp"

namespace uroce::emulator::control {

class ControlServer {
 public:
  // Creates the socket at `path` and starts accepting (the io_context need not run yet). Throws
  // std::system_error when it cannot, e.g. "another uroced is running at PATH".
  ControlServer(boost::asio::io_context& io, std::string path, Handler& handler);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& path() const { return path_; }
  std::size_t session_count() const { return sessions_.size(); }
  // The open session with this id, or null.
  std::shared_ptr<Session> session(std::uint64_t id) const;

  // Sends an event ({"event":"<name>", ...}) to every session that has said hello.
  void broadcast(const nlohmann::json& event);

  // Stops accepting, sends {"event":"shutdown"} to every session, closes them all (Handler::on_close
  // for each) and removes the socket file. Idempotent.
  void stop();

 private:
  using Acceptor = boost::asio::basic_socket_acceptor<boost::asio::generic::seq_packet_protocol>;

  void wait_for_connection();
  void accept_ready();
  void start_session(UniqueFd connection);

  boost::asio::io_context& io_;
  const std::string path_;
  Handler& handler_;
  Acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  SocketFileIdentity socket_file_;
  std::map<std::uint64_t, std::shared_ptr<Session>> sessions_;
  std::uint64_t next_session_id_ = 1;
  bool stopped_ = false;
  // Completion handlers hold a weak reference: one that runs after the server is gone does nothing.
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace uroce::emulator::control
