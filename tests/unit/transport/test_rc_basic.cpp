// RC operations end to end between two devices on a clean simulated network.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;

namespace {

constexpr uint64_t a_base = 0x10000000, b_base = 0x20000000;

struct RcPair {
  sim::SimNetwork net{1};
  std::unique_ptr<sim::PcapWriter> capture = capture_if_asked(net);
  Host a{net, ip("10.0.0.1")};
  Host b{net, ip("10.0.0.2")};
  uint32_t a_key = 0, b_key = 0;
  uint32_t qa = 0, qb = 0;

  explicit RcPair(QpParams p = {}, size_t size = 1 << 20) {
    a_key = a.add_buffer(size, p.access, a_base);
    b_key = b.add_buffer(size, p.access, b_base);
    qa = a.create_qp(QpType::rc);
    qb = b.create_qp(QpType::rc);
    connect(a, qa, QpType::rc, b.address, qb, 1000, 5000, p);
    connect(b, qb, QpType::rc, a.address, qa, 5000, 1000, p);
  }
  void run() { REQUIRE(net.run_until_idle(net.now() + 10'000'000'000ull)); }
};

void fill(std::vector<uint8_t>& v, size_t off, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) v[off + i] = uint8_t(seed + i * 7);
}

}  // namespace

TEST_CASE("rc: SEND of every size lands byte for byte with the right completions", "[transport][rc]") {
  for (uint32_t len : {0u, 1u, 3u, 4u, 1023u, 1024u, 1025u, 4096u, 65536u, 100000u}) {
    RcPair p;
    INFO("length " << len);
    fill(p.a.buffer(0), 0, len, uint8_t(len));
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base + 64, 200000, p.b_key)) == 0);
    REQUIRE(p.a.device->post_send(p.qa, send_wr(42, WrOpcode::send, a_base, len, p.a_key), 0) == 0);
    p.run();
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 1);
    CHECK(sc[0].wr_id == 42);
    CHECK(sc[0].status == WcStatus::success);
    CHECK(sc[0].opcode == WcOpcode::send);
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].wr_id == 7);
    CHECK(rc[0].status == WcStatus::success);
    CHECK(rc[0].opcode == WcOpcode::recv);
    CHECK(rc[0].byte_len == len);
    CHECK(std::equal(p.a.buffer(0).begin(), p.a.buffer(0).begin() + len, p.b.buffer(0).begin() + 64));
  }
}

TEST_CASE("rc: RDMA WRITE, WRITE with immediate, READ and atomics", "[transport][rc]") {
  RcPair p;
  fill(p.a.buffer(0), 0, 70000, 3);
  // WRITE 70000 bytes into b at offset 1000.
  REQUIRE(p.a.device->post_send(p.qa, [&] {
    auto wr = send_wr(1, WrOpcode::rdma_write, a_base, 70000, p.a_key);
    wr.remote_addr = b_base + 1000;
    wr.rkey = p.b_key;
    return wr;
  }(), 0) == 0);
  // WRITE with immediate: consumes a receive at b.
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(9, b_base, 0, p.b_key)) == 0);
  auto wimm = send_wr(2, WrOpcode::rdma_write_with_imm, a_base, 3000, p.a_key);
  wimm.remote_addr = b_base + 200000;
  wimm.rkey = p.b_key;
  wimm.imm_data = 0xdeadbeef;
  REQUIRE(p.a.device->post_send(p.qa, wimm, 0) == 0);
  // READ 5000 bytes of b back into a at offset 300000.
  auto rd = send_wr(3, WrOpcode::rdma_read, a_base + 300000, 5000, p.a_key);
  rd.remote_addr = b_base + 1000;
  rd.rkey = p.b_key;
  REQUIRE(p.a.device->post_send(p.qa, rd, 0) == 0);
  // FETCH_ADD then CMP_SWAP on b's word at 400000.
  uint64_t initial = 1000;
  std::memcpy(p.b.buffer(0).data() + 400000, &initial, 8);
  auto fa = send_wr(4, WrOpcode::atomic_fetch_and_add, a_base + 500000, 8, p.a_key);
  fa.remote_addr = b_base + 400000;
  fa.rkey = p.b_key;
  fa.compare_add = 5;
  REQUIRE(p.a.device->post_send(p.qa, fa, 0) == 0);
  auto cs = send_wr(5, WrOpcode::atomic_cmp_and_swp, a_base + 500008, 8, p.a_key);
  cs.remote_addr = b_base + 400000;
  cs.rkey = p.b_key;
  cs.compare_add = 1005;
  cs.swap = 0xabcdef;
  REQUIRE(p.a.device->post_send(p.qa, cs, 0) == 0);
  p.run();

  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    CHECK(sc[i].wr_id == i + 1);
    CHECK(sc[i].status == WcStatus::success);
  }
  CHECK(sc[0].opcode == WcOpcode::rdma_write);
  CHECK(sc[2].opcode == WcOpcode::rdma_read);
  CHECK(sc[3].opcode == WcOpcode::fetch_add);
  CHECK(sc[4].opcode == WcOpcode::comp_swap);
  CHECK(std::equal(p.a.buffer(0).begin(), p.a.buffer(0).begin() + 70000, p.b.buffer(0).begin() + 1000));
  CHECK(std::equal(p.a.buffer(0).begin(), p.a.buffer(0).begin() + 5000, p.a.buffer(0).begin() + 300000));
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].opcode == WcOpcode::recv_rdma_with_imm);
  CHECK(rc[0].imm_data == 0xdeadbeef);
  CHECK((rc[0].wc_flags & wc_with_imm) != 0);
  CHECK(rc[0].byte_len == 3000);
  uint64_t fetched = 0, swapped_old = 0, now_value = 0;
  std::memcpy(&fetched, p.a.buffer(0).data() + 500000, 8);
  std::memcpy(&swapped_old, p.a.buffer(0).data() + 500008, 8);
  std::memcpy(&now_value, p.b.buffer(0).data() + 400000, 8);
  CHECK(fetched == 1000);
  CHECK(swapped_old == 1005);
  CHECK(now_value == 0xabcdef);
}
