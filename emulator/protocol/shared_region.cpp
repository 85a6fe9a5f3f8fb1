#include "emulator/protocol/shared_region.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace uroce::emulator::protocol {

size_t round_to_pages(size_t size) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (size + page - 1) / page * page;
}

namespace {

uint8_t* map(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap of a shared queue");
  return static_cast<uint8_t*>(p);
}

}  // namespace

SharedRegion SharedRegion::create(const std::string& name, size_t size) {
  size = round_to_pages(size);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "memfd_create");
  // Sealed against shrinking: a client that truncated the file would make the daemon fault (SIGBUS) on
  // pages that no longer exist.
  if (ftruncate(fd, off_t(size)) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int e = errno;
    close(fd);
    throw std::system_error(e, std::generic_category(), "sizing a shared queue");
  }
  try {
    return SharedRegion(fd, map(fd, size), size);
  } catch (...) {
    close(fd);
    throw;
  }
}

SharedRegion SharedRegion::attach(int fd, size_t size) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < 0 || size_t(st.st_size) < size || size == 0) {
    close(fd);
    throw std::runtime_error("shared queue fd is smaller than its declared size");
  }
  size = size_t(st.st_size);
  try {
    return SharedRegion(fd, map(fd, size), size);
  } catch (...) {
    close(fd);
    throw;
  }
}

SharedRegion::SharedRegion(SharedRegion&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SharedRegion& SharedRegion::operator=(SharedRegion&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedRegion::~SharedRegion() { reset(); }

void SharedRegion::reset() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
  size_ = 0;
}

int SharedRegion::dup_fd() const { return fcntl(fd_, F_DUPFD_CLOEXEC, 0); }

}  // namespace uroce::emulator::protocol
