#include "emulator/daemon/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "emulator/protocol/registered_pages.hpp"

namespace uroce::emulator {

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
  mapping_size_ = size_t(st.st_size);
  void* p = mmap(nullptr, mapping_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error(std::string("cannot map the region's memory: ") + strerror(errno));
  mapping_ = static_cast<uint8_t*>(p);
  base_ = mapping_ + offset;
  populate(offset, length, uint64_t(st.st_blksize));
}

// The region's pages are mapped here at registration, as a NIC pins them then, in one pass in the kernel:
// otherwise the engine takes a page fault on the first touch of each page, in the middle of the data path
// (~11 us each on a virtual machine here; DAPL's dtest, which walks its ping-pong messages across a 412 MiB
// region, spent 17 ms a 4 MiB message on them). Only the region, not the rest of the file: a memfd the
// application shares (a VM's RAM) may be much larger, and its other pages need not exist. `page` is the
// file's page size (st_blksize: a hugetlbfs file's huge pages, to which the range must be aligned).
// Best effort: a kernel before 5.14 (no MADV_POPULATE_WRITE) faults the pages in as they are used.
void SharedMemory::populate(uint64_t offset, uint64_t length, uint64_t page) {
  if (length < protocol::populate_from_bytes || page == 0 || (page & (page - 1)) != 0) return;
  const uint64_t start = offset & ~(page - 1);
  const uint64_t end = std::min<uint64_t>((offset + length + page - 1) & ~(page - 1), mapping_size_);
  if (end > start) madvise(mapping_ + start, end - start, MADV_POPULATE_WRITE);
}

SharedMemory::~SharedMemory() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
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
