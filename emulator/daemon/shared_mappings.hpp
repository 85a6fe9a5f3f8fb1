// A client's own shared mapping that uroced can map too, so that a region registered on it is reached with
// memcpy rather than process_vm_*: SysV shared memory (shmat; perftest's --use_hugepages), shared anonymous
// memory (mmap MAP_SHARED | MAP_ANONYMOUS) and a memfd sealed against shrinking. The client cannot move
// such memory onto a memfd of its own (emulator/client/shared_pages.hpp moves private memory only: other
// processes may share these pages), so the daemon opens the mapping's file through
// /proc/PID/map_files/, which needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE): uroced runs as root for DPDK.
//
// Only files whose size nobody can change are taken: a mapping the daemon holds of a file that shrinks
// faults (SIGBUS) on the pages cut off. SysV segments and shared anonymous memory live on the kernel's
// internal mounts, reachable by no path, and keep their size for life; a memfd must carry F_SEAL_SHRINK.
// A plain file, or a memfd that could be truncated, stays with process_vm_*.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "emulator/control/unique_fd.hpp"

namespace uroce::emulator {

struct SharedMapping {
  control::UniqueFd file;    // the mapping's file, opened read-write
  uint64_t offset = 0;       // where the registered range starts in it
  bool fixed_size = false;   // a SysV segment or shared anonymous memory (SharedMemory::Size::fixed)
};

// The file under [addr, addr + length) of process `pid`, when one mapping holds the whole range and it is
// shared, readable and writable in the process; nothing otherwise (the reason is logged at debug level).
// Whether the file keeps its size is for SharedMemory to hold it to: `fixed_size` when it is a SysV segment
// or shared anonymous memory, else its seals are checked there, as a memfd a client sends is.
std::optional<SharedMapping> open_shared_mapping(pid_t pid, uint64_t addr, uint64_t length);

}  // namespace uroce::emulator
