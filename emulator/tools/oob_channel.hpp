// The out-of-band channel two test processes use to swap QP numbers, keys and addresses before RDMA
// starts (perftest uses TCP; a Unix socket path works between network namespaces too, and needs no
// addresses). One JSON object per line.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace uroce::emulator::tools {

class OobChannel {
 public:
  // The server binds `path` and waits for one peer; the client connects, retrying until `timeout_s`.
  static OobChannel serve(const std::string& path, double timeout_s);
  static OobChannel connect(const std::string& path, double timeout_s);
  OobChannel(OobChannel&& o) noexcept;
  ~OobChannel();

  void send(const nlohmann::json& message);
  nlohmann::json receive();  // throws std::runtime_error if the peer went away

 private:
  explicit OobChannel(int fd) : fd_(fd) {}
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace uroce::emulator::tools
