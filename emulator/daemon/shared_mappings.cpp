#include "emulator/daemon/shared_mappings.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/memfd.h>  // MFD_HUGE_SHIFT
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include <spdlog/spdlog.h>

#include "emulator/protocol/process_mappings.hpp"

namespace uroce::emulator {

namespace {

// The mapping of process `pid` that holds `addr`: the kernel's answer for that one address where it has
// the query, so that a registration costs the same however many regions the client has registered before
// (each region it moved onto a memfd is a mapping of its own; 16,000 4-KiB registrations took 37 s when
// each read the whole of /proc/PID/maps, 2.3 ms apiece at the end).
std::optional<Mapping> mapping_at(pid_t pid, uint64_t addr) {
  std::optional<Mapping> found;
  each_mapping_from(pid, addr, [&](const Mapping& m) {
    if (m.lo <= addr) found = m;
    return false;  // the first mapping that ends above `addr` holds it, or none does
  });
  return found;
}

// The device of the kernel's internal mount that holds files of `page_size` pages: the shmem one (SysV
// segments, shared anonymous memory, memfds) or a hugetlbfs one per huge page size. A memfd of that kind
// made here tells, since memfds are made on the same mount. 0 if none can be made.
dev_t internal_mount(uint64_t page_size, bool huge) {
  unsigned flags = MFD_CLOEXEC;
  if (huge) flags |= MFD_HUGETLB | (unsigned(__builtin_ctzll(page_size)) << MFD_HUGE_SHIFT);
  const control::UniqueFd probe(memfd_create("uroce-probe", flags));
  struct stat st {};
  return probe && fstat(probe.get(), &st) == 0 ? st.st_dev : 0;
}

// True when `name` (the link /proc/self/fd/N reads) is a SysV segment or shared anonymous memory, and the
// file lies on the kernel's internal mount: a tmpfs or hugetlbfs file a user made can take any name, but
// not that device (memfds, the only other files made there, are named "/memfd:...").
bool fixed_size_file(int fd, const std::string& name) {
  const bool sysv = name.rfind("/SYSV", 0) == 0;
  const bool shared_anonymous = name == "/dev/zero (deleted)";
  if (!sysv && !shared_anonymous) return false;
  struct stat st {};
  struct statfs fs {};
  if (fstat(fd, &st) != 0 || fstatfs(fd, &fs) != 0 || st.st_nlink != 0) return false;
  if (uint64_t(fs.f_type) == TMPFS_MAGIC) {
    static const dev_t shmem = internal_mount(0, false);
    return shmem != 0 && st.st_dev == shmem;
  }
  if (uint64_t(fs.f_type) == HUGETLBFS_MAGIC && sysv) {  // SHM_HUGETLB; a huge page of st_blksize bytes
    static std::mutex lock;
    static std::optional<dev_t> seen[64];
    const uint64_t page = uint64_t(st.st_blksize);
    if (page == 0 || (page & (page - 1)) != 0) return false;
    std::lock_guard guard(lock);
    auto& dev = seen[__builtin_ctzll(page)];
    if (!dev) dev = internal_mount(page, true);
    return *dev != 0 && st.st_dev == *dev;
  }
  return false;
}

std::string link_of(int fd) {
  char target[512];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
  return n > 0 ? std::string(target, size_t(n)) : std::string();
}

}  // namespace

std::optional<SharedMapping> open_shared_mapping(pid_t pid, uint64_t addr, uint64_t length) {
  if (length == 0 || addr + length < addr) return std::nullopt;
  const std::optional<Mapping> m = mapping_at(pid, addr);
  if (!m || addr + length > m->hi) return std::nullopt;  // unmapped, or across several mappings
  // Shared, and the process may read and write it: the daemon's mapping is read-write, and must not give
  // remote peers a right to pages the process itself was not given.
  if (m->perms[0] != 'r' || m->perms[1] != 'w' || m->perms[3] != 's') return std::nullopt;
  char path[96];
  snprintf(path, sizeof path, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, int(pid), m->lo, m->hi);
  SharedMapping s;
  s.file.reset(open(path, O_RDWR | O_CLOEXEC));
  if (!s.file) {
    spdlog::debug("region at {:#x}: cannot open {} ({}); reached with process_vm_*", addr, path, strerror(errno));
    return std::nullopt;
  }
  // What was opened is named by its own link, not by the maps line read before (the process may have
  // remapped meanwhile; the offset then names another part of a file the process maps, bounds-checked).
  s.fixed_size = fixed_size_file(s.file.get(), link_of(s.file.get()));
  s.offset = m->offset + (addr - m->lo);
  return s;
}

}  // namespace uroce::emulator
