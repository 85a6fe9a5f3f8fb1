#include "emulator/client/shared_pages.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include <spdlog/spdlog.h>

namespace uroce::emulator::client {

namespace {

uint64_t page_size() { return uint64_t(sysconf(_SC_PAGESIZE)); }

// True when every byte of [start, end) is mapped, by mappings that `accept(perms, inode, path)` takes
// (/proc/self/maps' fields).
template <class Accept>
bool mapped_as(uint64_t start, uint64_t end, Accept accept) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uint64_t covered = start;
  while (std::getline(maps, line) && covered < end) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode;
    std::getline(in, path);
    const size_t dash = range.find('-');
    const uint64_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uint64_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (hi <= covered || lo > covered) continue;
    if (perms.size() < 4 || !accept(perms, inode, path)) return false;
    covered = hi;
  }
  return covered >= end;
}

// True when every byte of [start, end) lies in private mappings that may be replaced: not shared, not a
// special region ([stack], [vvar], [vdso], ...), and readable and writable (so the copy is faithful and
// the application's own accesses stay legal).
bool movable(uint64_t start, uint64_t end) {
  return mapped_as(start, end, [](const std::string& perms, const std::string&, const std::string& path) {
    const bool special = path.find('[') != std::string::npos && path.find("[heap]") == std::string::npos;
    return perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p' && !special;
  });
}

// True when [start, end) is still mapped, shared, from the memfd `fd` (the application may have unmapped
// or replaced it since it was moved).
bool still_on(int fd, uint64_t start, uint64_t end) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return false;
  const std::string inode = std::to_string(st.st_ino);
  return mapped_as(start, end, [&](const std::string& perms, const std::string& ino, const std::string&) {
    return perms[0] == 'r' && perms[3] == 's' && ino == inode;
  });
}

// Copies whole pages, and so also the bytes around the registered buffer that share its pages (other
// allocations, a sanitizer's redzones): legitimate for page moving, but an AddressSanitizer build of the
// application would abort on it. Hence an uninstrumented copy, through volatile words so that the
// compiler cannot turn it back into a memcpy call (which ASan intercepts and checks).
__attribute__((no_sanitize("address", "hwaddress"))) void copy_pages(void* dst, uint64_t src, uint64_t size) {
  auto* to = static_cast<uint64_t*>(dst);
  const auto* from = reinterpret_cast<const volatile uint64_t*>(src);
  for (uint64_t i = 0; i < size / sizeof(uint64_t); ++i) to[i] = from[i];
}

// Replaces the shared mapping of [start, start + size) with private memory holding the same bytes: a copy
// in an anonymous mapping, moved over the range in one step (mremap), so no instant leaves it unmapped.
// If that fails the range stays shared: nothing better is left to do.
void make_private(uint64_t start, uint64_t size) {
  void* copy = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (copy == MAP_FAILED) return;
  copy_pages(copy, start, size);
  if (mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(start)) == MAP_FAILED) {
    munmap(copy, size);
  }
}

// The live registries, for the fork handlers.
std::mutex registries_lock;
std::vector<SharedPages*>& registries() {
  static std::vector<SharedPages*> all;
  return all;
}

}  // namespace

SharedPages::SharedPages() {
  static std::once_flag installed;
  std::call_once(installed, [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  std::lock_guard lock(registries_lock);
  registries().push_back(this);
}

// A registry that goes leaves the process as it found it: its ranges become private memory again. Left
// shared, a fork() afterwards would share them with the child with no registry to copy them (the service
// tests' registries, gone before a later test forked, made "corrupted double-linked list").
SharedPages::~SharedPages() {
  {
    std::lock_guard lock(registries_lock);
    std::erase(registries(), this);
  }
  for (auto& [start, r] : regions_) {
    if (still_on(r.fd, start, r.end)) make_private(start, r.end - start);
    close(r.fd);
  }
}

void SharedPages::before_fork() {
  registries_lock.lock();
  for (SharedPages* r : registries()) r->mutex_.lock();
}

void SharedPages::after_fork_in_parent() {
  for (SharedPages* r : registries()) r->mutex_.unlock();
  registries_lock.unlock();
}

void SharedPages::after_fork_in_child() {
  for (SharedPages* r : registries()) r->copy_into_child();
  registries_lock.unlock();
}

// Without it, the moved pages stay MAP_SHARED in the child: rdma-core's test_device forks five processes
// after registering buffers on the Python heap, and parent and children corrupted each other's heaps
// ("corrupted size vs. prev_size", then SIGSEGV). Only system calls and plain loads and stores until the
// registry is cleared: this runs in a child of a possibly multi-threaded parent.
void SharedPages::copy_into_child() {
  for (auto& [start, r] : regions_) {
    make_private(start, r.end - start);
    close(r.fd);
  }
  regions_.clear();
  mutex_.unlock();
}

std::optional<SharedSpan> SharedPages::share(const void* addr, uint64_t length) {
  if (length == 0) return std::nullopt;
  const uint64_t page = page_size();
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  const uint64_t start = a & ~(page - 1);
  const uint64_t end = (a + length + page - 1) & ~(page - 1);
  std::lock_guard lock(mutex_);
  // Already moved (a second registration of the same buffer, or part of it): the same memfd serves it.
  auto it = regions_.upper_bound(start);
  if (it != regions_.begin()) {
    auto prev = std::prev(it);
    if (prev->first <= start && end <= prev->second.end) {
      return SharedSpan{prev->second.fd, a - prev->first, prev->second.end - prev->first};
    }
    if (prev->second.end > start) return std::nullopt;  // partial overlap: moving again would split it
  }
  if (it != regions_.end() && it->first < end) return std::nullopt;
  if (!movable(start, end)) return std::nullopt;

  const uint64_t size = end - start;
  const int fd = memfd_create("uroce-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return std::nullopt;
  // Sealed against shrinking: the daemon refuses a memfd that could be truncated under its mapping.
  void* staging = MAP_FAILED;
  if (ftruncate(fd, off_t(size)) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 ||
      (staging = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    close(fd);
    return std::nullopt;
  }
  copy_pages(staging, start, size);
  munmap(staging, size);
  if (mmap(reinterpret_cast<void*>(start), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    // The old pages are gone only if mmap succeeded; on failure they are untouched.
    spdlog::warn("could not move registered pages onto shared memory: {}", strerror(errno));
    close(fd);
    return std::nullopt;
  }
  regions_[start] = Region{end, fd};
  return SharedSpan{fd, a - start, size};
}

}  // namespace uroce::emulator::client
