#include "emulator/tools/oob_channel.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

namespace uroce::emulator::tools {

namespace {

sockaddr_un address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) throw std::invalid_argument("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

}  // namespace

OobChannel OobChannel::serve(const std::string& path, double timeout_s) {
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_un a = address_of(path);
  unlink(path.c_str());
  if (bind(listener, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || listen(listener, 1) != 0) {
    const int e = errno;
    close(listener);
    throw std::system_error(e, std::generic_category(), "out-of-band socket " + path);
  }
  timeval tv{long(timeout_s), 0};
  setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  const int e = errno;
  close(listener);
  unlink(path.c_str());
  if (fd < 0) throw std::system_error(e, std::generic_category(), "no peer came to " + path);
  return OobChannel(fd);
}

OobChannel OobChannel::connect(const std::string& path, double timeout_s) {
  const sockaddr_un a = address_of(path);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (true) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return OobChannel(fd);
    close(fd);
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no server at " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

OobChannel::OobChannel(OobChannel&& o) noexcept : fd_(std::exchange(o.fd_, -1)), buffer_(std::move(o.buffer_)) {}

OobChannel::~OobChannel() {
  if (fd_ >= 0) close(fd_);
}

void OobChannel::send(const nlohmann::json& message) {
  const std::string line = message.dump() + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = write(fd_, line.data() + done, line.size() - done);
    if (n <= 0) throw std::runtime_error("out-of-band peer went away");
    done += size_t(n);
  }
}

nlohmann::json OobChannel::receive() {
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      const std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return nlohmann::json::parse(line);
    }
    char chunk[4096];
    const ssize_t n = read(fd_, chunk, sizeof chunk);
    if (n <= 0) throw std::runtime_error("out-of-band peer went away");
    buffer_.append(chunk, size_t(n));
  }
}

}  // namespace uroce::emulator::tools
