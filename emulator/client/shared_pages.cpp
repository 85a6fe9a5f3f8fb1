#include "emulator/client/shared_pages.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <linux/memfd.h>  // MFD_HUGE_SHIFT
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "emulator/client/logger.hpp"
#include "emulator/client/write_hold.hpp"
#include "emulator/protocol/process_mappings.hpp"
#include "emulator/protocol/registered_pages.hpp"

namespace uroce::emulator::client {

namespace {

uint64_t page_size() { return uint64_t(sysconf(_SC_PAGESIZE)); }

// True when every byte of [start, end) is mapped, by mappings that `accept(perms, inode, path)` takes.
template <class Accept>
bool mapped_as(uint64_t start, uint64_t end, Accept accept) {
  uint64_t covered = start;
  bool refused = false;
  each_mapping_from(0, start, [&](const Mapping& m) {
    if (m.lo > covered) return false;  // a hole: the mappings come in address order
    if (!accept(m.perms, m.inode, m.path)) {
      refused = true;
      return false;
    }
    covered = m.hi;
    return covered < end;
  });
  return !refused && covered >= end;
}

// True when every byte of [start, end) lies in private mappings that may be replaced: not shared, not a
// special region ([stack], [vvar], [vdso], ...), and readable and writable (so the copy is faithful and
// the application's own accesses stay legal). `named` tells whether one of them has a path: a file's
// private mapping, or huge pages ("/anon_hugepage" or a hugetlbfs file), which plain anonymous memory and
// the heap never are.
bool movable(uint64_t start, uint64_t end, bool& named) {
  named = false;
  return mapped_as(start, end, [&](const std::string& perms, const std::string&, const std::string& path) {
    const bool special = path.find('[') != std::string::npos && path.find("[heap]") == std::string::npos;
    named = named || (path.find_first_not_of(' ') != std::string::npos && path.find("[heap]") == std::string::npos);
    return perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p' && !special;
  });
}

// The parts of [start, end) still mapped, readable and shared, from the memfd `fd`, in address order:
// the application may have unmapped or replaced any part of a moved range since (glibc, for one, maps
// PROT_NONE over the top of a thread arena's heap when it shrinks).
std::vector<std::pair<uint64_t, uint64_t>> pieces_on(int fd, uint64_t start, uint64_t end) {
  std::vector<std::pair<uint64_t, uint64_t>> pieces;
  struct stat st {};
  if (fstat(fd, &st) != 0) return pieces;
  const std::string inode = std::to_string(st.st_ino);
  each_mapping_from(0, start, [&](const Mapping& m) {
    const uint64_t lo = std::max(start, m.lo), hi = std::min(end, m.hi);
    if (lo >= hi || m.perms[0] != 'r' || m.perms[3] != 's' || m.inode != inode) return m.lo < end;
    if (!pieces.empty() && pieces.back().second == lo) {
      pieces.back().second = hi;
    } else {
      pieces.emplace_back(lo, hi);
    }
    return m.hi < end;
  });
  return pieces;
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

// make_private over the parts of [start, end) that are mapped at all, found with mincore(2) (ENOMEM over
// a hole), a system call only: this runs in the child of fork(). The application may have unmapped part
// of a moved range since, and copying from there would fault. Memory it mapped there since is copied too,
// which leaves private memory as it was (its own bytes, still private), but would make a shared mapping
// put there since private in the child: telling the two apart needs /proc/self/maps, not read here.
void make_private_where_mapped(uint64_t start, uint64_t end) {
  static unsigned char residency[4096];
  const uint64_t page = page_size();
  uint64_t run = start;  // start of the mapped run being gathered
  for (uint64_t at = start; at < end;) {
    const uint64_t chunk = std::min<uint64_t>(end - at, sizeof residency * page);
    if (mincore(reinterpret_cast<void*>(at), chunk, residency) == 0) {
      at += chunk;
      continue;
    }
    // A hole somewhere in this chunk: page by page.
    for (const uint64_t stop = at + chunk; at < stop; at += page) {
      if (mincore(reinterpret_cast<void*>(at), page, residency) == 0) continue;
      if (run < at) make_private(run, at - run);
      run = at + page;
    }
  }
  if (run < end) make_private(run, end - run);
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
    for (const auto& [lo, hi] : pieces_on(r.fd, start, r.end)) make_private(lo, hi - lo);
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
    make_private_where_mapped(start, r.end);
    close(r.fd);
  }
  regions_.clear();
  mutex_.unlock();
}

namespace {

// The page size of the mapping holding `addr` (/proc/self/smaps' KernelPageSize): larger than the base page
// for huge pages (MAP_HUGETLB, hugetlbfs); 0 if it cannot be read.
uint64_t kernel_page_size(uint64_t addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find_first_not_of("0123456789abcdef") == dash) {  // a mapping's first line: "lo-hi perms ..."
      const uint64_t lo = std::stoull(line.substr(0, dash), nullptr, 16);
      const uint64_t hi = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("KernelPageSize:", 0) == 0) {
      return std::stoull(line.substr(15)) * 1024;  // "KernelPageSize:    2048 kB"
    }
  }
  return 0;
}

// Copies [start, end) into a new memfd (of huge pages of `huge_page` bytes when not 0) and maps it over the
// same addresses. The memfd, or -1 with errno set and the range untouched.
//
// Both mappings of a range of protocol::populate_from_bytes or more are populated: the memfd's pages are
// allocated and mapped in one pass in the kernel instead of one page fault per page, first by the copy and
// then by the application's first touch of each page after the move. A fault costs ~11 us on a virtual
// machine here: 4 MiB registered cost 15 ms, then 11 ms more on the application's next memset of its
// buffer (DAPL's dtest saw every ping-pong slowed by it); the memfd's pages all exist after the copy, so
// populating the final mapping allocates nothing.
// Copies [start, end) into the memfd `fd` at `offset` (the file already that long) and maps it there over
// the same addresses. False with errno set and the range untouched if it cannot.
bool copy_onto_memfd(int fd, uint64_t offset, uint64_t start, uint64_t end) {
  const uint64_t size = end - start;
  const bool populate = size >= protocol::populate_from_bytes;
  void* staging = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd,
                       off_t(offset));
  if (staging == MAP_FAILED) return false;
  copy_pages(staging, start, size);
  munmap(staging, size);
  // The old pages are gone only if this mmap succeeds; on failure they are untouched.
  if (mmap(reinterpret_cast<void*>(start), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off_t(offset)) ==
      MAP_FAILED) {
    return false;
  }
  // Writable at once (MAP_POPULATE prefaults a shared mapping for reading only, Linux's populate_vma_page_range).
  // Only a speed-up: before Linux 5.14 (no MADV_POPULATE_WRITE) the pages fault in as they are touched.
  if (populate) madvise(reinterpret_cast<void*>(start), size, MADV_POPULATE_WRITE);
  return true;
}

int move_onto_memfd(uint64_t start, uint64_t end, uint64_t huge_page) {
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
  if (huge_page != 0) flags |= MFD_HUGETLB | (unsigned(__builtin_ctzll(huge_page)) << MFD_HUGE_SHIFT);
  const int fd = memfd_create("uroce-mr", flags);
  if (fd < 0) return -1;
  // Sealed against shrinking (not growing: SharedPages::extend grows it): the daemon refuses a memfd that
  // could be truncated under its mapping.
  if (ftruncate(fd, off_t(end - start)) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0 ||
      !copy_onto_memfd(fd, 0, start, end)) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace

std::optional<SharedSpan> SharedPages::moved(uint64_t addr, uint64_t start, uint64_t end, bool& overlaps) const {
  overlaps = false;
  auto it = regions_.upper_bound(start);
  if (it != regions_.begin()) {
    auto prev = std::prev(it);
    if (prev->first <= start && end <= prev->second.end) {
      return SharedSpan{prev->second.fd, addr - prev->first, prev->second.end - prev->first};
    }
    overlaps = prev->second.end > start;  // partial overlap: moving again would split it
  }
  overlaps = overlaps || (it != regions_.end() && it->first < end);
  return std::nullopt;
}

void SharedPages::forget_unmapped(uint64_t start, uint64_t end) {
  auto it = regions_.upper_bound(start);
  if (it != regions_.begin() && std::prev(it)->second.end > start) --it;
  while (it != regions_.end() && it->first < end) {
    if (!pieces_on(it->second.fd, it->first, it->second.end).empty()) {
      ++it;
      continue;
    }
    close(it->second.fd);
    it = regions_.erase(it);
  }
}

std::optional<SharedSpan> SharedPages::share(const void* addr, uint64_t length) {
  if (length == 0) return std::nullopt;
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  uint64_t page = page_size();
  uint64_t start = a & ~(page - 1);
  uint64_t end = (a + length + page - 1) & ~(page - 1);
  std::lock_guard lock(mutex_);
  forget_unmapped(start, end);
  // Already moved (a second registration of the same buffer, or part of it): the same memfd serves it.
  bool overlaps = false, named = false;
  if (auto span = moved(a, start, end, overlaps)) return span;
  if (overlaps) return extend(a, start, end);
  if (!movable(start, end, named)) return std::nullopt;
  // Huge pages (MAP_HUGETLB, hugetlbfs) move whole, onto a memfd of huge pages of their size, which keeps
  // them huge (base pages mapped over them would not be, or could not be where they split one). Only
  // mappings with a name can be huge, so plain memory is spared reading smaps.
  uint64_t huge_page = 0;
  if (named) {
    const uint64_t kernel_page = kernel_page_size(a);
    if (kernel_page > page) {
      if (kernel_page_size(a + length - 1) != kernel_page) return std::nullopt;  // huge pages of two sizes
      page = huge_page = kernel_page;
      start = a & ~(page - 1);
      end = (a + length + page - 1) & ~(page - 1);
      if (auto span = moved(a, start, end, overlaps)) return span;
      if (overlaps) return std::nullopt;
    }
  }
  std::unique_ptr<WriteHold> hold;
  if (!hold_writes(start, end, hold)) return std::nullopt;
  const int fd = move_onto_memfd(start, end, huge_page);
  hold.reset();
  if (fd < 0) {
    // Huge pages need as many free ones again for the copy; without them the region stays where it is,
    // reached with process_vm_* (slower, but correct).
    logger().warn("could not move registered pages onto shared memory{}: {}",
                 huge_page ? fmt::format(" ({} KiB pages; are enough of them free?)", huge_page / 1024) : "",
                 strerror(errno));
    return std::nullopt;
  }
  regions_[start] = Region{end, fd, huge_page != 0};
  return SharedSpan{fd, a - start, end - start};
}

// Buffers one after another on the heap share pages: a registration that starts on the last page of one
// registered (and so moved) before it overlaps that move. Left where it was, such a region was reached with
// process_vm_* for every access (dapltest's 64-KiB RDMA READs ran at 0.35-0.6 GB/s, against 2.2 GB/s for
// ib_read_bw's moved buffers). The new pages go onto the end of the earlier memfd, grown (the daemon's
// mappings of its first part stay valid: growing moves nothing), and the region then lies at consecutive
// offsets of one memfd. A region that begins below a moved range would need pages in front of the file's
// first one, and one that reaches a second moved range two memfds: those stay with process_vm_*.
std::optional<SharedSpan> SharedPages::extend(uint64_t addr, uint64_t start, uint64_t end) {
  auto next = regions_.upper_bound(start);
  if (next == regions_.begin()) return std::nullopt;
  auto prev = std::prev(next);
  Region& r = prev->second;
  const uint64_t base = prev->first;
  if (base > start || r.end <= start || r.end >= end || r.huge) return std::nullopt;
  if (next != regions_.end() && next->first < end) return std::nullopt;
  bool named = false;
  if (!movable(r.end, end, named) || named) return std::nullopt;  // named: possibly huge pages
  std::unique_ptr<WriteHold> hold;
  if (!hold_writes(r.end, end, hold)) return std::nullopt;
  const uint64_t old_size = r.end - base;
  if (ftruncate(r.fd, off_t(end - base)) != 0) return std::nullopt;
  if (!copy_onto_memfd(r.fd, old_size, r.end, end)) {
    logger().warn("could not move registered pages onto shared memory: {}", strerror(errno));
    return std::nullopt;  // (the memfd stays longer than what is mapped of it: nothing maps the rest)
  }
  r.end = end;
  return SharedSpan{r.fd, addr - base, end - base};
}

// Other threads' writes to [start, end) wait while its pages are copied and replaced (write_hold.hpp): true
// with `hold` engaged. With no hold to be had, only a process with no other thread moves them.
bool SharedPages::hold_writes(uint64_t start, uint64_t end, std::unique_ptr<WriteHold>& hold) {
  hold = WriteHold::engage(start, end - start);
  const int why = errno;
  if (hold || single_threaded()) return true;
  static std::once_flag warned;
  std::call_once(warned, [why] {
    logger().warn("registered memory stays where it is, reached with process_vm_* (slower): other threads "
                  "could write to it while it moved onto shared memory, and userfaultfd cannot hold their "
                  "writes ({})", strerror(why));
  });
  return false;
}

}  // namespace uroce::emulator::client
