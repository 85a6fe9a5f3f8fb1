// How uroced reaches a region the client did not move onto a memfd of its own.
// - Its own shared mappings, which uroced maps itself (emulator/daemon/shared_mappings.hpp): SysV segments
//   (small and huge pages), shared anonymous memory and a sealed memfd are reached in place, as a NIC
//   reaches pinned pages: an RDMA WRITE lands in the memory even after the process moved or unmapped the
//   registered addresses, which process_vm_* (the fallback) could no longer reach. What must not be mapped
//   is not: a shared memfd that can shrink (truncated under its region it gives an error completion, not a
//   daemon that faults), and a mapping the process may only read (a remote WRITE into it fails).
// - Everything else, with process_vm_* on the process that registered it, and on no other: a process that
//   ended (a forked child that joined its parent's session) leaves regions whose pid another process may
//   get; that one is never touched.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>

#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }

constexpr uint32_t success = uint32_t(verbs::WcStatus::success);

// A SysV segment of `size` bytes attached twice: `registered` to be registered and then detached, `view` to
// look at it afterwards. Removed at once (it lives while attached).
struct Segment {
  explicit Segment(size_t size, int flags = 0) {
    const int id = shmget(IPC_PRIVATE, size, IPC_CREAT | 0600 | flags);
    if (id < 0) return;
    registered = static_cast<uint8_t*>(shmat(id, nullptr, 0));
    view = static_cast<uint8_t*>(shmat(id, nullptr, 0));
    shmctl(id, IPC_RMID, nullptr);
  }
  ~Segment() {
    if (view != reinterpret_cast<uint8_t*>(-1)) shmdt(view);
    if (registered != reinterpret_cast<uint8_t*>(-1)) shmdt(registered);
  }
  bool ok() const { return view != reinterpret_cast<uint8_t*>(-1) && registered != reinterpret_cast<uint8_t*>(-1); }
  void detach_registered() {
    REQUIRE(shmdt(registered) == 0);
    registered_gone = registered;
    registered = reinterpret_cast<uint8_t*>(-1);
  }
  uint8_t* registered = reinterpret_cast<uint8_t*>(-1);
  uint8_t* view = reinterpret_cast<uint8_t*>(-1);
  uint8_t* registered_gone = nullptr;  // where it was registered
};

// The daemon opens /proc/PID/map_files/, which needs CAP_SYS_ADMIN: uroced runs as root.
bool can_open_map_files() {
  if (geteuid() == 0) return true;
  WARN("not root: uroced could not open /proc/PID/map_files, so shared mappings stay with process_vm_*");
  return false;
}

// A child made by fork() that waits until told to end (the parent's memory, copied: the same addresses).
struct Child {
  Child() {
    REQUIRE(pipe(go) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(go[1]);  // else its own copy keeps the pipe open: the read below would never see the end
      char c = 0;
      [[maybe_unused]] ssize_t n = read(go[0], &c, 1);
      _exit(0);
    }
    close(go[0]);
  }
  ~Child() { end(); }
  void end() {
    if (pid <= 0) return;
    close(go[1]);
    waitpid(pid, nullptr, 0);
    pid = 0;
  }
  int go[2] = {-1, -1};
  pid_t pid = 0;
};

// As root, the kernel hands out the pid after ns_last_pid next (as CRIU restores processes): a child made
// just after is given `pid` unless another fork came between, so it is tried a few times.
std::unique_ptr<Child> child_with_pid(pid_t pid) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::ofstream("/proc/sys/kernel/ns_last_pid") << pid - 1;
    auto child = std::make_unique<Child>();
    if (child->pid == pid) return child;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("a region on SysV shared memory is reached in place, even after the process detaches it",
          "[verbs][memory][shared-mappings]") {
  if (!can_open_map_files()) return;
  RemoteWriter w;
  const size_t page = page_size();
  Segment seg(3 * page);
  REQUIRE(seg.ok());
  const uint32_t rkey = w.reg(seg.registered + 100, 2 * page);
  // Reached through process_vm_*, these addresses would now fault; the daemon's own mapping does not.
  seg.detach_registered();
  CHECK(w.write(seg.registered_gone + 100, rkey, uint32_t(2 * page)) == success);
  CHECK(w.holds_source(seg.view + 100, 2 * page));
}

TEST_CASE("a region on SysV shared memory of huge pages (perftest --use_hugepages) is reached in place",
          "[verbs][memory][shared-mappings][huge]") {
  if (!can_open_map_files()) return;
  constexpr size_t huge = 2 << 20;
  HugePagePool pool(1);
  REQUIRE(pool.grown);
  RemoteWriter w;
  Segment seg(huge, SHM_HUGETLB);
  REQUIRE(seg.ok());
  const size_t offset = huge - 4096;  // in the huge page's tail: the daemon's mapping starts at its head
  const uint32_t rkey = w.reg(seg.registered + offset, 2048);
  seg.detach_registered();
  CHECK(w.write(seg.registered_gone + offset, rkey, 2048) == success);
  CHECK(w.holds_source(seg.view + offset, 2048));
}

TEST_CASE("a region on shared anonymous memory or a sealed memfd follows the pages when the process moves them",
          "[verbs][memory][shared-mappings]") {
  if (!can_open_map_files()) return;
  RemoteWriter w;
  const size_t page = page_size(), size = 3 * page;
  int memfd = -1;
  uint8_t* mapping = nullptr;
  SECTION("shared anonymous memory") {
    mapping = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  }
  SECTION("a memfd sealed against shrinking") {
    memfd = memfd_create("uroce-test-sealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(memfd >= 0);
    REQUIRE(ftruncate(memfd, off_t(size)) == 0);
    REQUIRE(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
    mapping = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
  }
  REQUIRE(mapping != MAP_FAILED);
  const uint32_t rkey = w.reg(mapping + page + 8, page);
  // The pages move to other addresses; the registered ones are left unmapped.
  void* elsewhere = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(elsewhere != MAP_FAILED);
  auto* moved = static_cast<uint8_t*>(mremap(mapping, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, elsewhere));
  REQUIRE(moved == elsewhere);
  CHECK(w.write(mapping + page + 8, rkey, uint32_t(page)) == success);
  CHECK(w.holds_source(moved + page + 8, page));
  munmap(moved, size);
  if (memfd >= 0) close(memfd);
}

TEST_CASE("a shared memfd that can shrink and a mapping the process may only read are not mapped by the daemon",
          "[verbs][memory][shared-mappings]") {
  if (!can_open_map_files()) return;
  RemoteWriter w;
  const size_t page = page_size();
  SECTION("truncated under its region: an error completion, not a fault in the daemon") {
    const int memfd = memfd_create("uroce-test-unsealed", MFD_CLOEXEC);
    REQUIRE(memfd >= 0);
    REQUIRE(ftruncate(memfd, off_t(2 * page)) == 0);
    auto* mapping = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
    REQUIRE(mapping != MAP_FAILED);
    const uint32_t rkey = w.reg(mapping, 2 * page);
    REQUIRE(ftruncate(memfd, 0) == 0);
    CHECK(w.write(mapping, rkey, uint32_t(page)) != success);
    munmap(mapping, 2 * page);
    close(memfd);
  }
  SECTION("attached read-only: a remote WRITE fails however the region was registered") {
    const int id = shmget(IPC_PRIVATE, page, IPC_CREAT | 0600);
    REQUIRE(id >= 0);
    auto* read_only = static_cast<uint8_t*>(shmat(id, nullptr, SHM_RDONLY));
    shmctl(id, IPC_RMID, nullptr);
    REQUIRE(read_only != reinterpret_cast<uint8_t*>(-1));
    const uint32_t rkey = w.reg(read_only, page);
    CHECK(w.write(read_only, rkey, 64) != success);
    const std::vector<uint8_t> zeros(64, 0);
    CHECK(std::memcmp(read_only, zeros.data(), zeros.size()) == 0);
    shmdt(read_only);
  }
}

TEST_CASE("a region of a process that ended never reaches another process given its pid",
          "[verbs][memory][fork]") {
  if (geteuid() != 0) {
    WARN("not root: a pid cannot be handed out again on purpose, so this case is not run");
    return;
  }
  // Both children see this buffer at the same address: a copy of the parent's.
  const size_t page = page_size();
  auto* buffer = static_cast<uint8_t*>(mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(buffer != MAP_FAILED);
  std::memset(buffer, 0x11, page);
  auto first = std::make_unique<Child>();
  const pid_t pid = first->pid;
  RemoteWriter w(pid);  // session 1 is the first child's (a forked child that joined it registers the same way)
  const uint32_t rkey = w.reg(buffer, page);
  CHECK(w.write(buffer, rkey, 64) == success);  // reaches the first child while it lives
  first->end();
  std::unique_ptr<Child> second = child_with_pid(pid);
  INFO("no child of ours got pid " << pid << " again: another process forking meanwhile may have taken it");
  REQUIRE(second);
  // The same address in the process that now has the pid: untouched, and the write fails.
  CHECK(w.write(buffer, rkey, 64) != success);
  uint8_t seen[64] = {};
  const iovec local{seen, sizeof seen}, remote{buffer, sizeof seen};
  REQUIRE(process_vm_readv(second->pid, &local, 1, &remote, 1, 0) == ssize_t(sizeof seen));
  CHECK(std::all_of(std::begin(seen), std::end(seen), [](uint8_t b) { return b == 0x11; }));
  munmap(buffer, page);
}

}  // namespace uroce::test::service
