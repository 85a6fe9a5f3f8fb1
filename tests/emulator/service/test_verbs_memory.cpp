// Client memory as the daemon reaches it, and what a closing session leaves: memory regions on a sealed
// memfd the client sends (and the memfds that must be refused), process_vm_* and shared-memory backends
// switched off by ClientLiveness, and close_session freeing every object the session held.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "emulator/client/shared_pages.hpp"
#include "emulator/daemon/process_memory.hpp"
#include "emulator/daemon/shared_memory.hpp"
#include "emulator/protocol/registered_pages.hpp"
#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

// A memfd of `size` bytes, sealed against shrinking unless told otherwise.
int make_memfd(size_t size, bool sealed = true) {
  const int fd = memfd_create("uroce-test-memory", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, off_t(size)) == 0);
  if (sealed) REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  return fd;
}

json shared_reg(uint32_t pd, uint64_t addr, uint64_t length, uint64_t offset) {
  return {{"op", "reg_mr"}, {"pd", pd}, {"addr", addr}, {"length", length},
          {"access", uint32_t(Pair::all_access)}, {"shared_offset", offset}};
}

// Every operation of a backend on its first 8 bytes; true only if all of them succeeded.
bool backend_works(transport::MemoryBackend& m) {
  uint64_t v = 0, original = 0;
  return m.write(0, &v, 8) && m.read(0, &v, 8) && m.compare_swap(0, 0, 1, original) && m.fetch_add(0, 1, original);
}

}  // namespace

TEST_CASE("ClientLiveness switches a client's memory backends off", "[verbs][memory]") {
  auto liveness = std::make_shared<emulator::ClientLiveness>();
  alignas(8) uint8_t local[64] = {};
  emulator::ProcessMemory process(std::make_shared<emulator::ProcessHandle>(getpid()), reinterpret_cast<uint64_t>(local),
                                  sizeof local, liveness);
  const int fd = make_memfd(4096);
  emulator::SharedMemory shared(fd, 0, 4096, liveness);
  close(fd);  // the backend keeps its own mapping

  CHECK(backend_works(process));
  CHECK(backend_works(shared));
  uint64_t word = 0;
  std::memcpy(&word, local, 8);
  CHECK(word == 2);  // written 0, swapped to 1, added 1

  // Bounds are checked against the registration, not against the mapping.
  uint8_t byte = 0;
  CHECK_FALSE(process.read(64, &byte, 1));
  CHECK_FALSE(shared.write(4090, local, 7));

  // The shared pages are offered in place, for sending and for early placement; process_vm_* memory is
  // not, so the transport copies through read() and write() there.
  CHECK(process.view(0, 8).empty());
  CHECK(process.writable_view(0, 8).empty());
  const std::span<uint8_t> place = shared.writable_view(100, 4);
  REQUIRE(place.size() == 4);
  std::memcpy(place.data(), "abcd", 4);
  uint8_t back[4] = {};
  CHECK(shared.read(100, back, 4));
  CHECK(std::memcmp(back, "abcd", 4) == 0);
  const std::span<const uint8_t> seen = shared.view(100, 4);
  REQUIRE(seen.size() == 4);
  CHECK(std::memcmp(seen.data(), "abcd", 4) == 0);
  CHECK(shared.view(4090, 7).empty());
  CHECK(shared.writable_view(4096, 1).empty());

  liveness->alive = false;
  uint64_t v = 0x55, original = 0;
  CHECK_FALSE(process.read(0, &v, 8));
  CHECK_FALSE(process.write(0, &v, 8));
  CHECK_FALSE(process.compare_swap(0, 2, 9, original));
  CHECK_FALSE(process.fetch_add(0, 1, original));
  CHECK_FALSE(shared.read(0, &v, 8));
  CHECK_FALSE(shared.write(0, &v, 8));
  CHECK_FALSE(shared.compare_swap(0, 2, 9, original));
  CHECK_FALSE(shared.fetch_add(0, 1, original));
  CHECK(shared.view(0, 8).empty());
  CHECK(shared.writable_view(0, 8).empty());
  std::memcpy(&word, local, 8);
  CHECK(word == 2);  // untouched since
}

TEST_CASE("a shared region's pages are mapped in the daemon at registration, and only the region's", "[verbs][memory]") {
  // A NIC pins a region's pages when it is registered: the engine must not fault on the first touch of
  // each in the data path. The rest of the file (a VM's RAM, say, or the other regions of a memfd the
  // client grew) is left alone: nothing of it is mapped, resident or not.
  auto liveness = std::make_shared<emulator::ClientLiveness>();
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const uint64_t length = emulator::protocol::populate_from_bytes;
  const int fd = make_memfd(64 * page + length + 64 * page);
  emulator::SharedMemory shared(fd, 64 * page, length, liveness);
  // A region that starts and ends inside pages: the pages under it.
  emulator::SharedMemory small(fd, 64 * page + length + 100, page, liveness);
  REQUIRE(small.write(0, "abc", 3));
  auto* whole = static_cast<uint8_t*>(mmap(nullptr, 128 * page + length, PROT_READ, MAP_SHARED, fd, 0));
  REQUIRE(whole != MAP_FAILED);
  CHECK(std::memcmp(whole + 64 * page + length + 100, "abc", 3) == 0);
  munmap(whole, 128 * page + length);
  close(fd);
  const uint8_t* region = shared.view(0, 1).data();
  REQUIRE(region != nullptr);
  CHECK(smaps_kb(region, "Rss") * 1024 == length);
  CHECK(smaps_kb(region, "Size") * 1024 == length);
  CHECK(smaps_kb(small.view(0, 1).data(), "Size") * 1024 == 2 * page);
}

TEST_CASE("reg_mr takes a sealed memfd and refuses one that could shrink or is too small", "[verbs][memory]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");

  const int sealed = make_memfd(65536);
  const json ok = h.call(1, shared_reg(pd, 0x1000, 4096, 8192), nullptr, {sealed});
  CHECK(ok.at("lkey") == ok.at("rkey"));
  h.call(1, shared_reg(pd, 0x1000, 65536, 0), nullptr, {sealed});  // exactly the whole file

  const int unsealed = make_memfd(65536, false);
  const int pipe_fds[2] = {-1, -1};
  REQUIRE(pipe(const_cast<int*>(pipe_fds)) == 0);
  CHECK(h.error_of(1, shared_reg(pd, 0x1000, 4096, 0), {unsealed}) == EINVAL);
  CHECK(h.error_of(1, shared_reg(pd, 0x1000, 4096, 65536 - 4095), {sealed}) == EINVAL);  // runs past the end
  CHECK(h.error_of(1, shared_reg(pd, 0x1000, 65537, 0), {sealed}) == EINVAL);
  CHECK(h.error_of(1, shared_reg(pd, 0x1000, 8, uint64_t(1) << 62), {sealed}) == EINVAL);
  CHECK(h.error_of(1, shared_reg(pd, 0x1000, 4096, 0), {pipe_fds[0]}) == EINVAL);  // not a memfd
  CHECK(h.error_of(1, shared_reg(pd, 0x1000, 4096, 0), {}) == EINVAL);
  CHECK(h.error_of(1, shared_reg(pd, 0x1000, 4096, 0), {sealed, sealed}) == EINVAL);
  close(sealed);
  close(unsealed);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}

TEST_CASE("a buffer shared by SharedPages and registered with its memfd is written in place", "[verbs][memory]") {
  // Session 1's target: three pages of anonymous memory, moved onto a memfd the way Context::reg_mr does;
  // session 2 WRITEs into it from process memory.
  RemoteWriter w;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  auto* target = static_cast<uint8_t*>(mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(target != MAP_FAILED);
  client::SharedPages pages;
  const std::optional<client::SharedSpan> span = pages.share(target + 100, 2 * page);
  REQUIRE(span);
  const json mr = w.h.call(1, shared_reg(w.pd_1, reinterpret_cast<uint64_t>(target + 100), 2 * page, span->offset),
                           nullptr, {span->fd});
  CHECK(w.write(target + 100, mr.at("rkey"), uint32_t(2 * page)) == uint32_t(verbs::WcStatus::success));
  CHECK(w.holds_source(target + 100, 2 * page));
  munmap(target, 3 * page);
}

TEST_CASE("close_session frees every object and stops touching the client's memory", "[verbs][memory]") {
  transport::DeviceLimits limits;
  limits.max_pd = 2;
  limits.max_mr = 2;
  limits.max_cq = 3;  // two for the departing client, one for the one that stays
  limits.max_srq = 2;
  limits.max_ah = 2;
  limits.max_qp = 3;
  ServiceHarness h(limits);
  h.service->open_session(1, getpid(), getuid());
  std::vector<int> device_fds;
  h.call(1, {{"op", "open_device"}}, &device_fds);
  std::vector<uint8_t> mem_1(4096, 0x11), mem_1b(4096, 0x12);
  const SessionObjects first = create_one_of_each(h, 1, mem_1.data(), mem_1.size());
  const SessionObjects second = create_one_of_each(h, 1, mem_1b.data(), mem_1b.size());
  std::vector<int> channel_fd;
  h.call(1, {{"op", "create_comp_channel"}}, &channel_fd);

  // The device is full of session 1's objects: session 2 cannot even get a PD.
  h.service->open_session(2, getpid(), getuid());
  CHECK(h.error_of(2, {{"op", "alloc_pd"}}) == ENOMEM);
  CHECK(h.service->session_count() == 2);

  h.service->close_session(1);
  CHECK(h.service->session_count() == 1);
  h.service->close_session(1);  // a second close is harmless

  // Every pipe the session held is closed on the daemon's side: its readers see end of file.
  char c;
  CHECK(read(device_fds[0], &c, 1) == 0);  // async events
  CHECK(read(channel_fd[0], &c, 1) == 0);  // completion channel
  close_all(device_fds);
  close_all(channel_fd);

  // The device has room for all of it again: the other session creates the maximum.
  std::vector<uint8_t> mem_2(4096, 0x22), mem_2b(4096, 0x23);
  const SessionObjects third = create_one_of_each(h, 2, mem_2.data(), mem_2.size());
  const SessionObjects fourth = create_one_of_each(h, 2, mem_2b.data(), mem_2b.size());
  (void)fourth;

  // The departed session's keys are dead: session 2 writing to its old rkey changes nothing.
  std::vector<int> fds;
  const json qp = h.call(2, qp_request(third.pd, third.cq, third.cq), &fds);
  const auto cap = qp.at("cap").get<verbs::QpCap>();
  client::SendRing send(fds[0], qp.at("send_ring_bytes"), cap.max_send_wr, qp.at("send_entry_size"), cap.max_send_sge,
                        cap.max_inline_data);
  close(fds[1]);
  connect_qp(h, 2, qp.at("qp_num"), qp.at("qp_num"));
  for (const SessionObjects* gone : {&first, &second}) {
    protocol::SendEntry write = send_entry(1, verbs::WrOpcode::rdma_write);
    write.remote_addr = reinterpret_cast<uint64_t>(gone == &first ? mem_1.data() : mem_1b.data());
    write.rkey = gone->mr;
    const protocol::WireSge s = sge(reinterpret_cast<uint64_t>(mem_2.data()), 64, third.mr);
    REQUIRE(send.post(write, std::span(&s, 1), {}) == 0);
  }
  h.pump();
  CHECK((mem_1 == std::vector<uint8_t>(4096, 0x11)));
  CHECK((mem_1b == std::vector<uint8_t>(4096, 0x12)));
}

}  // namespace uroce::test::service
