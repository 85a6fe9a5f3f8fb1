// Application memory as the daemon reaches it: another process's address space, through
// process_vm_readv/process_vm_writev (see docs/daemon.md for why, and the numbers behind the choice).
//
// One instance per registered memory region. When its client goes away the instance is disabled before
// anything else happens, so the daemon never touches that pid's memory again (the pid may be reused by an
// unrelated process later). The process that registered it may also end while its session lives on: a
// child made by fork() that joined its parent's session (docs/daemon.md, "fork()"). Its regions stay, as
// on Linux, where they stay registered on the parent's uverbs file; but they are reached through a pidfd's
// process (ProcessHandle), which is known to have ended, so a later process with the same pid is never
// touched. Every access is bounds-checked against the registration; a failed transfer
// (the client unmapped the pages, or died) is reported to the transport, which turns it into an error
// completion or a NAK, as a real NIC does on a DMA fault.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "emulator/control/unique_fd.hpp"
#include "transport/memory/memory_backend.hpp"

namespace uroce::emulator {

// Shared by every region of one client: one switch turns them all off.
struct ClientLiveness {
  std::atomic<bool> alive{true};
};

// A process, held by a pidfd (pidfd_open): its pid names it, and no other process, while alive() is true.
// Shared by every region the process registered.
class ProcessHandle {
 public:
  // Throws std::system_error when the process cannot be held (it has ended, or no descriptor is left).
  explicit ProcessHandle(pid_t pid);
  pid_t pid() const { return pid_; }
  // False once the process has ended: its pidfd turned readable. A pid is reused only after the process
  // that had it was reaped, so a check just before an access is enough in practice.
  bool alive() const;

 private:
  pid_t pid_;
  control::UniqueFd pidfd_;
};

class ProcessMemory final : public transport::MemoryBackend {
 public:
  ProcessMemory(std::shared_ptr<const ProcessHandle> process, uint64_t base, uint64_t length,
                std::shared_ptr<ClientLiveness> liveness)
      : process_(std::move(process)), base_(base), length_(length), liveness_(std::move(liveness)) {}

  bool read(uint64_t offset, void* dst, size_t len) override;
  bool write(uint64_t offset, const void* src, size_t len) override;
  // Not atomic with respect to the application's own CPU accesses, like a NIC's atomics
  // (IBV_ATOMIC_HCA): atomic among all RDMA operations, which the engine runs one at a time. The same
  // holds for atomic_store: process_vm_writev promises no single 8-byte store, so a CPU reading the word
  // while it is written might see part of it. Regions on shared pages (SharedMemory) have no such gap.
  bool compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) override;
  bool fetch_add(uint64_t offset, uint64_t add, uint64_t& original) override;
  bool atomic_store(uint64_t offset, uint64_t value) override;

 private:
  bool usable(uint64_t offset, size_t len) const {
    return liveness_->alive.load(std::memory_order_acquire) && offset <= length_ && len <= length_ - offset &&
           process_->alive();
  }
  std::shared_ptr<const ProcessHandle> process_;
  uint64_t base_;
  uint64_t length_;
  std::shared_ptr<ClientLiveness> liveness_;
};

}  // namespace uroce::emulator
