// Registered memory moved onto pages the daemon shares (docs/daemon.md, "Application memory").
//
// At registration the pages under the region are copied into a memfd, which is then mapped over the
// same addresses (MAP_FIXED): the application sees its memory unchanged, at the same addresses, and
// uroced maps the same memfd, so every RDMA access is a memcpy in the daemon with no system call. This is
// what makes the data path fast; process_vm_readv/writev (the fallback) costs microseconds per call.
// Huge pages (MAP_HUGETLB, hugetlbfs) move whole onto a memfd of huge pages of the same size.
//
// Only private, non-stack mappings are moved (heap, anonymous mmaps, a binary's data): a file mapped
// MAP_SHARED must stay attached to its file, and the stack must stay the stack. Other threads may go on
// writing to the pages while they move (QEMU's vCPUs do, to guest RAM it registers for live migration):
// their writes wait until the move is done (write_hold.hpp). Where that hold cannot be had (no
// userfaultfd), only a single-threaded process moves its pages. fork() would leave the moved pages shared
// between parent and child, each writing into the other's heap: the child is given private copies of them
// instead (after_fork_in_child), as Linux copies pinned pages for a child since 5.13.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace uroce::emulator::client {

class WriteHold;

struct SharedSpan {
  int fd = -1;           // the memfd (owned by the registry; duplicate it to send it)
  uint64_t offset = 0;   // where the registered address lies in it
  uint64_t fd_size = 0;  // the memfd's size
};

class SharedPages {
 public:
  // Joins the registries the fork handlers serve (pthread_atfork, installed once per process); the verbs
  // shim has one, tests make several.
  SharedPages();
  ~SharedPages();
  // The memfd holding [addr, addr+length), moving those pages onto one if needed; nullopt when they
  // cannot be moved (see above), in which case the daemon reaches the memory with process_vm_*.
  std::optional<SharedSpan> share(const void* addr, uint64_t length);

 private:
  struct Region {
    uint64_t end = 0;
    int fd = -1;
    bool huge = false;  // on a memfd of huge pages
  };
  // The fork handlers. Every live registry's lock is held across fork(), so that the child's copy of each
  // is consistent and no other thread of the parent holds a lock the child inherits.
  static void before_fork();
  static void after_fork_in_parent();
  static void after_fork_in_child();
  // The span of an earlier move that holds [start, end) (addr lying in it), if any; `overlaps` tells
  // whether [start, end) overlaps a moved range without lying inside it.
  std::optional<SharedSpan> moved(uint64_t addr, uint64_t start, uint64_t end, bool& overlaps) const;
  // When [start, end) begins inside one moved range and runs on past its end over memory nothing has moved,
  // moves that rest onto the same memfd, grown, right after the range's pages, so that one memfd holds all
  // of [start, end) at consecutive offsets: its span, or nullopt if it cannot be done.
  std::optional<SharedSpan> extend(uint64_t addr, uint64_t start, uint64_t end);
  // Engages a write hold over [start, end) for a move (true), or tells that the pages must stay put.
  static bool hold_writes(uint64_t start, uint64_t end, std::unique_ptr<WriteHold>& hold);
  // Forgets the moved ranges overlapping [start, end) of which nothing is mapped from their memfd any more:
  // the application unmapped them (after deregistering) and may have mapped new memory at the same
  // addresses, which a registration must move anew, not find moved already.
  void forget_unmapped(uint64_t start, uint64_t end);
  // In the child, with mutex_ held: replaces every moved range with a private copy of its bytes and
  // forgets the memfds, which stay the parent's.
  void copy_into_child();

  std::mutex mutex_;
  std::map<uint64_t, Region> regions_;  // by start address, page aligned, disjoint
};

}  // namespace uroce::emulator::client
