#include "emulator/client/write_hold.hpp"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace uroce::emulator::client {

namespace {

// A userfaultfd; with only user-mode faults where the full kind needs a privilege this process lacks.
int open_userfaultfd() {
  const int fd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd >= 0 || errno != EPERM) return fd;
  return int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
}

// Write-protects [start, start + size) through `fd`; false with errno set.
bool write_protect(int fd, uint64_t start, uint64_t size) {
  uffdio_api api{};
  api.api = UFFD_API;
  if (ioctl(fd, UFFDIO_API, &api) != 0) return false;
  uffdio_register reg{};
  reg.range = {start, size};
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(fd, UFFDIO_REGISTER, &reg) != 0) return false;
  if (!(reg.ioctls & (uint64_t(1) << _UFFDIO_WRITEPROTECT))) {
    errno = EOPNOTSUPP;
    return false;
  }
  // Before Linux 6.4 (UFFD_FEATURE_WP_UNPOPULATED) only pages already mapped are protected: a page never
  // touched, first written during the hold, would escape it. Reading every page in maps them all (the zero
  // page where nothing was written yet), at no cost in memory.
  if (madvise(reinterpret_cast<void*>(start), size, MADV_POPULATE_READ) != 0) return false;
  uffdio_writeprotect wp{};
  wp.range = {start, size};
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  return ioctl(fd, UFFDIO_WRITEPROTECT, &wp) == 0;
}

}  // namespace

std::unique_ptr<WriteHold> WriteHold::engage(uint64_t start, uint64_t size) {
  // Allocated before the protection starts: the heap may lie in the range, and this thread would wait
  // forever on its own write.
  auto hold = std::unique_ptr<WriteHold>(new WriteHold(start, size));
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &hold->old_mask_);
  hold->fd_ = open_userfaultfd();
  if (hold->fd_ >= 0 && write_protect(hold->fd_, start, size)) return hold;
  const int saved = errno;
  hold.reset();
  errno = saved;
  return nullptr;
}

WriteHold::WriteHold(uint64_t start, uint64_t size) : start_(start), size_(size) { sigemptyset(&old_mask_); }

WriteHold::~WriteHold() {
  if (fd_ < 0) {
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    return;
  }
  // Where the range was not replaced after all (the replacement failed), its pages come out of write
  // protection; where it was, this finds nothing registered (ENOENT), which is fine. Closing the
  // userfaultfd (which also unregisters the range) then wakes every writer that waited: each retries its
  // write on what is mapped now.
  uffdio_writeprotect wp{};
  wp.range = {start_, size_};
  wp.mode = 0;
  ioctl(fd_, UFFDIO_WRITEPROTECT, &wp);
  close(fd_);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

bool single_threaded() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8)) == 1;
  }
  return false;
}

}  // namespace uroce::emulator::client
