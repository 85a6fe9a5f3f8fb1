#include "emulator/daemon/device_node.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace uroce::emulator {

namespace {

// Everyone may "use" the device, as everyone may connect to uroced's socket (mode 0666).
constexpr mode_t node_mode = 0666;

bool make_directory(const std::filesystem::path& d, mode_t mode) {
  return ::mkdir(d.c_str(), mode) == 0 || errno == EEXIST;
}

}  // namespace

bool is_placeholder_device_node(const std::filesystem::path& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
}

DeviceNode::DeviceNode(std::string name, std::filesystem::path directory, std::filesystem::path lock_directory)
    : directory_(std::move(directory)), path_(directory_ / name), lock_path_(lock_directory / (name + ".node-lock")) {
  if (!make_directory(lock_directory, 0755)) {
    spdlog::warn("{} not made: cannot make {}: {}", path_.string(), lock_directory.string(), std::strerror(errno));
    return;
  }
  lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) {
    spdlog::warn("{} not made: cannot open {}: {}", path_.string(), lock_path_.string(), std::strerror(errno));
    return;
  }
  // Shared for as long as we run, taken before the node is made: a uroced that stops at this moment
  // either sees our lock and leaves the node, or removes it before we get the lock and make it again.
  ::flock(lock_fd_, LOCK_SH);
  create();
}

void DeviceNode::create() {
  if (!make_directory(directory_, 0755)) {
    spdlog::warn("{} not made: {} (UCX will not see the device)", path_.string(), std::strerror(errno));
    return;
  }
  if (::mknod(path_.c_str(), S_IFCHR | node_mode, makedev(0, 0)) == 0) {
    ::chmod(path_.c_str(), node_mode);  // past the umask
    present_ = true;
    spdlog::info("made {} (a node without a driver, for libraries that look for it)", path_.string());
    return;
  }
  if (errno != EEXIST) {
    spdlog::warn("{} not made: {} (UCX will not see the device)", path_.string(), std::strerror(errno));
    return;
  }
  // Already there: made by another uroced (running, starting at this moment, or one that was killed), or
  // by someone else. Any character device serves the libraries that look for it; removal later takes only
  // the placeholder (remove_if_last).
  struct stat st{};
  present_ = ::lstat(path_.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
  if (!present_) spdlog::warn("{} exists and is not a character device: left alone", path_.string());
}

void DeviceNode::remove_if_last() {
  // Exclusive only when no other uroced holds its shared lock (ours is converted).
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) return;  // another uroced still uses it
  if (is_placeholder_device_node(path_)) ::unlink(path_.c_str());
  ::rmdir(directory_.c_str());  // only when empty: other devices' nodes stay
  // The lock file stays: a uroced starting now may have it open already, and one that opened a new
  // file of the same name would not be seen by the holders of this one.
}

DeviceNode::~DeviceNode() {
  if (lock_fd_ < 0) return;
  if (present_) remove_if_last();
  ::close(lock_fd_);
}

}  // namespace uroce::emulator
