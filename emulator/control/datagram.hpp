// One control message on the wire: sendmsg/recvmsg of a SOCK_SEQPACKET datagram with its descriptors.
//
// Plain POSIX with no Boost, because both ends use it: the daemon's Asio sessions (non-blocking, after
// waiting for readiness) and the client library (blocking). Received descriptors are close-on-exec
// (MSG_CMSG_CLOEXEC) and owned from the moment they arrive, so a rejected message never leaks them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/control/unique_fd.hpp"

namespace uroce::emulator::control {

enum class IoStatus {
  done,         // the datagram was sent or received
  would_block,  // non-blocking call and nothing to read / no room to write: wait for readiness
  peer_closed,  // the peer hung up (a read of 0 bytes, EPIPE, ECONNRESET)
  failed,       // another error, in `error`
};

struct ReceivedDatagram {
  std::string text;
  std::vector<UniqueFd> fds;
  bool text_truncated = false;     // longer than kMaxMessageBytes (MSG_TRUNC)
  bool control_truncated = false;  // more than kMaxFds descriptors, or other ancillary data cut (MSG_CTRUNC)
};

struct ReceiveResult {
  IoStatus status = IoStatus::failed;
  int error = 0;  // errno when status is failed
  ReceivedDatagram datagram;
};

enum class Blocking { wait, dont_wait };

ReceiveResult receive_datagram(int socket_fd, Blocking blocking);

struct SendResult {
  IoStatus status = IoStatus::failed;
  int error = 0;
};

// `text` must be non-empty (an empty datagram reads as a hang-up) and `fds` at most kMaxFds long: EINVAL
// and E2BIG otherwise. The descriptors stay owned by the caller (the kernel duplicates them).
SendResult send_datagram(int socket_fd, std::string_view text, std::span<const int> fds, Blocking blocking);

}  // namespace uroce::emulator::control
