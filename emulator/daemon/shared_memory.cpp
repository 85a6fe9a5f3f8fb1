#include "emulator/daemon/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "emulator/protocol/registered_pages.hpp"

namespace uroce::emulator {

namespace {

// Each region on shared pages is a mapping of the daemon's, and Linux gives a process vm.max_map_count of
// them (65,530 by default, below the device's max_mr). Past that every mmap fails, malloc's of large
// blocks among them: the daemon itself would then run out of memory. Regions take at most half, and those
// beyond are reached with process_vm_* (verbs_service.cpp), as memory that cannot be shared is.
std::atomic<int64_t> mappings_in_use{0};

int64_t mapping_budget() {
  static const int64_t budget = [] {
    int64_t limit = 65530;
    std::ifstream in("/proc/sys/vm/max_map_count");
    in >> limit;
    return std::max<int64_t>(limit / 2, 1024);
  }();
  return budget;
}

}  // namespace

SharedMemory::SharedMemory(int fd, uint64_t offset, uint64_t length, std::shared_ptr<ClientLiveness> liveness,
                           Size size)
    : length_(length), liveness_(std::move(liveness)) {
  if (size == Size::sealed) {
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) throw std::runtime_error("memory fd is not a memfd sealed against shrinking");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < 0 || offset > uint64_t(st.st_size) || length > uint64_t(st.st_size) - offset) {
    throw std::runtime_error("memory fd is smaller than the region");
  }
  // Only the file's pages under the region are mapped, not the whole file: one memfd can hold many regions
  // (the client grows a memfd for buffers that share pages: emulator/client/shared_pages.cpp), and a
  // mapping of the whole file for each made their address space grow with the square of their count. The
  // window's start must be a multiple of the file's page size (st_blksize: a hugetlbfs file's huge page).
  const uint64_t page = st.st_blksize > 0 && (uint64_t(st.st_blksize) & (uint64_t(st.st_blksize) - 1)) == 0
                            ? uint64_t(st.st_blksize)
                            : uint64_t(sysconf(_SC_PAGESIZE));
  uint64_t window = offset & ~(page - 1);
  uint64_t window_end = std::min<uint64_t>((offset + length + page - 1) & ~(page - 1), uint64_t(st.st_size));
  if (window_end <= window) window = 0, window_end = uint64_t(st.st_size);  // an empty region: as before
  if (mappings_in_use.fetch_add(1) >= mapping_budget()) {
    mappings_in_use.fetch_sub(1);
    throw MapFailed(ENOMEM);
  }
  mapping_size_ = size_t(window_end - window);
  void* p = mmap(nullptr, mapping_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(window));
  if (p == MAP_FAILED) {
    const int error = errno;
    mappings_in_use.fetch_sub(1);
    throw MapFailed(error);
  }
  mapping_ = static_cast<uint8_t*>(p);
  base_ = mapping_ + (offset - window);
  populate(offset - window, length, page);
}

SharedMemory::MapFailed::MapFailed(int errno_value)
    : std::runtime_error(std::string("cannot map the region's memory: ") + strerror(errno_value)), error(errno_value) {}

// The region's pages are mapped here at registration, as a NIC pins them then, in one pass in the kernel:
// otherwise the engine takes a page fault on the first touch of each page, in the middle of the data path
// (~11 us each on a virtual machine here; DAPL's dtest, which walks its ping-pong messages across a 412 MiB
// region, spent 17 ms a 4 MiB message on them). Only the region, not the rest of the file: a memfd the
// application shares (a VM's RAM) may be much larger, and its other pages need not exist. `page` is the
// file's page size, a power of two (the constructor's: st_blksize, a hugetlbfs file's huge pages, to which
// the range must be aligned); `offset` is the region's in the mapping, whose start is such a page's.
// Best effort: a kernel before 5.14 (no MADV_POPULATE_WRITE) faults the pages in as they are used.
void SharedMemory::populate(uint64_t offset, uint64_t length, uint64_t page) {
  if (length < protocol::populate_from_bytes) return;
  const uint64_t start = offset & ~(page - 1);
  const uint64_t end = std::min<uint64_t>((offset + length + page - 1) & ~(page - 1), mapping_size_);
  if (end > start) madvise(mapping_ + start, end - start, MADV_POPULATE_WRITE);
}

SharedMemory::~SharedMemory() {
  if (mapping_ != nullptr) {
    munmap(mapping_, mapping_size_);
    mappings_in_use.fetch_sub(1);
  }
}

bool SharedMemory::read(uint64_t offset, void* dst, size_t len) {
  if (!usable(offset, len)) return false;
  std::memcpy(dst, base_ + offset, len);
  return true;
}

bool SharedMemory::write(uint64_t offset, const void* src, size_t len) {
  if (!usable(offset, len)) return false;
  std::memcpy(base_ + offset, src, len);
  return true;
}

bool SharedMemory::compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) {
  if (!usable(offset, 8) || (reinterpret_cast<uintptr_t>(base_ + offset) & 7) != 0) return false;
  auto* word = reinterpret_cast<uint64_t*>(base_ + offset);
  original = compare;
  __atomic_compare_exchange_n(word, &original, swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return true;
}

bool SharedMemory::fetch_add(uint64_t offset, uint64_t add, uint64_t& original) {
  if (!usable(offset, 8) || (reinterpret_cast<uintptr_t>(base_ + offset) & 7) != 0) return false;
  original = __atomic_fetch_add(reinterpret_cast<uint64_t*>(base_ + offset), add, __ATOMIC_SEQ_CST);
  return true;
}

bool SharedMemory::atomic_store(uint64_t offset, uint64_t value) {
  if (!usable(offset, 8) || (reinterpret_cast<uintptr_t>(base_ + offset) & 7) != 0) return false;
  __atomic_store_n(reinterpret_cast<uint64_t*>(base_ + offset), value, __ATOMIC_RELEASE);
  return true;
}

}  // namespace uroce::emulator
