// SharedPages, the client's side of shared-memory registration: registered pages are moved onto a memfd
// in place (same addresses, same contents, now shared with whoever maps the memfd), regions already
// moved are reused, and memory that must not be moved is left alone.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "emulator/client/shared_pages.hpp"
#include "emulator/protocol/process_mappings.hpp"
#include "emulator/protocol/registered_pages.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

size_t page_size() { return size_t(sysconf(_SC_PAGESIZE)); }

// A private anonymous mapping of `pages` pages, unmapped at the end of the test.
struct Anonymous {
  explicit Anonymous(size_t pages, int prot = PROT_READ | PROT_WRITE) : size(pages * page_size()) {
    base = static_cast<uint8_t*>(mmap(nullptr, size, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(base != MAP_FAILED);
  }
  ~Anonymous() { munmap(base, size); }
  uint8_t* page(size_t i) const { return base + i * page_size(); }
  uint8_t* base;
  size_t size;
};

// The memfd's bytes [offset, offset + n), through a mapping of our own (as the daemon sees them).
std::vector<uint8_t> memfd_bytes(int fd, uint64_t offset, size_t n) {
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  auto* m = static_cast<uint8_t*>(mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_SHARED, fd, 0));
  REQUIRE(m != MAP_FAILED);
  std::vector<uint8_t> out(m + offset, m + offset + n);
  munmap(m, size_t(st.st_size));
  return out;
}

// /proc/self/smaps' KernelPageSize of the mapping holding `p`, in kB (0 if not found).
uint64_t kernel_page_kb(const void* p) { return smaps_kb(p, "KernelPageSize"); }

}  // namespace

TEST_CASE("a heap buffer moves onto a sealed memfd with its contents and address unchanged", "[shared-pages]") {
  client::SharedPages pages;
  constexpr size_t length = 3 * 4096 + 123;
  auto* buffer = static_cast<uint8_t*>(std::malloc(length));
  REQUIRE(buffer != nullptr);
  const auto bytes = pattern(length, 17);
  std::memcpy(buffer, bytes.data(), length);

  const std::optional<client::SharedSpan> span = pages.share(buffer, length);
  REQUIRE(span);
  const uint64_t page_start = reinterpret_cast<uint64_t>(buffer) & ~uint64_t(page_size() - 1);
  CHECK(span->offset == reinterpret_cast<uint64_t>(buffer) - page_start);
  CHECK(span->fd_size % page_size() == 0);
  CHECK(span->fd_size >= span->offset + length);
  CHECK((fcntl(span->fd, F_GET_SEALS) & F_SEAL_SHRINK) != 0);  // what the daemon requires

  CHECK(std::memcmp(buffer, bytes.data(), length) == 0);  // unchanged where the application looks
  CHECK((memfd_bytes(span->fd, span->offset, length) == bytes));  // and the same in the memfd

  // Both ways: a write through the memfd is seen at the original address, and the reverse.
  auto* shared = static_cast<uint8_t*>(mmap(nullptr, span->fd_size, PROT_READ | PROT_WRITE, MAP_SHARED, span->fd, 0));
  REQUIRE(shared != MAP_FAILED);
  shared[span->offset + 5000] = 0xee;
  CHECK(buffer[5000] == 0xee);
  buffer[10] = 0x3c;
  CHECK(shared[span->offset + 10] == 0x3c);
  munmap(shared, span->fd_size);

  // Registering it again gives the same memfd.
  const std::optional<client::SharedSpan> again = pages.share(buffer, length);
  REQUIRE(again);
  CHECK(again->fd == span->fd);
  CHECK(again->offset == span->offset);
  std::free(buffer);
}

TEST_CASE("a range of 64 KiB or more is mapped in by the move, not page by page as it is touched", "[shared-pages]") {
  // Untouched anonymous memory has no page (mincore); after the move every page of it is mapped (the
  // moved range is a mapping of its own, whose Rss counts them), writable: writing each faults none in.
  client::SharedPages pages;
  Anonymous m(emulator::protocol::populate_from_bytes / page_size() + 3);
  std::vector<unsigned char> resident(m.size / page_size());
  REQUIRE(mincore(m.base, m.size, resident.data()) == 0);
  REQUIRE(std::count(resident.begin(), resident.end(), 0) == std::ptrdiff_t(resident.size()));
  REQUIRE(pages.share(m.base, m.size));
  CHECK(smaps_kb(m.base, "Rss") * 1024 == m.size);
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  for (size_t i = 0; i < m.size / page_size(); ++i) *m.page(i) = uint8_t(i);
  getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_minflt == before.ru_minflt);
}

TEST_CASE("a sub-range of a shared region reuses its memfd at the right offset", "[shared-pages]") {
  client::SharedPages pages;
  Anonymous m(8);
  const size_t page = page_size();
  const std::optional<client::SharedSpan> whole = pages.share(m.page(2), 4 * page);  // pages 2-5
  REQUIRE(whole);
  CHECK(whole->offset == 0);
  CHECK(whole->fd_size == 4 * page);

  const std::optional<client::SharedSpan> inner = pages.share(m.page(3) + 10, 100);
  REQUIRE(inner);
  CHECK(inner->fd == whole->fd);
  CHECK(inner->offset == page + 10);
  CHECK(inner->fd_size == whole->fd_size);

  const std::optional<client::SharedSpan> tail = pages.share(m.page(5), page);  // the last page exactly
  REQUIRE(tail);
  CHECK(tail->fd == whole->fd);
  CHECK(tail->offset == 3 * page);
}

TEST_CASE("a range that starts before a shared region, or reaches a second one, is not moved", "[shared-pages]") {
  client::SharedPages pages;
  Anonymous m(8);
  const size_t page = page_size();
  REQUIRE(pages.share(m.page(2), 2 * page));            // pages 2-3
  REQUIRE(pages.share(m.page(6), page));                // page 6
  m.page(1)[0] = 0x42;
  CHECK_FALSE(pages.share(m.page(1), 2 * page));        // pages 1-2: starts before
  CHECK_FALSE(pages.share(m.page(0), 8 * page));        // around it
  CHECK_FALSE(pages.share(m.page(3), 4 * page));        // pages 3-6: runs on into page 6's
  CHECK(m.page(1)[0] == 0x42);
  // Disjoint neighbours are fine, each with its own memfd.
  const auto before = pages.share(m.page(0), page);
  const auto after = pages.share(m.page(4), page);
  REQUIRE(before);
  REQUIRE(after);
  CHECK(before->fd != after->fd);
}

// Heap buffers registered one after another: the second begins on the first's last page.
TEST_CASE("a range that runs on past a shared region's end moves onto its memfd, grown", "[shared-pages]") {
  client::SharedPages pages;
  Anonymous m(8);
  const size_t page = page_size();
  for (size_t i = 0; i < m.size; ++i) m.base[i] = uint8_t(i * 7 + 1);
  const auto first = pages.share(m.page(1) + 100, 2 * page - 200);  // pages 1-2
  REQUIRE(first);
  CHECK(first->fd_size == 2 * page);
  const auto second = pages.share(m.page(2) + 50, 3 * page);        // pages 2-5
  REQUIRE(second);
  CHECK(second->fd == first->fd);
  CHECK(second->offset == page + 50);
  CHECK(second->fd_size == 5 * page);
  // The application's bytes are where they were, and the memfd holds them at consecutive offsets.
  for (size_t i = 0; i < m.size; ++i) REQUIRE(m.base[i] == uint8_t(i * 7 + 1));
  const std::vector<uint8_t> in_memfd = memfd_bytes(second->fd, 0, 5 * page);
  for (size_t i = 0; i < 5 * page; ++i) REQUIRE(in_memfd[i] == uint8_t((page + i) * 7 + 1));
  // One memory: the application's writes are in the memfd, and the memfd's writes in the application's.
  m.page(5)[9] = 0xEE;
  CHECK(memfd_bytes(second->fd, 4 * page + 9, 1)[0] == 0xEE);
  auto* shared = static_cast<uint8_t*>(mmap(nullptr, 5 * page, PROT_READ | PROT_WRITE, MAP_SHARED, second->fd, 0));
  REQUIRE(shared != MAP_FAILED);
  shared[3 * page + 1] = 0xDD;
  CHECK(m.page(4)[1] == 0xDD);
  munmap(shared, 5 * page);
  // The first region's span is unchanged; a range inside the grown one is found moved.
  const auto inside = pages.share(m.page(4), page);
  REQUIRE(inside);
  CHECK(inside->fd == first->fd);
  CHECK(inside->offset == 3 * page);
  // Pages 0, 6 and 7 stay private: nothing but the registered pages moved.
  for (size_t i : {size_t(0), size_t(6), size_t(7)}) {
    std::string perms;
    emulator::each_mapping_from(0, reinterpret_cast<uint64_t>(m.page(i)), [&](const emulator::Mapping& map) {
      perms = map.perms;
      return false;
    });
    CHECK(perms == "rw-p");
  }
}

TEST_CASE("shared file mappings, read-only memory, the stack and empty ranges are not moved", "[shared-pages]") {
  client::SharedPages pages;
  const size_t page = page_size();

  char path[] = "/tmp/uroce-shared-pages-XXXXXX";
  const int file = mkstemp(path);
  REQUIRE(file >= 0);
  unlink(path);
  REQUIRE(ftruncate(file, off_t(2 * page)) == 0);
  auto* mapped = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, file, 0));
  REQUIRE(mapped != MAP_FAILED);
  mapped[0] = 0x77;
  CHECK_FALSE(pages.share(mapped, 2 * page));
  mapped[1] = 0x78;  // still attached to its file
  uint8_t from_file[2] = {};
  REQUIRE(pread(file, from_file, 2, 0) == 2);
  CHECK(from_file[0] == 0x77);
  CHECK(from_file[1] == 0x78);
  munmap(mapped, 2 * page);
  close(file);

  Anonymous read_only(2, PROT_READ);
  CHECK_FALSE(pages.share(read_only.base, 2 * page));

  // Partly read-only: the first page is writable, the second is not.
  Anonymous mixed(2);
  REQUIRE(mprotect(mixed.page(1), page, PROT_READ) == 0);
  CHECK_FALSE(pages.share(mixed.base, 2 * page));

  uint8_t on_stack[64];
  CHECK_FALSE(pages.share(on_stack, sizeof on_stack));

  Anonymous fine(1);
  CHECK_FALSE(pages.share(fine.base, 0));
  CHECK(pages.share(fine.base, 1));  // the same memory with a length is fine
}

TEST_CASE("huge pages move whole onto a memfd of huge pages and stay huge; with none free they stay put",
          "[shared-pages][huge]") {
  constexpr size_t huge = 2 << 20;
  HugePagePool pool(4);  // two for the buffer, two for its copy
  if (!pool.grown) {
    WARN("not root: the pool of huge pages cannot be grown, so this case is not run");
    return;
  }
  REQUIRE(HugePagePool::free() >= 4);
  auto* base = static_cast<uint8_t*>(
      mmap(nullptr, 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0));
  REQUIRE(base != MAP_FAILED);
  const auto bytes = pattern(2 * huge, 29);
  std::memcpy(base, bytes.data(), bytes.size());
  REQUIRE(kernel_page_kb(base) == 2048);
  {
    client::SharedPages pages;
    // A range across the boundary of the two huge pages: both move, whole.
    const std::optional<client::SharedSpan> span = pages.share(base + huge / 2, huge);
    REQUIRE(span);
    CHECK(span->fd_size == 2 * huge);
    CHECK(span->offset == huge / 2);
    CHECK((fcntl(span->fd, F_GET_SEALS) & F_SEAL_SHRINK) != 0);
    CHECK(kernel_page_kb(base) == 2048);  // still huge pages
    CHECK(std::memcmp(base, bytes.data(), bytes.size()) == 0);
    CHECK((memfd_bytes(span->fd, 0, 2 * huge) == bytes));
    auto* shared = static_cast<uint8_t*>(mmap(nullptr, span->fd_size, PROT_READ | PROT_WRITE, MAP_SHARED, span->fd, 0));
    REQUIRE(shared != MAP_FAILED);
    shared[huge + 7] = 0x5a;  // as the daemon writes
    CHECK(base[huge + 7] == 0x5a);
    munmap(shared, span->fd_size);
    base[huge + 7] = bytes[huge + 7];
    // Registered again, or a part of it: the same memfd.
    const auto again = pages.share(base + 100, 4096);
    REQUIRE(again);
    CHECK(again->fd == span->fd);
    CHECK(again->offset == 100);

    // A second buffer of two huge pages leaves none free for its copy: it stays where it is, unchanged.
    REQUIRE(HugePagePool::free() == 2);
    auto* other = static_cast<uint8_t*>(
        mmap(nullptr, 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0));
    REQUIRE(other != MAP_FAILED);
    std::memcpy(other, bytes.data(), bytes.size());
    CHECK_FALSE(pages.share(other, 2 * huge));
    CHECK(std::memcmp(other, bytes.data(), bytes.size()) == 0);
    CHECK(kernel_page_kb(other) == 2048);
    munmap(other, 2 * huge);
  }
  // The registry gone, the range is private memory again with the same bytes.
  CHECK(std::memcmp(base, bytes.data(), bytes.size()) == 0);
  munmap(base, 2 * huge);
}

}  // namespace uroce::test::service
