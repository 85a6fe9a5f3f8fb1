// A process's mappings as registration reads them (emulator/protocol/process_mappings.hpp), the client
// its own and uroced a client's: from an address on, in order, with the fields /proc/PID/maps gives; and
// the kernel's query, where the kernel has it, agreeing with the text.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "emulator/protocol/process_mappings.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using emulator::Mapping;

// The mappings a walk from `from` visits that stay put while the test runs: those with a name, the heap
// excepted (libraries, the binary, [stack], [vdso], memfds). Anonymous memory is left out because the
// walks themselves allocate, and an allocator (AddressSanitizer's, for one) maps and grows anonymous memory
// as they do; the test checks its own anonymous mappings one by one. [vsyscall] is a line of the
// text but no mapping of the process, so the query does not return it: the kernel's half is left out too.
template <class Walk>
std::vector<std::string> named_mappings(Walk each, pid_t pid, uint64_t from) {
  std::vector<std::string> seen;
  seen.reserve(4096);
  each(pid, from, [&](const Mapping& m) {
    if (m.lo >= (uint64_t(1) << 47)) return false;
    if (m.path.empty() || m.path == "[heap]" || m.path.rfind("[anon", 0) == 0) return true;
    std::ostringstream line;
    line << std::hex << m.lo << '-' << m.hi << ' ' << m.perms << ' ' << m.offset << ' ' << m.inode << ' ' << m.path;
    seen.push_back(line.str());
    return true;
  });
  return seen;
}

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }

}  // namespace

TEST_CASE("a process's mappings from an address on, with their permissions, offset, inode and name",
          "[shared-pages]") {
  const size_t page = page_size();
  // Three pages: read-write private, read-only, shared from a memfd's second page.
  auto* base = static_cast<uint8_t*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(base != MAP_FAILED);
  REQUIRE(mprotect(base + page, page, PROT_READ) == 0);
  const int fd = memfd_create("uroce-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, off_t(2 * page)) == 0);
  REQUIRE(mmap(base + 2 * page, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, off_t(page)) != MAP_FAILED);
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  const uint64_t at = reinterpret_cast<uint64_t>(base);

  // The process's own (pid 0), and the same process named by its pid as uroced names a client.
  for (const pid_t pid : {pid_t(0), getpid()}) {
    for (auto each : {emulator::each_mapping_from, emulator::each_mapping_in_text}) {
      INFO("pid " << pid);
      // From the middle of the first page: the three come first, in order, each whole.
      std::vector<Mapping> seen;
      each(pid, at + 8, [&](const Mapping& m) {
        seen.push_back(m);
        return seen.size() < 3;
      });
      REQUIRE(seen.size() == 3);
      // (The kernel may have merged the first page with a private mapping below it: its start is at or below.)
      CHECK(seen[0].lo <= at);
      CHECK(seen[0].hi == at + page);
      CHECK(seen[0].perms == "rw-p");
      CHECK(seen[0].inode == "0");
      CHECK(seen[1].lo == at + page);
      CHECK(seen[1].perms == "r--p");
      CHECK(seen[2].lo == at + 2 * page);
      CHECK(seen[2].hi == at + 3 * page);
      CHECK(seen[2].perms == "rw-s");
      CHECK(seen[2].offset == page);
      CHECK(seen[2].inode == std::to_string(st.st_ino));
      CHECK(seen[2].path.find("/memfd:uroce-test") == 0);
      // The stack by name.
      bool stack = false;
      each(pid, 0, [&](const Mapping& m) {
        stack = stack || m.path == "[stack]";
        return true;
      });
      CHECK(stack);
    }

    // Where the kernel answers the query (Linux 6.11), it agrees with the text on every named mapping.
    if (emulator::each_mapping_by_query(pid, 0, [](const Mapping&) { return false; })) {
      const auto by_query = named_mappings(emulator::each_mapping_by_query, pid, 0);
      const auto in_text = named_mappings(emulator::each_mapping_in_text, pid, 0);
      CHECK(by_query.size() > 5);
      REQUIRE(by_query.size() == in_text.size());
      for (size_t i = 0; i < by_query.size(); ++i) CHECK(by_query[i] == in_text[i]);
    }
  }
  // A process that is gone: nothing is visited.
  bool visited = false;
  emulator::each_mapping_from(pid_t(0x3fffffff), 0, [&](const Mapping&) { return visited = true; });
  CHECK_FALSE(visited);
  close(fd);
  munmap(base, 3 * page);
}

}  // namespace uroce::test::service
