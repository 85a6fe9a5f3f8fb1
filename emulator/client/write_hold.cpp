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
#include <mutex>
#include <string>

namespace uroce::emulator::client {

namespace {

// A userfaultfd, its API agreed; with only user-mode faults where the full kind needs a privilege this
// process lacks. -1 with errno set.
int open_userfaultfd() {
  int fd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd < 0 && errno == EPERM) fd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (fd < 0) return -1;
  uffdio_api api{};
  api.api = UFFD_API;
  if (ioctl(fd, UFFDIO_API, &api) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// The process's userfaultfd, opened at its first hold and kept: closing one makes the kernel visit every
// mapping of the process (userfaultfd_release), and every region moved is a mapping of its own, so a
// userfaultfd per hold made each registration slower than the one before (3000 registrations of 8 KiB:
// a tenth of all the registering process's time went there). A userfaultfd belongs to the process that
// opened it: after fork() the child opens its own (its copy of the parent's is closed, the parent's lives on).
int process_userfaultfd() {
  static std::mutex lock;
  static int fd = -1;
  static pid_t owner = 0;
  std::lock_guard guard(lock);
  const pid_t self = getpid();
  if (fd >= 0 && owner == self) return fd;
  if (fd >= 0) close(fd);
  fd = open_userfaultfd();
  owner = self;
  return fd;
}

// Write-protects [start, start + size) through `fd`; false with errno set.
bool write_protect(int fd, uint64_t start, uint64_t size) {
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
  hold->fd_ = process_userfaultfd();
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
  // protection and out of the userfaultfd's watch; where it was, these find nothing registered, which is
  // fine. Then every writer that waited is woken: each retries its write on what is mapped now.
  uffdio_writeprotect wp{};
  wp.range = {start_, size_};
  wp.mode = 0;
  ioctl(fd_, UFFDIO_WRITEPROTECT, &wp);
  uffdio_range range{start_, size_};
  ioctl(fd_, UFFDIO_UNREGISTER, &range);
  ioctl(fd_, UFFDIO_WAKE, &range);
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
