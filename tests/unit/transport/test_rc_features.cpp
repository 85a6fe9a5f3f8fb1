// RC features one by one: inline data, scatter/gather lists, the fence, the READ/atomic limit
// (max_rd_atomic), unsignalled completions, zero-length operations, every path MTU, PSN wrap-around,
// SEND with invalidate and LOCAL_INV. Each is checked on the bytes, the completions and, where ordering
// is the point, on the frames as they crossed the simulated wire.

#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;

bool is_read_request(const WireFrame& f) { return f.is(wire::Opcode::rc_rdma_read_request); }

SendWr local_inv(uint64_t wr_id, uint32_t key, uint32_t send_flags = send_signaled) {
  SendWr li;
  li.wr_id = wr_id;
  li.opcode = WrOpcode::local_inv;
  li.send_flags = send_flags;
  li.invalidate_rkey = key;
  return li;
}

// The status of the one completion on `cq`.
WcStatus only_status(Host& h, uint32_t cq) {
  const auto wc = h.poll(cq);
  REQUIRE(wc.size() == 1);
  return wc[0].status;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Inline data

TEST_CASE("features: inline SEND and WRITE carry the bytes given at post time", "[transport][rc][features]") {
  Pair p;  // max_inline_data 128
  const auto data = pattern(128, 33);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::send;
  wr.send_flags = send_signaled | send_inline;
  wr.inline_data = data;
  REQUIRE(p.post_a(wr) == 0);
  wr.wr_id = 2;
  wr.opcode = WrOpcode::rdma_write;
  wr.inline_data = slice(data, 0, 77);
  wr.remote_addr = b_base + 8192;
  wr.rkey = p.b_key;
  // An inline WR needs no lkey: an SGE with a bad one is not looked at.
  wr.sg_list.push_back({a_base, 77, 0x00777701});
  REQUIRE(p.post_a(wr) == 0);
  // Too much inline data is refused at post time.
  wr.wr_id = 3;
  wr.inline_data = pattern(129, 1);
  CHECK(p.post_a(wr) == EINVAL);
  REQUIRE(p.run());

  const auto sc = expect_success(p.a, p.a.send_cq, 2);
  const auto rc = expect_success(p.b, p.b.recv_cq, 1);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].byte_len == 128);
  CHECK(slice(p.b.buffer(0), 0, 128) == data);
  CHECK(slice(p.b.buffer(0), 8192, 77) == slice(data, 0, 77));
  CHECK(p.b.buffer(0)[8192 + 77] == 0);
  CHECK(p.wire.sent(p.a.node).size() == 2);
}

// ---------------------------------------------------------------------------------------------------------
// Scatter/gather lists

TEST_CASE("features: several SGEs on both sides, byte for byte", "[transport][rc][features]") {
  PairConfig c;
  c.a.mtu = Mtu::mtu_1024;
  Pair p(c);
  for (size_t i = 0; i < (1 << 20); ++i) p.a.buffer(0)[i] = uint8_t(i * 13 + (i >> 9));
  // Gather 1000 + 1 + 3000 + 333 bytes from four places at a.
  const std::vector<Sge> gather = {
      {a_base + 5, 1000, p.a_key}, {a_base + 70001, 1, p.a_key}, {a_base + 20000, 3000, p.a_key},
      {a_base + 999, 333, p.a_key}};
  std::vector<uint8_t> message;
  for (const Sge& s : gather) {
    const auto part = slice(p.a.buffer(0), s.addr - a_base, s.length);
    message.insert(message.end(), part.begin(), part.end());
  }
  REQUIRE(message.size() == 4334);
  const std::vector<Sge> scatter_sges = {
      {b_base + 100, 500, p.b_key}, {b_base + 50000, 2000, p.b_key}, {b_base + 3, 7, p.b_key},
      {b_base + 90000, 5000, p.b_key}};
  const auto scattered = [&](std::vector<uint8_t>& buffer, uint64_t base, const std::vector<Sge>& sges) {
    std::vector<uint8_t> out;
    size_t left = message.size();
    for (const Sge& s : sges) {
      const size_t n = std::min<size_t>(left, s.length);
      const auto part = slice(buffer, s.addr - base, n);
      out.insert(out.end(), part.begin(), part.end());
      left -= n;
    }
    return out;
  };

  SECTION("SEND into a four-SGE receive") {
    RecvWr r;
    r.wr_id = 7;
    r.sg_list = scatter_sges;
    REQUIRE(p.b.device->post_recv(p.qb, r) == 0);
    SendWr wr = send_wr(1, WrOpcode::send, 0, 0, 0);
    wr.sg_list = gather;
    REQUIRE(p.post_a(wr) == 0);
    REQUIRE(p.run());
    expect_success(p.a, p.a.send_cq, 1);
    const auto rc = expect_success(p.b, p.b.recv_cq, 1);
    CHECK(rc[0].byte_len == 4334);
    CHECK(scattered(p.b.buffer(0), b_base, scatter_sges) == message);
    // The last SGE was filled only as far as the message went: 4334 - 2507 = 1827 bytes.
    CHECK(p.b.buffer(0)[90000 + 1827] == 0);
    CHECK(p.b.buffer(0)[90000 + 1826] == message.back());
    CHECK(p.b.buffer(0)[99] == 0);
    CHECK(p.b.buffer(0)[600] == 0);
  }
  SECTION("WRITE gathered into one remote range") {
    SendWr wr = rdma_wr(1, WrOpcode::rdma_write, 0, 0, 0, b_base + 4000, p.b_key);
    wr.sg_list = gather;
    REQUIRE(p.post_a(wr) == 0);
    REQUIRE(p.run());
    const auto sc = expect_success(p.a, p.a.send_cq, 1);
    CHECK(sc[0].byte_len == 4334);
    CHECK(slice(p.b.buffer(0), 4000, 4334) == message);
    CHECK(p.b.buffer(0)[3999] == 0);
    CHECK(p.b.buffer(0)[4000 + 4334] == 0);
  }
  SECTION("READ scattered into four local SGEs") {
    put(p.b.buffer(0), 4000, message);
    std::vector<Sge> local = {{a_base + 600000, 500, p.a_key}, {a_base + 650000, 2000, p.a_key},
                              {a_base + 700003, 7, p.a_key}, {a_base + 800000, 1827, p.a_key}};
    SendWr wr = rdma_wr(1, WrOpcode::rdma_read, 0, 0, 0, b_base + 4000, p.b_key);
    wr.sg_list = local;
    REQUIRE(p.post_a(wr) == 0);
    REQUIRE(p.run());
    const auto sc = expect_success(p.a, p.a.send_cq, 1);
    CHECK(sc[0].byte_len == 4334);
    CHECK(scattered(p.a.buffer(0), a_base, local) == message);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Ordering: the fence and max_rd_atomic

TEST_CASE("features: a fenced SEND waits for the READ before it", "[transport][rc][features]") {
  for (bool fence : {true, false}) {
    INFO((fence ? "fenced" : "not fenced"));
    Pair p;
    sim::LinkProfile link;
    link.delay = 10'000;
    p.net.set_default_profile(link);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 8192, p.a_key, b_base + 65536, p.b_key)) == 0);
    SendWr s = send_wr(2, WrOpcode::send, a_base + 16384, 100, p.a_key);
    if (fence) s.send_flags |= send_fence;
    REQUIRE(p.post_a(s) == 0);
    REQUIRE(p.run());
    const auto sc = expect_success(p.a, p.a.send_cq, 2);
    CHECK(sc[0].wr_id == 1);
    CHECK(sc[1].wr_id == 2);
    const auto sends = p.wire.sent(p.a.node, [](const WireFrame& f) { return f.is(wire::Opcode::rc_send_only); });
    const auto responses = p.wire.delivered(p.b.node, [](const WireFrame& f) { return f.is_read_response(); });
    REQUIRE(sends.size() == 1);
    REQUIRE(responses.size() == 8);
    if (fence) {
      CHECK(sends[0].time >= responses.back().time);  // not before the READ completed
    } else {
      CHECK(sends[0].time < responses.front().time);  // without the fence it does not wait
    }
  }
}

TEST_CASE("features: the fence waits for atomics but not for WRITEs", "[transport][rc][features]") {
  Pair p;
  sim::LinkProfile link;
  link.delay = 10'000;
  p.net.set_default_profile(link);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 8192, p.a_key, b_base + 65536, p.b_key)) == 0);
  SendWr s = send_wr(2, WrOpcode::send, a_base, 100, p.a_key);
  s.send_flags |= send_fence;
  REQUIRE(p.post_a(s) == 0);
  REQUIRE(p.post_a(rdma_wr(3, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key, b_base, p.b_key)) == 0);
  s.wr_id = 4;
  REQUIRE(p.post_a(s) == 0);
  REQUIRE(p.run());
  expect_success(p.a, p.a.send_cq, 4);
  const auto sends = p.wire.sent(p.a.node, [](const WireFrame& f) { return f.is(wire::Opcode::rc_send_only); });
  const auto acks = p.wire.delivered(p.b.node, [](const WireFrame& f) { return f.is_acknowledge(); });
  const auto atomic_ack =
      p.wire.delivered(p.b.node, [](const WireFrame& f) { return f.is(wire::Opcode::rc_atomic_acknowledge); });
  REQUIRE(sends.size() == 2);
  REQUIRE(atomic_ack.size() == 1);
  REQUIRE(!acks.empty());
  CHECK(sends[0].time < acks.front().time);      // behind a WRITE: no wait
  CHECK(sends[1].time >= atomic_ack[0].time);    // behind an atomic: waits for its response
}

TEST_CASE("features: max_rd_atomic bounds the READs and atomics outstanding on the wire",
          "[transport][rc][features]") {
  for (uint8_t limit : {1, 2, 4}) {
    INFO("max_rd_atomic " << int(limit));
    PairConfig c;
    c.a.max_rd_atomic = limit;
    Pair p(c);
    sim::LinkProfile link;
    link.delay = 5'000;
    p.net.set_default_profile(link);
    constexpr int n = 8;
    for (int i = 0; i < n; ++i) {
      if (i % 3 == 2) {
        REQUIRE(p.post_a(rdma_wr(uint64_t(i), WrOpcode::atomic_fetch_and_add, a_base + 100000 + uint64_t(i) * 8, 8,
                                 p.a_key, b_base, p.b_key)) == 0);
      } else {
        REQUIRE(p.post_a(rdma_wr(uint64_t(i), WrOpcode::rdma_read, a_base + uint64_t(i) * 4096, 3000, p.a_key,
                                 b_base + 8192, p.b_key)) == 0);
      }
    }
    REQUIRE(p.run());
    expect_success(p.a, p.a.send_cq, n);
    // Walk a's view in time order: requests it sent, and the ends of responses it got.
    std::vector<std::pair<Nanos, int>> events;  // +1 request out, -1 response complete
    for (const WireFrame& f : p.wire.frames) {
      if (f.point == sim::CapturePoint::transmitted && f.from == p.a.node &&
          (is_read_request(f) || f.is(wire::Opcode::rc_fetch_add))) {
        events.push_back({f.time, +1});
      }
      if (f.point == sim::CapturePoint::delivered && f.from == p.b.node &&
          (f.ends_read_response() || f.is(wire::Opcode::rc_atomic_acknowledge))) {
        events.push_back({f.time, -1});
      }
    }
    int outstanding = 0, most = 0, requests = 0;
    for (const auto& [t, d] : events) {
      outstanding += d;
      requests += d > 0;
      most = std::max(most, outstanding);
      CHECK(outstanding >= 0);
    }
    CHECK(requests == n);
    CHECK(most == limit);  // the limit is reached and never exceeded
  }
}

// ---------------------------------------------------------------------------------------------------------
// Unsignalled completions

TEST_CASE("features: unsignalled WRs give no completion; a later signalled one implies them",
          "[transport][rc][features]") {
  PairConfig c;
  c.max_wr = 4;
  Pair p(c);
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(p.b.device->post_recv(p.qb, recv_wr(i, b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key, false)) == 0);
  REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base + 8192, p.b_key, false)) == 0);
  REQUIRE(p.post_a(rdma_wr(3, WrOpcode::rdma_read, a_base + 4096, 100, p.a_key, b_base, p.b_key, false)) == 0);
  REQUIRE(p.post_a(send_wr(4, WrOpcode::send, a_base, 100, p.a_key, true)) == 0);
  CHECK(p.post_a(send_wr(5, WrOpcode::send, a_base, 100, p.a_key)) == ENOMEM);  // the send queue is full
  REQUIRE(p.run());
  const auto sc = expect_success(p.a, p.a.send_cq, 1);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 4);
  CHECK(p.b.poll(p.b.recv_cq).size() == 2);
  // The signalled completion retired the three before it: the queue takes four new WRs.
  for (uint64_t i = 10; i < 14; ++i) REQUIRE(p.post_a(send_wr(i, WrOpcode::rdma_write, a_base, 8, p.a_key, false)) == 0);
  CHECK(p.post_a(send_wr(14, WrOpcode::send, a_base, 100, p.a_key)) == ENOMEM);
}

TEST_CASE("features: sq_sig_all signals every WR", "[transport][rc][features]") {
  sim::SimNetwork net(1);
  Host a(net, ip("10.0.0.1")), b(net, ip("10.0.0.2"));
  const uint32_t a_key = a.add_buffer(65536, Pair::all_access, a_base);
  const uint32_t b_key = b.add_buffer(65536, Pair::all_access, b_base);
  QpInitAttr attr;
  attr.pd = a.pd;
  attr.send_cq = a.send_cq;
  attr.recv_cq = a.recv_cq;
  attr.cap = {16, 16, 4, 4, 0};
  attr.sq_sig_all = true;
  uint32_t qa = 0;
  REQUIRE(a.device->create_qp(attr, qa) == 0);
  const uint32_t qb = b.create_qp(QpType::rc);
  connect(a, qa, QpType::rc, b.address, qb, 1, 2);
  connect(b, qb, QpType::rc, a.address, qa, 2, 1);
  for (uint64_t i = 0; i < 3; ++i) {
    REQUIRE(a.device->post_send(qa, rdma_wr(i, WrOpcode::rdma_write, a_base, 10, a_key, b_base, b_key, false), 0) ==
            0);
  }
  REQUIRE(net.run_until_idle(10'000'000'000ull));
  const auto sc = a.poll(a.send_cq);
  REQUIRE(sc.size() == 3);
  for (uint64_t i = 0; i < 3; ++i) CHECK(sc[i].wr_id == i);
}

// ---------------------------------------------------------------------------------------------------------
// Zero-length operations

TEST_CASE("features: zero-length SEND, WRITE, WRITE with immediate and READ", "[transport][rc][features]") {
  Pair p;
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 64, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, RecvWr{8, {}}) == 0);  // no SGE at all
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, 0, 0, 0)) == 0);
  // Zero-length RDMA: the responder checks neither the R_Key nor the address (IBTA C9-88, as rxe).
  REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, 0, 0, 0, 0xdead0000, 0x12345678)) == 0);
  auto imm = rdma_wr(3, WrOpcode::rdma_write_with_imm, 0, 0, 0, 0, 0);
  imm.imm_data = 0x0badcafe;
  REQUIRE(p.post_a(imm) == 0);
  REQUIRE(p.post_a(rdma_wr(4, WrOpcode::rdma_read, 0, 0, 0, 0xdead0000, 0x12345678)) == 0);
  REQUIRE(p.run());
  const auto sc = expect_success(p.a, p.a.send_cq, 4);
  REQUIRE(sc.size() == 4);
  CHECK(sc[0].opcode == WcOpcode::send);
  CHECK(sc[1].opcode == WcOpcode::rdma_write);
  CHECK(sc[3].opcode == WcOpcode::rdma_read);
  for (const auto& wc : sc) CHECK(wc.byte_len == 0);
  const auto rc = expect_success(p.b, p.b.recv_cq, 2);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].wr_id == 7);
  CHECK(rc[0].opcode == WcOpcode::recv);
  CHECK(rc[0].byte_len == 0);
  CHECK(rc[1].wr_id == 8);
  CHECK(rc[1].opcode == WcOpcode::recv_rdma_with_imm);
  CHECK(rc[1].imm_data == 0x0badcafe);
  CHECK(rc[1].byte_len == 0);
  // One packet each, none with a payload.
  const auto from_a = p.wire.sent(p.a.node);
  REQUIRE(from_a.size() == 4);
  CHECK(from_a[0].is(wire::Opcode::rc_send_only));
  CHECK(from_a[1].is(wire::Opcode::rc_rdma_write_only));
  CHECK(from_a[1].headers.reth.dma_length == 0);
  CHECK(from_a[2].is(wire::Opcode::rc_rdma_write_only_imm));
  CHECK(from_a[3].is(wire::Opcode::rc_rdma_read_request));
  for (const auto& f : from_a) CHECK(f.payload.empty());
  const auto responses = p.wire.sent(p.b.node, [](const WireFrame& f) { return f.is_read_response(); });
  REQUIRE(responses.size() == 1);
  CHECK(responses[0].is(wire::Opcode::rc_rdma_read_response_only));
  CHECK(responses[0].payload.empty());
  CHECK(p.state(p.b, p.qb) == QpState::rts);
}

// ---------------------------------------------------------------------------------------------------------
// Path MTU and PSN wrap-around

TEST_CASE("features: every path MTU, with messages of many packets", "[transport][rc][features]") {
  for (Mtu mtu : {Mtu::mtu_256, Mtu::mtu_512, Mtu::mtu_1024, Mtu::mtu_2048, Mtu::mtu_4096}) {
    const uint32_t m = mtu_bytes(mtu);
    INFO("path MTU " << m);
    PairConfig c;
    c.a.mtu = c.b.mtu = mtu;
    Pair p(c);
    const uint32_t length = m * 50 + m / 2 + 3;  // 51 packets, the last one odd-sized
    put(p.a.buffer(0), 0, pattern(length, uint8_t(m)));
    put(p.b.buffer(0), 500000, pattern(length, uint8_t(m + 1)));
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, length, p.b_key)) == 0);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, length, p.a_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, a_base, length, p.a_key, b_base + 250000, p.b_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(3, WrOpcode::rdma_read, a_base + 500000, length, p.a_key, b_base + 500000, p.b_key)) ==
            0);
    REQUIRE(p.run());
    expect_success(p.a, p.a.send_cq, 3);
    const auto rc = expect_success(p.b, p.b.recv_cq, 1);
    CHECK(rc[0].byte_len == length);
    CHECK(slice(p.b.buffer(0), 0, length) == slice(p.a.buffer(0), 0, length));
    CHECK(slice(p.b.buffer(0), 250000, length) == slice(p.a.buffer(0), 0, length));
    CHECK(slice(p.a.buffer(0), 500000, length) == slice(p.b.buffer(0), 500000, length));
    // 51 data packets per message; every packet but a message's last carries exactly one MTU.
    const auto data = p.wire.sent(p.a.node, [](const WireFrame& f) { return !is_read_request(f); });
    const auto responses = p.wire.sent(p.b.node, [](const WireFrame& f) { return f.is_read_response(); });
    CHECK(data.size() == 102);
    CHECK(responses.size() == 51);
    for (const auto* group : {&data, &responses}) {
      for (size_t i = 0; i < group->size(); ++i) {
        const bool last = (i % 51) == 50;
        CHECK((*group)[i].payload.size() == (last ? length - 50 * m : m));
      }
    }
  }
}

TEST_CASE("features: PSNs wrap around from 0xFFFFFF to 0", "[transport][rc][features]") {
  for (double loss : {0.0, 0.03}) {
    INFO("loss " << loss);
    PairConfig c;
    c.a_psn = 0xfffff0;
    c.b_psn = 0xffffe0;
    c.a.timeout = c.b.timeout = 8;
    c.buffer_size = 4 << 20;
    c.seed = 7;
    Pair p(c);
    sim::LinkProfile link;
    link.loss = loss;
    link.delay = 2000;
    p.net.set_default_profile(link);
    constexpr uint32_t length = 64 * 1024;  // 64 packets at MTU 1024
    put(p.a.buffer(0), 0, pattern(length, 1));
    put(p.b.buffer(0), 1 << 20, pattern(length, 2));
    put(p.b.buffer(0), 2 << 20, pattern(length, 3));
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, length, p.b_key)) == 0);
    REQUIRE(p.a.device->post_recv(p.qa, recv_wr(8, a_base + (3 << 20), length, p.a_key)) == 0);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, length, p.a_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, a_base, length, p.a_key, b_base + 65536, p.b_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(3, WrOpcode::rdma_read, a_base + (1 << 20), length, p.a_key, b_base + (1 << 20),
                             p.b_key)) == 0);
    REQUIRE(p.post_b(send_wr(4, WrOpcode::send, b_base + (2 << 20), length, p.b_key)) == 0);
    REQUIRE(p.run());
    expect_success(p.a, p.a.send_cq, 3);
    expect_success(p.a, p.a.recv_cq, 1);
    expect_success(p.b, p.b.send_cq, 1);
    expect_success(p.b, p.b.recv_cq, 1);
    CHECK(slice(p.b.buffer(0), 0, length) == slice(p.a.buffer(0), 0, length));
    CHECK(slice(p.b.buffer(0), 65536, length) == slice(p.a.buffer(0), 0, length));
    CHECK(slice(p.a.buffer(0), 1 << 20, length) == slice(p.b.buffer(0), 1 << 20, length));
    CHECK(slice(p.a.buffer(0), 3 << 20, length) == slice(p.b.buffer(0), 2 << 20, length));
    // Three messages of 64 PSNs each from 0xFFFFF0, one of 64 from 0xFFFFE0.
    CHECK(p.query(p.a, p.qa).sq_psn == (0xfffff0 + 3 * 64) % 0x1000000);
    CHECK(p.query(p.b, p.qb).rq_psn == (0xfffff0 + 3 * 64) % 0x1000000);
    CHECK(p.query(p.b, p.qb).sq_psn == (0xffffe0 + 64) % 0x1000000);
    CHECK(p.query(p.a, p.qa).rq_psn == (0xffffe0 + 64) % 0x1000000);
    if (loss == 0) {
      // The SEND's packets carry 0xFFFFF0 .. 0xFFFFFF, 0 .. 0x2F.
      const auto sends = p.wire.sent(p.a.node, [](const WireFrame& f) { return f.opcode() <= 0x04; });
      REQUIRE(sends.size() == 64);
      for (uint32_t i = 0; i < 64; ++i) CHECK(sends[i].psn() == ((0xfffff0 + i) & 0xffffff));
    } else {
      CHECK(p.a.device->counters().tx_retransmitted > 0);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Invalidation

TEST_CASE("features: SEND with invalidate invalidates the responder's region", "[transport][rc][features]") {
  Pair p;
  const uint32_t target = p.b.add_buffer(65536, Pair::all_access, 0x30000000);
  uint32_t length = 0;
  SECTION("single packet") { length = 100; }
  SECTION("multi-packet") { length = 3000; }
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
  SendWr inv = send_wr(1, WrOpcode::send_with_inv, a_base, length, p.a_key);
  inv.invalidate_rkey = target;
  REQUIRE(p.post_a(inv) == 0);
  REQUIRE(p.run());
  expect_success(p.a, p.a.send_cq, 1);
  const auto rc = expect_success(p.b, p.b.recv_cq, 1);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].opcode == WcOpcode::recv);
  CHECK((rc[0].wc_flags & wc_with_inv) != 0);
  CHECK((rc[0].wc_flags & wc_with_imm) == 0);
  CHECK(rc[0].imm_data == target);  // ibv_wc.invalidated_rkey
  CHECK(rc[0].byte_len == length);
  // On the wire: SEND_ONLY_INV, or SEND_FIRST .. SEND_LAST_INV, with the R_Key in the IETH.
  const auto from_a = p.wire.sent(p.a.node);
  REQUIRE(!from_a.empty());
  CHECK(from_a.back().is(length == 100 ? wire::Opcode::rc_send_only_inv : wire::Opcode::rc_send_last_inv));
  CHECK(from_a.back().headers.ieth == target);
  // The region is gone for remote access.
  REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, a_base, 8, p.a_key, 0x30000000, target)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::rem_access_err);
}

TEST_CASE("features: invalidation names only regions of the QP's own protection domain", "[transport][rc][features]") {
  // Keys are unique across the device (every application's regions share the table): without this check
  // a peer, or a LOCAL_INV, could invalidate any region on the device.
  Pair p;
  uint32_t other_pd = 0;
  REQUIRE(p.b.device->alloc_pd(other_pd) == 0);
  std::vector<uint8_t> memory(4096);
  uint32_t key = 0;
  REQUIRE(p.b.device->reg_mr(other_pd, 0x30000000, memory.size(), Pair::all_access,
                             std::make_shared<HostMemory>(memory.data(), memory.size()), 0, key) == 0);
  SECTION("SEND with invalidate: an Invalid Request NAK") {
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
    SendWr inv = send_wr(1, WrOpcode::send_with_inv, a_base, 100, p.a_key);
    inv.invalidate_rkey = key;
    REQUIRE(p.post_a(inv) == 0);
    REQUIRE(p.run());
    CHECK(only_status(p.a, p.a.send_cq) == WcStatus::rem_inv_req_err);
    CHECK(only_status(p.b, p.b.recv_cq) == WcStatus::rem_inv_req_err);  // the receive the SEND took
  }
  SECTION("LOCAL_INV: a local protection error") {
    REQUIRE(p.post_b(local_inv(5, key)) == 0);
    REQUIRE(p.run());
    CHECK(only_status(p.b, p.b.send_cq) == WcStatus::loc_prot_err);
  }
}

TEST_CASE("features: LOCAL_INV invalidates a region of one's own", "[transport][rc][features]") {
  Pair p;
  SECTION("for local access") {
    const uint32_t key = p.a.add_buffer(4096, Pair::all_access, 0x30000000);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base, 4096, p.b_key)) == 0);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, 0x30000000, 100, key)) == 0);  // before: fine
    REQUIRE(p.post_a(local_inv(2, key, send_signaled | send_fence)) == 0);
    REQUIRE(p.post_a(send_wr(3, WrOpcode::send, 0x30000000, 100, key)) == 0);  // after: refused
    REQUIRE(p.run());
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 3);
    CHECK(sc[0].status == WcStatus::success);
    CHECK(sc[1].wr_id == 2);
    CHECK(sc[1].status == WcStatus::success);
    CHECK(sc[1].opcode == WcOpcode::local_inv);
    CHECK(sc[2].wr_id == 3);
    CHECK(sc[2].status == WcStatus::loc_prot_err);
    CHECK(p.b.poll(p.b.recv_cq).size() == 1);
    CHECK(p.wire.sent(p.a.node, [](const WireFrame& f) { return f.is(wire::Opcode::rc_send_only); }).size() == 1);
  }
  SECTION("for remote access") {
    const uint32_t key = p.b.add_buffer(4096, Pair::all_access, 0x30000000);
    REQUIRE(p.post_b(local_inv(5, key)) == 0);
    REQUIRE(p.run());
    const auto scb = p.b.poll(p.b.send_cq);
    REQUIRE(scb.size() == 1);
    CHECK(scb[0].status == WcStatus::success);
    CHECK(scb[0].opcode == WcOpcode::local_inv);
    CHECK(p.wire.frames.empty());  // purely local
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 8, p.a_key, 0x30000000, key)) == 0);
    REQUIRE(p.run());
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 1);
    CHECK(sc[0].status == WcStatus::rem_access_err);
  }
}
