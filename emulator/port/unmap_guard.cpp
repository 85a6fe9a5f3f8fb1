#include "emulator/port/unmap_guard.hpp"

#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <cstddef>

namespace uroce::emulator::port {

namespace {

// A Dekker handshake, every access sequentially consistent: a burst announces itself, then looks for an
// unmapping; an unmapper announces itself, then looks for bursts. At least one of the two sees the other.
std::atomic<unsigned> bursts_running{0};
std::atomic<unsigned> unmappings{0};

}  // namespace

UnmapGuard::UnmapGuard() noexcept {
  bursts_running.fetch_add(1, std::memory_order_seq_cst);
  admitted_ = unmappings.load(std::memory_order_seq_cst) == 0;
  if (!admitted_) bursts_running.fetch_sub(1, std::memory_order_release);
}

UnmapGuard::~UnmapGuard() {
  if (admitted_) bursts_running.fetch_sub(1, std::memory_order_release);
}

}  // namespace uroce::emulator::port

extern "C" {

int __real_munmap(void* addr, size_t length);  // the C library's (ld --wrap)

// Every munmap of the statically linked code. A burst lasts microseconds; a thread that was preempted
// inside one is waited for with yields.
int __wrap_munmap(void* addr, size_t length) {
  using uroce::emulator::port::bursts_running;
  using uroce::emulator::port::unmappings;
  unmappings.fetch_add(1, std::memory_order_seq_cst);
  for (unsigned spins = 0; bursts_running.load(std::memory_order_seq_cst) != 0; ++spins) {
    if (spins >= 64) sched_yield();
  }
  const int rc = __real_munmap(addr, length);
  unmappings.fetch_sub(1, std::memory_order_release);
  return rc;
}

}  // extern "C"
