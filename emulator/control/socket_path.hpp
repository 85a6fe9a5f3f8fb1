// The control socket's file: making its directory, refusing to start when another uroced answers on
// it, replacing a stale one (left by a daemon that died), binding and listening, and removing it at
// shutdown only if it is still ours.
#pragma once

#include <sys/types.h>

#include <string>

#include "emulator/control/unique_fd.hpp"

namespace uroce::emulator::control {

// Which file we bound, so that shutdown never removes a socket another daemon created in its place.
struct SocketFileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
};

struct ListeningSocket {
  UniqueFd fd;  // non-blocking, close-on-exec, listening
  SocketFileIdentity identity;
};

// Creates the missing directories (mode 0755) and a socket of mode 0666 at `path`. Throws
// std::system_error with a message that names the path: "another uroced is running at PATH" when a
// server answers there, or when the path exists and is not a socket (never deleted: not ours to remove).
ListeningSocket listen_at(const std::string& path);

// Unlinks `path` if it is still the socket file described by `identity`.
void remove_socket_file(const std::string& path, const SocketFileIdentity& identity);

}  // namespace uroce::emulator::control
