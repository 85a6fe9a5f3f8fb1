// UD: datagrams through an address handle. A receive gets the 40-byte GRH area first (for IPv4, as rxe
// and hardware RNICs write it: 20 zero bytes, then the IPv4 header as it was on the wire), then the
// payload; the completion has IBV_WC_GRH, byte_len = 40 + length and the sender's QPN. The Q_Key is
// checked (a mismatch drops the datagram), and one with the high bit set in the WR means "the sending
// QP's own Q_Key" (IBTA 10.2.5). In place of an SL the completion carries the packet's type, as ConnectX
// reports it (transport/qp/responder.cpp, roce_packet_type): UCX's UD transport reads it.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;
constexpr uint32_t grh = 40;

struct UdPair {
  explicit UdPair(uint32_t qkey = 0x11111111) : p([&] {
      PairConfig c;
      c.type = QpType::ud;
      c.a.qkey = qkey;
      c.b.qkey = qkey;
      return c;
    }()) {
    AddressVector av;
    av.dgid = p.b.address;
    REQUIRE(p.a.device->create_ah(p.a.pd, av, ah) == 0);
    REQUIRE(p.run());
  }

  SendWr datagram(uint64_t id, uint64_t addr, uint32_t len, uint32_t qkey) const {
    SendWr wr = send_wr(id, WrOpcode::send, addr, len, p.a_key);
    wr.ah = ah;
    wr.remote_qpn = p.qb;
    wr.remote_qkey = qkey;
    return wr;
  }

  Pair p;
  uint32_t ah = 0;
};

}  // namespace

TEST_CASE("ud: SEND and SEND with immediate land behind the GRH", "[transport][ud]") {
  UdPair u;
  Pair& p = u.p;
  const auto data = pattern(1000, 17);
  put(p.a.buffer(0), 0, data);
  std::fill(p.b.buffer(0).begin(), p.b.buffer(0).begin() + 16384, 0xee);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 2048, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base + 4096, 2048, p.b_key)) == 0);
  REQUIRE(p.post_a(u.datagram(1, a_base, 1000, 0x11111111)) == 0);
  SendWr imm = u.datagram(2, a_base, 300, 0x11111111);
  imm.opcode = WrOpcode::send_with_imm;
  imm.imm_data = 0xcafef00d;
  REQUIRE(p.post_a(imm) == 0);
  REQUIRE(p.run());

  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].status == WcStatus::success);
  CHECK(sc[0].opcode == WcOpcode::send);
  CHECK(sc[1].status == WcStatus::success);

  const auto frames = p.wire.delivered(p.a.node);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].is(wire::Opcode::ud_send_only));
  CHECK(frames[1].is(wire::Opcode::ud_send_only_imm));
  CHECK(frames[0].headers.deth.qkey == 0x11111111);
  CHECK(frames[0].headers.deth.src_qp == p.qa);
  CHECK(frames[0].headers.bth.dest_qp == p.qb);

  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 2);
  const uint32_t lengths[2] = {1000, 300};
  for (size_t i = 0; i < 2; ++i) {
    INFO("datagram " << i);
    CHECK(rc[i].wr_id == 7 + i);
    CHECK(rc[i].status == WcStatus::success);
    CHECK(rc[i].opcode == WcOpcode::recv);
    CHECK(rc[i].qp_num == p.qb);
    CHECK(rc[i].src_qp == p.qa);
    CHECK(rc[i].byte_len == grh + lengths[i]);
    CHECK((rc[i].wc_flags & wc_grh) != 0);
    CHECK(rc[i].sl == 0x0a);  // RoCE v2 (UDP) over IPv4
    const size_t at = i * 4096;
    // GRH area: 20 zero bytes, then the IPv4 header exactly as delivered.
    CHECK(slice(p.b.buffer(0), at, 20) == std::vector<uint8_t>(20, 0));
    CHECK(slice(p.b.buffer(0), at + 20, 20) == slice(frames[i].bytes, frames[i].l3_offset, 20));
    CHECK(p.b.buffer(0)[at + 20] == 0x45);  // version 4, IHL 5
    CHECK(slice(p.b.buffer(0), at + grh, lengths[i]) == slice(data, 0, lengths[i]));
    CHECK(p.b.buffer(0)[at + grh + lengths[i]] == 0xee);  // and not a byte more
  }
  CHECK((rc[0].wc_flags & wc_with_imm) == 0);
  CHECK((rc[1].wc_flags & wc_with_imm) != 0);
  CHECK(rc[1].imm_data == 0xcafef00d);
}

TEST_CASE("ud: a zero-length datagram delivers the GRH alone", "[transport][ud]") {
  UdPair u;
  Pair& p = u.p;
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 64, p.b_key)) == 0);
  REQUIRE(p.post_a(u.datagram(1, a_base, 0, 0x11111111)) == 0);
  REQUIRE(p.run());
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(rc[0].byte_len == grh);
  CHECK(rc[0].src_qp == p.qa);
}

TEST_CASE("ud: over IPv6 the GRH area is the IPv6 header and the packet type says so", "[transport][ud]") {
  sim::SimNetwork net(1);
  Host a{net, ip("fd00:75::1")}, b{net, ip("fd00:75::2")};
  const uint32_t a_key = a.add_buffer(4096, access_local_write, a_base);
  const uint32_t b_key = b.add_buffer(4096, access_local_write, b_base);
  const uint32_t qa = a.create_qp(QpType::ud, 16), qb = b.create_qp(QpType::ud, 16);
  connect(*a.device, qa, QpType::ud, b.address, qb, 0, 0);
  connect(*b.device, qb, QpType::ud, a.address, qa, 0, 0);
  AddressVector av;
  av.dgid = b.address;
  uint32_t ah = 0;
  REQUIRE(a.device->create_ah(a.pd, av, ah) == 0);
  REQUIRE(b.device->post_recv(qb, recv_wr(1, b_base, 4096, b_key)) == 0);
  SendWr wr = send_wr(2, WrOpcode::send, a_base, 100, a_key);
  wr.ah = ah;
  wr.remote_qpn = qb;
  wr.remote_qkey = 0x11111111;
  REQUIRE(a.device->post_send(qa, wr, net.now()) == 0);
  REQUIRE(net.run_until_idle(net.now() + 1'000'000'000));
  const auto rc = b.poll(b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(rc[0].byte_len == grh + 100);
  CHECK(rc[0].sl == 0x09);  // RoCE v2 (UDP) over IPv6
  CHECK(b.buffer(0)[0] >> 4 == 6);  // the IPv6 header fills the whole area
  CHECK(slice(b.buffer(0), 24, 16) == std::vector<uint8_t>(b.address.bytes.begin(), b.address.bytes.end()));
}

TEST_CASE("ud: a wrong Q_Key drops the datagram", "[transport][ud]") {
  UdPair u;
  Pair& p = u.p;
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 2048, p.b_key)) == 0);
  REQUIRE(p.post_a(u.datagram(1, a_base, 100, 0x11111112)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::success);  // the sender cannot know
  CHECK(p.b.device->counters().rx_bad_qkey == 1);
  CHECK(p.b.poll(p.b.recv_cq).empty());
  CHECK(p.state(p.b, p.qb) == QpState::rts);
  // The receive is still there for the next datagram.
  REQUIRE(p.post_a(u.datagram(2, a_base, 100, 0x11111111)) == 0);
  REQUIRE(p.run());
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 7);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(p.b.device->counters().rx_bad_qkey == 1);
}

TEST_CASE("ud: a datagram to a QP with no receive posted is lost and counted", "[transport][ud]") {
  UdPair u;
  Pair& p = u.p;
  REQUIRE(p.post_a(u.datagram(1, a_base, 100, 0x11111111)) == 0);
  REQUIRE(p.post_a(u.datagram(2, a_base, 100, 0x11111111)) == 0);
  REQUIRE(p.run());
  CHECK(p.a.poll(p.a.send_cq).size() == 2);  // the sender cannot know: no RNR on UD
  CHECK(p.b.device->counters().rx_no_receive == 2);
  CHECK(p.b.device->counters().rx_qp_not_ready == 0);  // the QP is ready; its queue is empty
  // Lost, not held: a receive posted afterwards gets only what is sent after it.
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 2048, p.b_key)) == 0);
  REQUIRE(p.run());
  CHECK(p.b.poll(p.b.recv_cq).empty());
  REQUIRE(p.post_a(u.datagram(3, a_base, 100, 0x11111111)) == 0);
  REQUIRE(p.run());
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 7);
  CHECK(p.b.device->counters().rx_no_receive == 2);
}

TEST_CASE("ud: a Q_Key with the high bit set in the WR means the QP's own", "[transport][ud]") {
  UdPair u(0x22222222);
  Pair& p = u.p;
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 2048, p.b_key)) == 0);
  REQUIRE(p.post_a(u.datagram(1, a_base, 100, 0x80000001)) == 0);
  REQUIRE(p.run());
  const auto frames = p.wire.delivered(p.a.node);
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].headers.deth.qkey == 0x22222222);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(p.b.device->counters().rx_bad_qkey == 0);
}

TEST_CASE("ud: the datagram size limit is the port's MTU", "[transport][ud]") {
  // A UD QP has no path MTU: the limit is the port's active MTU (rxe's get_mtu() does the same). A
  // longer datagram is not sent and does not fail either: IBTA C10-93.1.1, "the CI shall not emit any
  // packets for this message. Further, the CI shall not generate an error due to this condition", which
  // is what rxe does (it completes the WR successfully without sending anything).
  for (Mtu port : {Mtu::mtu_4096, Mtu::mtu_1024, Mtu::mtu_256}) {
    const uint32_t mtu = mtu_bytes(port);
    INFO("port MTU " << mtu);
    UdPair u;
    Pair& p = u.p;
    p.a.device->set_active_mtu(port);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 8192, p.b_key)) == 0);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base + 8192, 8192, p.b_key)) == 0);
    put(p.a.buffer(0), 0, pattern(mtu + 1, 1));
    REQUIRE(p.post_a(u.datagram(1, a_base, mtu, 0x11111111)) == 0);
    REQUIRE(p.post_a(u.datagram(2, a_base, mtu + 1, 0x11111111)) == 0);
    REQUIRE(p.post_a(u.datagram(3, a_base, 10, 0x11111111)) == 0);
    REQUIRE(p.run());
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(sc[i].wr_id == i + 1);
      CHECK(sc[i].status == WcStatus::success);
    }
    CHECK(p.state(p.a, p.qa) == QpState::rts);
    // Only the first and the third went out.
    const auto frames = p.wire.sent(p.a.node);
    REQUIRE(frames.size() == 2);
    CHECK(frames[0].payload.size() == mtu);
    CHECK(frames[1].payload.size() == 10);
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == 2);
    CHECK(rc[0].byte_len == grh + mtu);
    CHECK(slice(p.b.buffer(0), grh, mtu) == slice(p.a.buffer(0), 0, mtu));
    CHECK(rc[1].byte_len == grh + 10);
  }
}

TEST_CASE("ud: RDMA and atomics do not exist, and a WR needs an address handle", "[transport][ud]") {
  UdPair u;
  Pair& p = u.p;
  SendWr wr = u.datagram(1, a_base, 8, 0x11111111);
  for (WrOpcode op : {WrOpcode::rdma_write, WrOpcode::rdma_write_with_imm, WrOpcode::rdma_read,
                      WrOpcode::atomic_cmp_and_swp, WrOpcode::atomic_fetch_and_add, WrOpcode::send_with_inv}) {
    wr.opcode = op;
    CHECK(p.post_a(wr) == EINVAL);
  }
  wr.opcode = WrOpcode::send;
  wr.ah = u.ah + 100;
  CHECK(p.post_a(wr) == EINVAL);
  REQUIRE(p.run());
  CHECK(p.wire.frames.empty());
  CHECK(p.a.poll(p.a.send_cq).empty());
}
