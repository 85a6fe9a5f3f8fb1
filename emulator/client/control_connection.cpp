#include "emulator/client/control_connection.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "emulator/client/logger.hpp"

#include "emulator/control/datagram.hpp"
#include "emulator/control/messages.hpp"
#include "emulator/control/protocol.hpp"

namespace uroce::emulator::client {

using control::Blocking;
using control::IoStatus;
using control::UniqueFd;

namespace {

std::string unreachable(const std::string& path, const std::string& why) {
  return "cannot reach uroced at " + path + ": " + why + " (is uroced running?)";
}

}  // namespace

std::vector<std::string> ControlConnection::socket_paths() {
  std::vector<std::string> paths;
  if (const char* configured = std::getenv(std::string(control::kSocketPathEnvironment).c_str())) {
    const std::string_view list(configured);
    for (size_t start = 0; start <= list.size();) {
      const size_t end = std::min(list.find(':', start), list.size());
      if (end > start) paths.emplace_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  if (paths.empty()) paths.emplace_back(control::kDefaultSocketPath);
  return paths;
}

std::string ControlConnection::default_socket_path() { return socket_paths().front(); }

UniqueFd ControlConnection::open_socket(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    throw ControlError(ENAMETOOLONG, unreachable(path, "the socket path is empty or too long"));
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);

  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket) throw ControlError(errno, unreachable(path, std::strerror(errno)));
  int result;
  do {
    result = ::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
  } while (result != 0 && errno == EINTR);
  if (result != 0) throw ControlError(errno, unreachable(path, std::strerror(errno)));
  return socket;
}

std::unique_ptr<ControlConnection> ControlConnection::connect(const std::string& path, const std::string& client_name,
                                                              int import_session) {
  std::unique_ptr<ControlConnection> connection(new ControlConnection(open_socket(path)));
  connection->path_ = path;
  connection->client_name_ = client_name;
  nlohmann::json hello = {{"op", "hello"}, {"client", client_name}};
  std::vector<int> shown = {connection->socket_.get()};
  if (import_session >= 0) {
    hello["import"] = true;
    shown.push_back(import_session);
  }
  try {
    connection->server_hello_ = connection->call(hello, shown, nullptr);
  } catch (const ControlError& e) {
    throw ControlError(e.error_number(), "uroced at " + path + " refused the connection: " + e.what());
  }
  return connection;
}

std::string ControlConnection::daemon_path_of(int fd) {
  sockaddr_un address{};
  socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw ControlError(errno, std::string("not a connection to uroced: ") + std::strerror(errno));
  }
  const size_t path_bytes = length > offsetof(sockaddr_un, sun_path) ? length - offsetof(sockaddr_un, sun_path) : 0;
  if (address.sun_family != AF_UNIX || path_bytes == 0 || address.sun_path[0] == '\0') {
    throw ControlError(EBADF, "not a connection to uroced's control socket");
  }
  return std::string(address.sun_path, strnlen(address.sun_path, path_bytes));
}

ControlConnection::ControlConnection(UniqueFd socket) : socket_(std::move(socket)), owner_(::getpid()) {}

ControlConnection::~ControlConnection() = default;

nlohmann::json ControlConnection::call(nlohmann::json request, std::vector<int>* fds_out) {
  return call(std::move(request), {}, fds_out);
}

nlohmann::json ControlConnection::call(nlohmann::json request, std::span<const int> fds_to_send,
                                       std::vector<int>* fds_out) {
  if (!request.is_object()) throw ControlError(EINVAL, "a control request must be a JSON object");
  const std::lock_guard lock(call_mutex_);
  if (::getpid() != owner_) rejoin();
  return call_locked(std::move(request), fds_to_send, fds_out);
}

void ControlConnection::rejoin() {
  const auto session = server_hello_.find("session");
  const std::string token = server_hello_.value("join_token", std::string());
  if (session == server_hello_.end() || token.empty()) {
    throw ControlError(EOPNOTSUPP, "this uroce device was opened by process " + std::to_string(owner_) +
                                       ", and uroced cannot share its session with a child made by fork()");
  }
  // The inherited socket stays open for the parent (this closes only the child's descriptor of it).
  socket_ = open_socket(path_);
  closed_ = false;
  next_id_ = 1;
  {
    const std::lock_guard lock(events_mutex_);
    events_.clear();  // the parent's
  }
  try {
    const int shown[] = {socket_.get()};  // this connection's own end, as every hello shows it (connect())
    call_locked({{"op", "hello"}, {"client", client_name_}, {"join", {{"session", *session}, {"token", token}}}},
                shown, nullptr);
  } catch (const ControlError& e) {
    closed_ = true;
    throw ControlError(EOPNOTSUPP, std::string("a child made by fork() could not join its parent's uroce session: ") +
                                       e.what());
  }
  owner_ = ::getpid();
}

nlohmann::json ControlConnection::call_locked(nlohmann::json request, std::span<const int> fds_to_send,
                                              std::vector<int>* fds_out) {
  if (closed_) throw ControlError(ECONNRESET, "the connection to uroced is closed");

  const std::uint64_t id = next_id_++;
  request["v"] = control::kProtocolVersion;
  request["id"] = id;
  const std::string text = control::encode(request);
  if (text.size() > control::kMaxMessageBytes) {
    throw ControlError(EMSGSIZE, "control request longer than " + std::to_string(control::kMaxMessageBytes) +
                                     " bytes");
  }
  if (fds_to_send.size() > control::kMaxFds) {
    throw ControlError(E2BIG, "at most " + std::to_string(control::kMaxFds) + " descriptors per request");
  }
  const control::SendResult sent = control::send_datagram(socket_.get(), text, fds_to_send, Blocking::wait);
  if (sent.status == IoStatus::peer_closed) {
    // The daemon is gone, but what it sent before going (a "shutdown" event) is still to be read.
    nlohmann::json message;
    std::vector<UniqueFd> fds;
    while (receive_one(/*wait=*/false, message, fds) && !message.is_null()) {
    }
    closed_ = true;
    throw ControlError(ECONNRESET, "uroced closed the connection");
  }
  if (sent.status != IoStatus::done) {
    throw ControlError(sent.error, std::string("cannot send to uroced: ") + std::strerror(sent.error));
  }

  for (;;) {
    nlohmann::json response;
    std::vector<UniqueFd> fds;
    if (!receive_one(/*wait=*/true, response, fds)) {
      throw ControlError(ECONNRESET, "uroced closed the connection before answering \"" +
                                         request.value("op", std::string()) + "\"");
    }
    const auto response_id = response.find("id");
    // A null id is the server saying it could not read the request: with one request in flight, ours.
    const bool ours = response_id != response.end() && (*response_id == id || response_id->is_null());
    if (!ours) {
      logger().warn("control connection: ignoring a response that is not to request {}: {}", id, control::encode(response));
      continue;
    }
    if (!response.value("ok", false)) {
      const auto error_number = response.find("errno");
      throw ControlError(error_number != response.end() && error_number->is_number_integer()
                             ? error_number->get<int>()
                             : EPROTO,
                         response.value("error", std::string("uroced refused the request")));
    }
    if (fds_out != nullptr) {
      for (UniqueFd& fd : fds) fds_out->push_back(fd.release());
    }
    return response;
  }
}

std::vector<ControlEvent> ControlConnection::take_events() {
  if (::getpid() != owner_) return {};  // the parent's messages: not the forked child's to read
  {
    const std::unique_lock lock(call_mutex_);
    nlohmann::json message;
    std::vector<UniqueFd> fds;
    while (!closed_ && receive_one(/*wait=*/false, message, fds)) {
      if (message.is_null()) break;  // nothing more waiting
      logger().warn("control connection: ignoring a message that is neither an event nor awaited: {}",
                   control::encode(message));
    }
  }
  const std::lock_guard lock(events_mutex_);
  std::vector<ControlEvent> taken(std::make_move_iterator(events_.begin()), std::make_move_iterator(events_.end()));
  events_.clear();
  return taken;
}

bool ControlConnection::receive_one(bool wait, nlohmann::json& message, std::vector<UniqueFd>& fds) {
  for (;;) {
    message = nullptr;
    fds.clear();
    control::ReceiveResult received =
        control::receive_datagram(socket_.get(), wait ? Blocking::wait : Blocking::dont_wait);
    if (received.status == IoStatus::would_block) return true;  // message stays null: nothing waiting
    if (received.status != IoStatus::done) {
      if (received.status == IoStatus::failed) {
        logger().error("control connection: receive from uroced failed: {}", std::strerror(received.error));
      }
      closed_ = true;
      return false;
    }
    if (received.datagram.text_truncated || received.datagram.control_truncated) {
      logger().error("control connection: dropped a truncated message from uroced");
      continue;
    }
    message = nlohmann::json::parse(received.datagram.text, nullptr, /*allow_exceptions=*/false);
    if (message.is_discarded() || !message.is_object()) {
      logger().error("control connection: dropped a message from uroced that is not a JSON object");
      continue;
    }
    if (control::is_event(message)) {
      queue_event(std::move(message), std::move(received.datagram.fds));
      continue;
    }
    fds = std::move(received.datagram.fds);
    return true;
  }
}

void ControlConnection::queue_event(nlohmann::json message, std::vector<UniqueFd> fds) {
  const std::lock_guard lock(events_mutex_);
  events_.push_back({std::move(message), std::move(fds)});
}

}  // namespace uroce::emulator::client
