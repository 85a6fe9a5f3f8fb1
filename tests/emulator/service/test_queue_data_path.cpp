// Work requests written by a client into its rings go through the QueueService into a real transport
// device, over the simulation network to another one, and their completions come back through the
// completion rings: the bytes that land and every completion field are checked.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emulator/daemon/shared_memory.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using protocol::CompletionEntry;

uint64_t word_at(const std::vector<uint8_t>& buffer, size_t offset) {
  uint64_t v;
  std::memcpy(&v, buffer.data() + offset, sizeof v);
  return v;
}

void set_word(std::vector<uint8_t>& buffer, size_t offset, uint64_t v) { std::memcpy(buffer.data() + offset, &v, sizeof v); }

// The single completion a ring must hold.
CompletionEntry only_completion(client::CompletionRing& cq) {
  const std::vector<CompletionEntry> got = poll_all(cq);
  REQUIRE(got.size() == 1);
  return got.front();
}

}  // namespace

TEST_CASE("SEND with two SGEs meets a posted RECV; both completions come back through the rings", "[queues]") {
  ServedPair s;
  Pair& p = s.pair;
  const auto head = pattern(1000, 1), tail = pattern(2500, 2);
  put(p.a.buffer(0), 0, head);
  put(p.a.buffer(0), 8192, tail);

  const protocol::WireSge rsge = sge(Pair::b_base + 100, 8192, p.b_key);
  REQUIRE(s.cb.recv.post(0x77, std::span(&rsge, 1)) == 0);
  const protocol::WireSge gather[2] = {sge(Pair::a_base, 1000, p.a_key), sge(Pair::a_base + 8192, 2500, p.a_key)};
  protocol::SendEntry wr = send_entry(0x55, verbs::WrOpcode::send_with_imm);
  wr.imm_data = 0x12345678;
  REQUIRE(s.ca.send.post(wr, gather, {}) == 0);
  s.pump();

  const CompletionEntry sent = only_completion(s.ca.send_cq);
  CHECK(sent.wr_id == 0x55);
  CHECK(sent.status == uint32_t(verbs::WcStatus::success));
  CHECK(sent.opcode == uint32_t(verbs::WcOpcode::send));
  CHECK(sent.qp_num == p.qa);

  const CompletionEntry received = only_completion(s.cb.recv_cq);
  CHECK(received.wr_id == 0x77);
  CHECK(received.status == uint32_t(verbs::WcStatus::success));
  CHECK(received.opcode == uint32_t(verbs::WcOpcode::recv));
  CHECK(received.byte_len == 3500);
  CHECK(received.qp_num == p.qb);
  CHECK((received.wc_flags & verbs::wc_with_imm) != 0);
  CHECK(received.imm_data == 0x12345678);
  CHECK((slice(p.b.buffer(0), 100, 1000) == head));
  CHECK((slice(p.b.buffer(0), 1100, 2500) == tail));

  CHECK(s.qa.counters().send_posted == 1);
  CHECK(s.qb.counters().recv_posted == 1);
  CHECK(s.qa.counters().malformed_wr == 0);
  CHECK(poll_all(s.ca.recv_cq).empty());
  CHECK(poll_all(s.cb.send_cq).empty());
}

TEST_CASE("an inline SEND carries the bytes copied into the slot at post time", "[queues]") {
  ServedPair s;
  Pair& p = s.pair;
  const protocol::WireSge rsge = sge(Pair::b_base, 256, p.b_key);
  REQUIRE(s.cb.recv.post(1, std::span(&rsge, 1)) == 0);
  std::vector<uint8_t> data = pattern(64, 9);
  const std::vector<uint8_t> expected = data;
  REQUIRE(s.ca.send.post(send_entry(2, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline), {}, data) == 0);
  std::fill(data.begin(), data.end(), 0);  // reused before the engine even looked
  s.pump();
  CHECK(only_completion(s.ca.send_cq).status == uint32_t(verbs::WcStatus::success));
  CHECK(only_completion(s.cb.recv_cq).byte_len == 64);
  CHECK((slice(p.b.buffer(0), 0, 64) == expected));
}

TEST_CASE("RDMA WRITE and READ move exactly the requested bytes", "[queues]") {
  ServedPair s;
  Pair& p = s.pair;
  const auto out = pattern(10000, 3), back = pattern(5000, 4);
  put(p.a.buffer(0), 0, out);
  put(p.b.buffer(0), 200000, back);

  protocol::SendEntry write = send_entry(10, verbs::WrOpcode::rdma_write);
  write.remote_addr = Pair::b_base + 4096;
  write.rkey = p.b_key;
  const protocol::WireSge wsge = sge(Pair::a_base, 10000, p.a_key);
  REQUIRE(s.ca.send.post(write, std::span(&wsge, 1), {}) == 0);

  protocol::SendEntry read = send_entry(11, verbs::WrOpcode::rdma_read);
  read.remote_addr = Pair::b_base + 200000;
  read.rkey = p.b_key;
  const protocol::WireSge rsge = sge(Pair::a_base + 500000, 5000, p.a_key);
  REQUIRE(s.ca.send.post(read, std::span(&rsge, 1), {}) == 0);
  s.pump();

  const std::vector<CompletionEntry> done = poll_all(s.ca.send_cq);
  REQUIRE(done.size() == 2);
  CHECK(done[0].wr_id == 10);
  CHECK(done[0].opcode == uint32_t(verbs::WcOpcode::rdma_write));
  CHECK(done[0].status == uint32_t(verbs::WcStatus::success));
  CHECK(done[1].wr_id == 11);
  CHECK(done[1].opcode == uint32_t(verbs::WcOpcode::rdma_read));
  CHECK(done[1].status == uint32_t(verbs::WcStatus::success));
  CHECK(done[1].byte_len == 5000);
  CHECK((slice(p.b.buffer(0), 4096, 10000) == out));
  CHECK(p.b.buffer(0)[4095] == 0);   // nothing before ...
  CHECK(p.b.buffer(0)[14096] == 0);  // ... nor after
  CHECK((slice(p.a.buffer(0), 500000, 5000) == back));
  CHECK(poll_all(s.cb.recv_cq).empty());  // a WRITE without immediate consumes no receive
}

TEST_CASE("atomics through the rings on host memory: compare-and-swap and fetch-and-add", "[queues]") {
  ServedPair s;
  Pair& p = s.pair;
  set_word(p.b.buffer(0), 64, 0x1111);

  protocol::SendEntry cas = send_entry(20, verbs::WrOpcode::atomic_cmp_and_swp);
  cas.remote_addr = Pair::b_base + 64;
  cas.rkey = p.b_key;
  cas.compare_add = 0x1111;
  cas.swap = 0x2222;
  const protocol::WireSge first = sge(Pair::a_base + 0, 8, p.a_key);
  REQUIRE(s.ca.send.post(cas, std::span(&first, 1), {}) == 0);

  protocol::SendEntry add = send_entry(21, verbs::WrOpcode::atomic_fetch_and_add);
  add.remote_addr = Pair::b_base + 64;
  add.rkey = p.b_key;
  add.compare_add = 5;
  const protocol::WireSge second = sge(Pair::a_base + 8, 8, p.a_key);
  REQUIRE(s.ca.send.post(add, std::span(&second, 1), {}) == 0);
  s.pump();

  const std::vector<CompletionEntry> done = poll_all(s.ca.send_cq);
  REQUIRE(done.size() == 2);
  CHECK(done[0].opcode == uint32_t(verbs::WcOpcode::comp_swap));
  CHECK(done[1].opcode == uint32_t(verbs::WcOpcode::fetch_add));
  CHECK(done[0].status == uint32_t(verbs::WcStatus::success));
  CHECK(done[1].status == uint32_t(verbs::WcStatus::success));
  CHECK(done[0].byte_len == 8);
  CHECK(word_at(p.a.buffer(0), 0) == 0x1111);  // the original, before the swap
  CHECK(word_at(p.a.buffer(0), 8) == 0x2222);  // the original, before the add
  CHECK(word_at(p.b.buffer(0), 64) == 0x2227);
}

TEST_CASE("atomics and a WRITE land in a SharedMemory region the daemon maps from a sealed memfd", "[queues]") {
  ServedPair s;
  Pair& p = s.pair;
  constexpr size_t size = 1 << 16;
  const int fd = memfd_create("uroce-test-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, size) == 0);
  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  auto* app = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  REQUIRE(app != MAP_FAILED);
  const uint64_t start = 0x7000;  // the region starts inside the memfd
  const uint64_t initial = 100;
  std::memcpy(app + start + 16, &initial, 8);

  auto memory = std::make_shared<emulator::SharedMemory>(fd, start, 4096, std::make_shared<emulator::ClientLiveness>());
  constexpr uint64_t iova = 0x30000000;
  uint32_t key = 0;
  REQUIRE(p.b.device->reg_mr(p.b.pd, iova, 4096, Pair::all_access, memory, 0, key) == 0);

  protocol::SendEntry add = send_entry(30, verbs::WrOpcode::atomic_fetch_and_add);
  add.remote_addr = iova + 16;
  add.rkey = key;
  add.compare_add = 23;
  const protocol::WireSge result = sge(Pair::a_base, 8, p.a_key);
  REQUIRE(s.ca.send.post(add, std::span(&result, 1), {}) == 0);
  const auto bytes = pattern(300, 5);
  put(p.a.buffer(0), 4096, bytes);
  protocol::SendEntry write = send_entry(31, verbs::WrOpcode::rdma_write);
  write.remote_addr = iova + 1024;
  write.rkey = key;
  const protocol::WireSge src = sge(Pair::a_base + 4096, 300, p.a_key);
  REQUIRE(s.ca.send.post(write, std::span(&src, 1), {}) == 0);
  s.pump();

  const std::vector<CompletionEntry> done = poll_all(s.ca.send_cq);
  REQUIRE(done.size() == 2);
  CHECK(done[0].status == uint32_t(verbs::WcStatus::success));
  CHECK(done[1].status == uint32_t(verbs::WcStatus::success));
  CHECK(word_at(p.a.buffer(0), 0) == 100);
  uint64_t now_there;
  std::memcpy(&now_there, app + start + 16, 8);
  CHECK(now_there == 123);  // seen through the application's own mapping of the memfd
  CHECK((std::vector<uint8_t>(app + start + 1024, app + start + 1324) == bytes));

  REQUIRE(p.b.device->dereg_mr(key) == 0);
  munmap(app, size);
  close(fd);
}

}  // namespace uroce::test::service
