// UC: SEND and RDMA WRITE without acknowledgements. The requester completes a WR once its last packet is
// out; the responder takes whole messages and silently drops broken ones (a lost packet, no receive
// posted, a bad R_Key), keeping the receive WQE for the next message (as rxe's drop_msg does);
// nothing moves a UC QP to the error state.
#include <set>

#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;

PairConfig uc_config(size_t buffer_size = 1 << 20) {
  PairConfig c;
  c.type = QpType::uc;
  c.buffer_size = buffer_size;
  return c;
}

bool is_uc_opcode(const WireFrame& f) { return f.roce && f.opcode() >= 0x20 && f.opcode() <= 0x2b; }

uint32_t packets_for(uint32_t length, uint32_t mtu) { return length == 0 ? 1 : (length + mtu - 1) / mtu; }

// Which of the messages (given by their lengths, sent back to back from `first_psn`) reached b whole.
std::set<size_t> whole_messages(const Pair& p, const std::vector<uint32_t>& lengths, uint32_t first_psn) {
  std::set<uint32_t> arrived;
  for (const WireFrame& f : p.wire.delivered(p.a.node)) arrived.insert(f.psn());
  std::set<size_t> whole;
  uint32_t psn = first_psn;
  for (size_t k = 0; k < lengths.size(); ++k) {
    bool all = true;
    for (uint32_t i = 0; i < packets_for(lengths[k], 1024); ++i) {
      all = all && arrived.contains((psn + i) & 0xffffff);
    }
    if (all) whole.insert(k);
    psn = (psn + packets_for(lengths[k], 1024)) & 0xffffff;
  }
  return whole;
}

}  // namespace

TEST_CASE("uc: SEND, WRITE and WRITE with immediate, and not a single acknowledgement", "[transport][uc]") {
  Pair p(uc_config());
  const auto data = pattern(5000, 3);
  put(p.a.buffer(0), 0, data);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 8192, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base + 8192, 0, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 5000, p.a_key)) == 0);
  REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, a_base, 5000, p.a_key, b_base + 16384, p.b_key)) == 0);
  auto imm = rdma_wr(3, WrOpcode::rdma_write_with_imm, a_base, 3000, p.a_key, b_base + 32768, p.b_key);
  imm.imm_data = 0x01020304;
  REQUIRE(p.post_a(imm) == 0);
  REQUIRE(p.run());

  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(sc[i].wr_id == i + 1);
    CHECK(sc[i].status == WcStatus::success);
  }
  CHECK(sc[0].opcode == WcOpcode::send);
  CHECK(sc[1].opcode == WcOpcode::rdma_write);
  CHECK(sc[2].opcode == WcOpcode::rdma_write);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].wr_id == 7);
  CHECK(rc[0].opcode == WcOpcode::recv);
  CHECK(rc[0].byte_len == 5000);
  CHECK(rc[1].wr_id == 8);
  CHECK(rc[1].opcode == WcOpcode::recv_rdma_with_imm);
  CHECK(rc[1].imm_data == 0x01020304);
  CHECK(rc[1].byte_len == 3000);
  CHECK(slice(p.b.buffer(0), 0, 5000) == data);
  CHECK(slice(p.b.buffer(0), 16384, 5000) == data);
  CHECK(slice(p.b.buffer(0), 32768, 3000) == slice(data, 0, 3000));

  // On the wire: 5 + 5 + 3 UC packets from a, and b never answers.
  const auto from_a = p.wire.sent(p.a.node);
  CHECK(from_a.size() == 13);
  for (const WireFrame& f : from_a) CHECK(is_uc_opcode(f));
  CHECK(p.wire.sent(p.b.node).empty());
  CHECK(p.b.device->counters().tx_packets == 0);
}

TEST_CASE("uc: READ and atomics do not exist", "[transport][uc]") {
  Pair p(uc_config());
  CHECK(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 8, p.a_key, b_base, p.b_key)) == EINVAL);
  CHECK(p.post_a(rdma_wr(2, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key, b_base, p.b_key)) == EINVAL);
  CHECK(p.post_a(rdma_wr(3, WrOpcode::atomic_cmp_and_swp, a_base, 8, p.a_key, b_base, p.b_key)) == EINVAL);
  REQUIRE(p.run());
  CHECK(p.wire.frames.empty());
}

TEST_CASE("uc: a message b cannot take is dropped silently and b carries on", "[transport][uc]") {
  Pair p(uc_config());
  const auto data = pattern(2000, 5);
  put(p.a.buffer(0), 0, data);
  SECTION("no receive posted") {
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 2000, p.a_key)) == 0);
    REQUIRE(p.run());
    CHECK(p.b.device->counters().rx_no_receive == 1);  // once for the message, not per packet
  }
  SECTION("a bad rkey") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 2000, p.a_key, b_base, p.b_key ^ 0x40)) == 0);
    REQUIRE(p.run());
    CHECK(slice(p.b.buffer(0), 0, 2000) == std::vector<uint8_t>(2000, 0));
  }
  SECTION("WRITE outside the region") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 2000, p.a_key, b_base + (1 << 20) - 100, p.b_key)) ==
            0);
    REQUIRE(p.run());
  }
  SECTION("a SEND longer than the receive") {
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(6, b_base + 65536, 1000, p.b_key)) == 0);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 2000, p.a_key)) == 0);
    REQUIRE(p.run());
  }
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::success);  // a cannot know
  CHECK(p.b.poll(p.b.recv_cq).empty());
  CHECK(p.wire.sent(p.b.node).empty());
  CHECK(p.state(p.b, p.qb) == QpState::rts);
  CHECK(p.b.device->take_events().empty());

  // The next message gets through (into the receive a dropped message left unused, when there is one).
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base + 131072, 4096, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(2, WrOpcode::send, a_base, 1000, p.a_key)) == 0);
  REQUIRE(p.run());
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(rc[0].byte_len == 1000);
  CHECK((rc[0].wr_id == 7 || rc[0].wr_id == 6));
  CHECK(slice(p.b.buffer(0), rc[0].wr_id == 6 ? 65536 : 131072, 1000) == slice(data, 0, 1000));
}

TEST_CASE("uc: under loss every message that arrives is whole, once, in order; the rest are missing",
          "[transport][uc]") {
  for (uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    INFO("seed " << seed);
    PairConfig c = uc_config(4 << 20);
    c.seed = seed;
    Pair p(c);
    sim::LinkProfile lossy;
    lossy.loss = 0.08;
    lossy.delay = 1000;
    p.net.set_link_profile(p.a.node, p.b.node, lossy);

    constexpr size_t n = 300;
    constexpr uint32_t slot = 8192;
    std::vector<uint32_t> lengths(n);
    for (size_t k = 0; k < n; ++k) {
      lengths[k] = uint32_t(4 + (k * 1237 + seed * 71) % 5000);  // 1 to 5 packets
      auto bytes = pattern(lengths[k], uint8_t(k));
      std::memcpy(bytes.data(), &k, 4);  // the message's number leads its bytes
      put(p.a.buffer(0), k * slot, bytes);
      REQUIRE(p.b.device->post_recv(p.qb, recv_wr(k, b_base + k * slot, slot, p.b_key)) == 0);
    }
    for (size_t k = 0; k < n; ++k) {
      REQUIRE(p.post_a(send_wr(1000 + k, WrOpcode::send, a_base + k * slot, lengths[k], p.a_key)) == 0);
    }
    REQUIRE(p.run());

    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == n);
    for (const auto& wc : sc) CHECK(wc.status == WcStatus::success);

    const std::set<size_t> whole = whole_messages(p, lengths, p.config.a_psn);
    CHECK(whole.size() < n);  // the loss did break some
    CHECK(whole.size() > n / 2);
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == whole.size());
    auto expected = whole.begin();
    for (size_t j = 0; j < rc.size(); ++j, ++expected) {
      // Receives are used in order, none skipped: a broken message leaves its receive to the next one.
      CHECK(rc[j].wr_id == j);
      CHECK(rc[j].status == WcStatus::success);
      uint32_t k = 0;
      std::memcpy(&k, p.b.buffer(0).data() + j * slot, 4);
      CHECK(k == *expected);
      if (k >= n) continue;
      CHECK(rc[j].byte_len == lengths[k]);
      CHECK(slice(p.b.buffer(0), j * slot, lengths[k]) == slice(p.a.buffer(0), k * slot, lengths[k]));
    }
    CHECK(p.state(p.a, p.qa) == QpState::rts);
    CHECK(p.state(p.b, p.qb) == QpState::rts);
    CHECK(p.wire.sent(p.b.node).empty());
    CHECK(p.b.device->take_events().empty());
  }
}

TEST_CASE("uc: under loss every WRITE with immediate that completes wrote all its bytes", "[transport][uc]") {
  for (uint64_t seed : {11u, 12u, 13u}) {
    INFO("seed " << seed);
    PairConfig c = uc_config(4 << 20);
    c.seed = seed;
    Pair p(c);
    sim::LinkProfile lossy;
    lossy.loss = 0.08;
    p.net.set_link_profile(p.a.node, p.b.node, lossy);

    constexpr size_t n = 200;
    constexpr uint32_t slot = 8192;
    std::vector<uint32_t> lengths(n);
    for (size_t k = 0; k < n; ++k) {
      lengths[k] = uint32_t(1 + (k * 2311 + seed) % 6000);
      put(p.a.buffer(0), k * slot, pattern(lengths[k], uint8_t(k * 3)));
      REQUIRE(p.b.device->post_recv(p.qb, recv_wr(k, 0, 0, p.b_key)) == 0);
    }
    for (size_t k = 0; k < n; ++k) {
      auto wr = rdma_wr(k, WrOpcode::rdma_write_with_imm, a_base + k * slot, lengths[k], p.a_key,
                        b_base + k * slot, p.b_key, false);
      wr.imm_data = uint32_t(k);
      REQUIRE(p.post_a(wr) == 0);
    }
    REQUIRE(p.run());
    CHECK(p.a.poll(p.a.send_cq).empty());  // all unsignalled, all fine

    const std::set<size_t> whole = whole_messages(p, lengths, p.config.a_psn);
    CHECK(whole.size() < n);
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == whole.size());
    auto expected = whole.begin();
    for (size_t j = 0; j < rc.size(); ++j, ++expected) {
      CHECK(rc[j].wr_id == j);
      CHECK(rc[j].status == WcStatus::success);
      CHECK(rc[j].opcode == WcOpcode::recv_rdma_with_imm);
      CHECK(rc[j].imm_data == *expected);
      CHECK(rc[j].byte_len == lengths[*expected]);
    }
    for (size_t k : whole) {
      CHECK(slice(p.b.buffer(0), k * slot, lengths[k]) == slice(p.a.buffer(0), k * slot, lengths[k]));
    }
    CHECK(p.state(p.b, p.qb) == QpState::rts);
  }
}
