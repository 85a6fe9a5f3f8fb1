#include "emulator/control/datagram.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "emulator/control/protocol.hpp"

namespace uroce::emulator::control {
namespace {

// Room for exactly kMaxFds descriptors: one more and the kernel reports MSG_CTRUNC (and closes the extra
// ones itself), which is how "too many descriptors" is detected.
constexpr std::size_t kControlBytes = CMSG_SPACE(sizeof(int) * kMaxFds);

bool is_hang_up(int error) { return error == EPIPE || error == ECONNRESET; }

int flags_for(Blocking blocking) { return blocking == Blocking::dont_wait ? MSG_DONTWAIT : 0; }

std::vector<UniqueFd> take_descriptors(msghdr& message) {
  std::vector<UniqueFd> fds;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* data = CMSG_DATA(header);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, data + i * sizeof(int), sizeof fd);  // CMSG_DATA need not be int-aligned
      fds.emplace_back(fd);
    }
  }
  return fds;
}

}  // namespace

ReceiveResult receive_datagram(int socket_fd, Blocking blocking) {
  ReceiveResult result;
  // One buffer per thread, reused and never cleared: a fresh zero-filled 64 KiB string per message was a
  // malloc, a 64 KiB memset and a free for replies of a few hundred bytes (10% of a control call's CPU
  // time on both ends in a profile). Only what arrived is copied out.
  thread_local const std::unique_ptr<char[]> buffer(new char[kMaxMessageBytes]);
  iovec data{buffer.get(), kMaxMessageBytes};  // a longer message arrives cut, with MSG_TRUNC
  alignas(cmsghdr) unsigned char control[kControlBytes];
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;

  ssize_t received;
  do {
    received = ::recvmsg(socket_fd, &message, MSG_CMSG_CLOEXEC | flags_for(blocking));
  } while (received < 0 && errno == EINTR);
  if (received < 0) {
    result.error = errno;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      result.status = IoStatus::would_block;
    } else {
      result.status = is_hang_up(errno) ? IoStatus::peer_closed : IoStatus::failed;
    }
    return result;
  }
  // Descriptors first, whatever else is wrong with the message: once owned they cannot leak.
  result.datagram.fds = take_descriptors(message);
  if (received == 0) {
    result.status = IoStatus::peer_closed;
    return result;
  }
  result.datagram.text.assign(buffer.get(), static_cast<std::size_t>(received));
  result.datagram.text_truncated = (message.msg_flags & MSG_TRUNC) != 0;
  result.datagram.control_truncated = (message.msg_flags & MSG_CTRUNC) != 0;
  result.status = IoStatus::done;
  return result;
}

SendResult send_datagram(int socket_fd, std::string_view text, std::span<const int> fds, Blocking blocking) {
  if (text.empty()) return {IoStatus::failed, EINVAL};
  if (fds.size() > kMaxFds) return {IoStatus::failed, E2BIG};

  iovec data{const_cast<char*>(text.data()), text.size()};
  alignas(cmsghdr) unsigned char control[kControlBytes] = {};
  msghdr message{};
  message.msg_iov = &data;
  message.msg_iovlen = 1;
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }

  ssize_t sent;
  do {
    // MSG_NOSIGNAL: a peer that died must be an error to handle, not a SIGPIPE that kills the process.
    sent = ::sendmsg(socket_fd, &message, MSG_NOSIGNAL | flags_for(blocking));
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {IoStatus::would_block, errno};
    return {is_hang_up(errno) ? IoStatus::peer_closed : IoStatus::failed, errno};
  }
  // A SOCK_SEQPACKET datagram is sent whole or not at all, so there is no partial send to resume.
  return {IoStatus::done, 0};
}

}  // namespace uroce::emulator::control
