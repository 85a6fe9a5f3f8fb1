// Holding other threads' writes to a range of this process's memory while the range is replaced.
//
// shared_pages.cpp moves registered pages onto a memfd by copying them and mapping the copy over them. A
// write by another thread landing between the copy and the mapping would be lost, where a NIC, which pins
// the pages where they are, loses none: QEMU registers its running guest's RAM for live migration, and the
// guest's vCPU threads go on writing it. userfaultfd's write protection closes that window: a write to the
// range, by another thread or by the kernel on its behalf (a read(2) into it), waits in the kernel until
// the hold ends, and then goes to whatever is mapped there by then.
//
// The holding thread must not write to the range itself (its own copy only reads it; the range may hold
// part of the heap, so it must not allocate either), nor run a signal handler that might: it blocks every
// signal while the hold lasts.
#pragma once

#include <signal.h>

#include <cstdint>
#include <memory>

namespace uroce::emulator::client {

class WriteHold {
 public:
  // The hold over [start, start + size) (page aligned), or nullptr with errno set when it cannot be had:
  // no userfaultfd (a seccomp filter, as Docker's default profile has), or a range that another
  // userfaultfd already watches (EBUSY). Without CAP_SYS_PTRACE, where vm.unprivileged_userfaultfd is 0
  // (Debian's default), only user-mode writes are held: a system call writing there meanwhile fails with
  // EFAULT.
  static std::unique_ptr<WriteHold> engage(uint64_t start, uint64_t size);
  // Writers that waited resume, on whatever is then mapped at the range.
  ~WriteHold();
  WriteHold(const WriteHold&) = delete;
  WriteHold& operator=(const WriteHold&) = delete;

 private:
  WriteHold(uint64_t start, uint64_t size);
  int fd_ = -1;
  uint64_t start_, size_;
  sigset_t old_mask_;
};

// Whether this process runs no thread but the caller's (/proc/self/status): then no write can race a
// replacement, and none needs holding.
bool single_threaded();

}  // namespace uroce::emulator::client
