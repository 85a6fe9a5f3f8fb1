#include "emulator/daemon/process_memory.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

namespace uroce::emulator {

// (glibc 2.36's <sys/pidfd.h> declares pidfd_open without C linkage, so C++ cannot link it: the system call.)
ProcessHandle::ProcessHandle(pid_t pid) : pid_(pid), pidfd_(int(syscall(SYS_pidfd_open, pid, 0))) {
  if (!pidfd_) throw std::system_error(errno, std::generic_category(), "cannot hold process " + std::to_string(pid));
}

bool ProcessHandle::alive() const {
  pollfd p{pidfd_.get(), POLLIN, 0};
  return poll(&p, 1, 0) == 0;  // readable (or an error): the process has ended
}

namespace {

// process_vm_* may move fewer bytes than asked (a partial transfer stops at the first unmapped page);
// anything short is a fault.
bool transfer(pid_t pid, bool to_remote, uint64_t remote, void* local, size_t len) {
  if (len == 0) return true;
  iovec l{local, len};
  iovec r{reinterpret_cast<void*>(remote), len};
  const ssize_t n = to_remote ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
  return n == ssize_t(len);
}

}  // namespace

bool ProcessMemory::read(uint64_t offset, void* dst, size_t len) {
  return usable(offset, len) && transfer(process_->pid(), false, base_ + offset, dst, len);
}

bool ProcessMemory::write(uint64_t offset, const void* src, size_t len) {
  return usable(offset, len) && transfer(process_->pid(), true, base_ + offset, const_cast<void*>(src), len);
}

bool ProcessMemory::compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) {
  if (!read(offset, &original, 8)) return false;
  return original != compare || write(offset, &swap, 8);
}

bool ProcessMemory::atomic_store(uint64_t offset, uint64_t value) {
  return ((base_ + offset) & 7) == 0 && write(offset, &value, 8);
}

bool ProcessMemory::fetch_add(uint64_t offset, uint64_t add, uint64_t& original) {
  if (!read(offset, &original, 8)) return false;
  const uint64_t sum = original + add;
  return write(offset, &sum, 8);
}

}  // namespace uroce::emulator
