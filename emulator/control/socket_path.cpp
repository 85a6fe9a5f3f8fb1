#include "emulator/control/socket_path.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <spdlog/spdlog.h>

namespace uroce::emulator::control {
namespace {

[[noreturn]] void fail(int error, const std::string& what) {
  throw std::system_error(error, std::generic_category(), what);
}

sockaddr_un address_of(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    fail(ENAMETOOLONG, "control socket path '" + path + "' is empty or longer than " +
                           std::to_string(sizeof address.sun_path - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// mkdir -p for the socket's parent. Directories we create get exactly 0755 (whatever the umask): clients
// of every user must be able to reach the socket inside.
void make_parent_directories(const std::string& path) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string directory = path.substr(0, slash);
    if (::mkdir(directory.c_str(), 0755) == 0) {
      ::chmod(directory.c_str(), 0755);
      spdlog::info("control: created directory {}", directory);
    } else if (errno != EEXIST) {
      fail(errno, "cannot create directory " + directory + " for the control socket");
    }
  }
}

// Whether a server answers at `path`. A connection that is refused means the file is a stale socket
// whose daemon is gone; a full backlog (EAGAIN) still means a live server.
bool server_answers(const sockaddr_un& address, const std::string& path) {
  UniqueFd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe) fail(errno, "cannot create a socket to probe " + path);
  if (::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) return true;
  if (errno == ECONNREFUSED) return false;
  if (errno == EAGAIN) return true;
  if (errno == EPROTOTYPE) fail(EADDRINUSE, path + " is in use by a socket of another type");
  fail(errno, "cannot probe the existing socket " + path);
}

void replace_stale_socket(const sockaddr_un& address, const std::string& path) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) {
    if (errno == ENOENT) return;
    fail(errno, "cannot inspect " + path);
  }
  if (!S_ISSOCK(status.st_mode)) fail(EEXIST, path + " exists and is not a socket; not removing it");
  if (server_answers(address, path)) fail(EADDRINUSE, "another uroced is running at " + path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail(errno, "cannot remove the stale socket " + path);
  spdlog::info("control: removed stale socket {} (no server answered on it)", path);
}

}  // namespace

ListeningSocket listen_at(const std::string& path) {
  const sockaddr_un address = address_of(path);
  make_parent_directories(path);
  replace_stale_socket(address, path);

  ListeningSocket listening;
  listening.fd.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listening.fd) fail(errno, "cannot create the control socket");
  if (::bind(listening.fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    // Another daemon may have bound between our probe and now.
    if (errno == EADDRINUSE) fail(EADDRINUSE, "another uroced is running at " + path);
    fail(errno, "cannot bind the control socket to " + path);
  }
  // Any local user may use the NIC; sessions are isolated by peer credentials, not by file mode.
  struct stat status {};
  if (::chmod(path.c_str(), 0666) != 0 || ::stat(path.c_str(), &status) != 0) {
    const int error = errno;
    ::unlink(path.c_str());
    fail(error, "cannot set the mode of " + path);
  }
  if (::listen(listening.fd.get(), SOMAXCONN) != 0) {
    const int error = errno;
    ::unlink(path.c_str());
    fail(error, "cannot listen on " + path);
  }
  listening.identity = {status.st_dev, status.st_ino};
  return listening;
}

void remove_socket_file(const std::string& path, const SocketFileIdentity& identity) {
  struct stat status {};
  if (::lstat(path.c_str(), &status) != 0) return;
  if (status.st_dev != identity.device || status.st_ino != identity.inode) {
    spdlog::warn("control: {} is no longer our socket; leaving it in place", path);
    return;
  }
  if (::unlink(path.c_str()) != 0) spdlog::warn("control: cannot remove {}: {}", path, std::strerror(errno));
}

}  // namespace uroce::emulator::control
