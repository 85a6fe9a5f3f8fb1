#include "emulator/control/control_server.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

namespace uroce::emulator::control {
namespace {

// When accept fails for lack of descriptors the listening socket stays readable; waiting a little
// instead of retrying at once keeps the control thread from spinning.
constexpr std::chrono::milliseconds kAcceptRetryDelay{100};

bool peer_credentials(int fd, PeerCredentials& peer) {
  ucred credentials{};
  socklen_t size = sizeof credentials;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0) return false;
  peer = {credentials.pid, credentials.uid, credentials.gid};
  return true;
}

}  // namespace

ControlServer::ControlServer(boost::asio::io_context& io, std::string path, Handler& handler)
    : io_(io), path_(std::move(path)), handler_(handler), acceptor_(io), accept_retry_(io) {
  ListeningSocket listening = listen_at(path_);
  socket_file_ = listening.identity;
  acceptor_.assign(boost::asio::generic::seq_packet_protocol(AF_UNIX, SOCK_SEQPACKET), listening.fd.release());
  spdlog::info("control: listening on {}", path_);
  wait_for_connection();
}

ControlServer::~ControlServer() { stop(); }

std::shared_ptr<Session> ControlServer::session(std::uint64_t id) const {
  const auto found = sessions_.find(id);
  return found == sessions_.end() ? nullptr : found->second;
}

void ControlServer::wait_for_connection() {
  acceptor_.async_wait(Acceptor::wait_read, [this, alive = std::weak_ptr<int>(alive_)](
                                                const boost::system::error_code& error) {
    if (alive.expired() || stopped_) return;
    if (error) {
      spdlog::error("control: waiting for connections failed: {}", error.message());
      return;
    }
    accept_ready();
  });
}

void ControlServer::accept_ready() {
  for (;;) {
    // accept4 rather than Asio's accept: the connection must be close-on-exec from its first instant.
    UniqueFd connection(::accept4(acceptor_.native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (connection) {
      start_session(std::move(connection));
      if (stopped_) return;  // a handler may stop the server from on_open
      continue;
    }
    const int error = errno;
    if (error == EINTR || error == ECONNABORTED) continue;
    if (error == EAGAIN || error == EWOULDBLOCK) break;
    spdlog::error("control: accept failed: {}; retrying shortly", std::strerror(error));
    accept_retry_.expires_after(kAcceptRetryDelay);
    accept_retry_.async_wait([this, alive = std::weak_ptr<int>(alive_)](const boost::system::error_code& e) {
      if (!e && !alive.expired() && !stopped_) wait_for_connection();
    });
    return;
  }
  wait_for_connection();
}

void ControlServer::start_session(UniqueFd connection) {
  PeerCredentials peer;
  if (!peer_credentials(connection.get(), peer)) {
    spdlog::error("control: dropping a connection whose credentials are unknown: {}", std::strerror(errno));
    return;
  }
  const std::uint64_t id = next_session_id_++;
  auto session = std::make_shared<Session>(io_, std::move(connection), id, peer, handler_,
                                           [this](std::uint64_t closed_id) { sessions_.erase(closed_id); });
  sessions_.emplace(id, session);
  session->start();
}

void ControlServer::broadcast(const nlohmann::json& event) {
  // A copy: sending may close a session, which removes it from sessions_.
  std::vector<std::shared_ptr<Session>> targets;
  for (const auto& [id, session] : sessions_) {
    if (session->said_hello()) targets.push_back(session);
  }
  for (const auto& session : targets) session->send_event(event);
}

void ControlServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  boost::system::error_code ignored;
  accept_retry_.cancel();
  acceptor_.close(ignored);
  remove_socket_file(path_, socket_file_);

  std::vector<std::shared_ptr<Session>> open_sessions;
  for (const auto& [id, session] : sessions_) open_sessions.push_back(session);
  for (const auto& session : open_sessions) {
    // Best effort: sent if the peer's socket has room right now; the close below does not wait.
    session->send_event({{"event", "shutdown"}});
    session->close("uroced is stopping");
  }
  spdlog::info("control: stopped listening on {}", path_);
}

}  // namespace uroce::emulator::control
