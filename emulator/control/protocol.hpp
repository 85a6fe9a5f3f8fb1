// The control protocol between uroced and its clients (full text: docs/control-protocol.md).
//
// Transport: an AF_UNIX SOCK_SEQPACKET socket, so that the kernel keeps message boundaries (no framing
// of our own) and carries file descriptors (SCM_RIGHTS) with a message. Default path
// /run/uroce/uroced.sock; the socket is mode 0666 because any local user may use the NIC. Isolation
// between processes comes from the peer credentials (SO_PEERCRED) of each connection: a session only
// ever sees the objects it created.
//
// One message = one datagram: UTF-8 JSON text of at most kMaxMessageBytes, plus at most kMaxFds
// descriptors. An empty datagram cannot be told apart from the peer hanging up, so it is never sent.
//   request   {"v":1,"id":<uint>,"op":"<name>", ...}
//   response  {"id":<same>,"ok":true, ...}                                 (+ fds when the result has some)
//             {"id":<same>,"ok":false,"errno":<int>,"error":"<text>"}
//             "id" is null when the server could not read the request's id (not JSON, too big, ...).
//   event     {"event":"<name>", ...}        unsolicited, may arrive between a request and its response
// The first request must be {"v":1,"id":..,"op":"hello","client":"<name>"}; any other request before it
// is refused (EPROTO), and a request whose "v" differs from the server's is refused (EPROTONOSUPPORT).
#pragma once

#include <cstddef>
#include <string_view>

namespace uroce::emulator::control {

// The major version: a change that old clients or servers cannot understand bumps it.
inline constexpr unsigned kProtocolVersion = 1;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;
inline constexpr std::size_t kMaxFds = 16;
inline constexpr std::string_view kDefaultSocketPath = "/run/uroce/uroced.sock";
// Clients use this environment variable, when set, instead of kDefaultSocketPath.
inline constexpr std::string_view kSocketPathEnvironment = "UROCE_SOCKET";

}  // namespace uroce::emulator::control
