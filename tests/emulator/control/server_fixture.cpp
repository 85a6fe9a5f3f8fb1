#include "server_fixture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <stdexcept>
#include <system_error>

#include <boost/asio/post.hpp>

#include "emulator/control/datagram.hpp"

namespace uroce::emulator::control::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/uroce-control-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

ServerFixture::ServerFixture(bool start_now, const std::function<void(const std::string&)>& before_listening)
    : path(dir.path() + "/uroced.sock"), work_(boost::asio::make_work_guard(io)) {
  if (before_listening) before_listening(path);
  server.emplace(io, path, handler);
  handler.server = &*server;
  if (start_now) start();
}

ServerFixture::~ServerFixture() { stop(); }

void ServerFixture::start() {
  thread_ = std::thread([this] { io.run(); });
}

void ServerFixture::stop() {
  if (thread_.joinable()) {
    on_server_thread([this] { server->stop(); });
    work_.reset();
    thread_.join();
  } else if (server) {
    server->stop();  // never started: nothing else runs the io_context
  }
}

void ServerFixture::on_server_thread(const std::function<void()>& task) {
  std::promise<void> done;
  boost::asio::post(io, [&] {
    task();
    done.set_value();
  });
  done.get_future().wait();
}

std::size_t ServerFixture::session_count() {
  std::size_t count = 0;
  on_server_thread([&] { count = server->session_count(); });
  return count;
}

RawPeer::RawPeer(const std::string& path) : socket_(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::connect(socket_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    throw std::system_error(errno, std::generic_category(), "connect " + path);
  }
}

void RawPeer::send(std::string_view text, std::span<const int> fds) {
  // Straight sendmsg, not send_datagram: that one refuses empty texts and too many descriptors.
  iovec data{const_cast<char*>(text.data()), text.size()};
  std::vector<unsigned char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  if (!fds.empty()) {
    message.msg_control = control.data();
    message.msg_controllen = control.size();
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  if (::sendmsg(socket_.get(), &message, MSG_NOSIGNAL) < 0) {
    throw std::system_error(errno, std::generic_category(), "sendmsg");
  }
}

std::optional<nlohmann::json> RawPeer::receive(std::chrono::milliseconds timeout) {
  pollfd ready{socket_.get(), POLLIN, 0};
  if (::poll(&ready, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
  ReceiveResult received = receive_datagram(socket_.get(), Blocking::dont_wait);
  if (received.status != IoStatus::done) return std::nullopt;
  return nlohmann::json::parse(received.datagram.text);
}

bool RawPeer::hung_up(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd ready{socket_.get(), POLLIN, 0};
    if (::poll(&ready, 1, 50) != 1) continue;
    const ReceiveResult received = receive_datagram(socket_.get(), Blocking::dont_wait);
    if (received.status == IoStatus::peer_closed) return true;
  }
  return false;
}

bool is_close_on_exec(int fd) { return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }

bool pipe_reaches_eof(int fd, std::chrono::milliseconds timeout) {
  pollfd ready{fd, POLLIN, 0};
  if (::poll(&ready, 1, static_cast<int>(timeout.count())) != 1) return false;
  char byte;
  return ::read(fd, &byte, 1) == 0;
}

}  // namespace uroce::emulator::control::testing
