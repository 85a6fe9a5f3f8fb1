// XRC: an initiator QP (xrc_send) on a sends to a target QP (xrc_recv) on b; each request names an XRC SRQ
// of the target's domain in its XRCETH, which takes a SEND and whose CQ and PD the message uses. On the
// wire it is RC's protocol with XRC's opcodes (RC's + 0xA0); what RC guarantees, XRC keeps, over loss too.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

// Pair's addresses and rights, with the XRC halves instead of Pair's RC QPs.
constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;
constexpr uint32_t all_access = Pair::all_access;

// b has one XRC domain with two XRC SRQs, each completing to its own CQ, and one target QP; a has one
// initiator QP connected to it. The target's PD is the SRQs' (b.pd), as the buffer's.
struct XrcPair {
  explicit XrcPair(uint64_t seed = 1) : net(seed) {
    a_key = a.add_buffer(1 << 20, all_access, a_base);
    b_key = b.add_buffer(1 << 20, all_access, b_base);
    REQUIRE(b.device->alloc_xrcd(xrcd) == 0);
    REQUIRE(b.device->create_cq(4096, cq2) == 0);
    REQUIRE(b.device->create_xrc_srq(b.pd, xrcd, b.recv_cq, 256, 4, 0, srq1) == 0);
    REQUIRE(b.device->create_xrc_srq(b.pd, xrcd, cq2, 256, 4, 0, srq2) == 0);
    QpInitAttr ini;
    ini.type = QpType::xrc_send;
    ini.pd = a.pd;
    ini.send_cq = a.send_cq;
    ini.cap = {1024, 0, 4, 0, 64};
    REQUIRE(a.device->create_qp(ini, qa) == 0);
    QpInitAttr tgt;
    tgt.type = QpType::xrc_recv;
    tgt.xrcd = xrcd;
    REQUIRE(b.device->create_qp(tgt, qb) == 0);
    bring_up(*a.device, qa, QpType::xrc_send, b.address, qb, 100, 900);
    bring_up(*b.device, qb, QpType::xrc_recv, a.address, qa, 900, 100);
  }

  // The masks ibv_xsrq_pingpong uses for each half.
  static void bring_up(Device& d, uint32_t qpn, QpType type, const wire::IpAddress& remote, uint32_t remote_qpn,
                       uint32_t sq_psn, uint32_t rq_psn) {
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    a.qp_access_flags = type == QpType::xrc_recv ? all_access : 0;
    REQUIRE(d.modify_qp(qpn, a, attr_state | attr_pkey_index | attr_port | attr_access_flags, 0) == 0);
    a.qp_state = QpState::rtr;
    a.path_mtu = Mtu::mtu_1024;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.ah_attr.dgid = remote;
    uint32_t mask = attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn;
    if (type == QpType::xrc_recv) mask |= attr_max_dest_rd_atomic | attr_min_rnr_timer;
    REQUIRE(d.modify_qp(qpn, a, mask, 0) == 0);
    a.qp_state = QpState::rts;
    a.timeout = 14;
    a.sq_psn = sq_psn;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    mask = attr_state | attr_timeout | attr_sq_psn;
    if (type == QpType::xrc_send) mask |= attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic;
    REQUIRE(d.modify_qp(qpn, a, mask, 0) == 0);
  }

  void run() { REQUIRE(net.run_until_idle(net.now() + 60'000'000'000ull)); }
  void post(SendWr wr, uint32_t srqn) {
    wr.remote_srqn = srqn;
    REQUIRE(a.device->post_send(qa, wr, net.now()) == 0);
  }

  sim::SimNetwork net;
  WireLog wire{net};
  Host a{net, ip("10.0.0.1")};
  Host b{net, ip("10.0.0.2")};
  uint32_t a_key = 0, b_key = 0, xrcd = 0, cq2 = 0, srq1 = 0, srq2 = 0, qa = 0, qb = 0;
};

}  // namespace

TEST_CASE("xrc: SENDs go to the SRQ each names and complete to that SRQ's CQ", "[transport][xrc]") {
  XrcPair x;
  for (uint64_t i = 0; i < 4; ++i) {
    REQUIRE(x.b.device->post_srq_recv(x.srq1, recv_wr(10 + i, b_base + i * 8192, 8192, x.b_key)) == 0);
    REQUIRE(x.b.device->post_srq_recv(x.srq2, recv_wr(20 + i, b_base + 0x80000 + i * 8192, 8192, x.b_key)) == 0);
  }
  const uint32_t sizes[] = {0, 100, 1024, 5000};
  for (uint64_t i = 0; i < 4; ++i) {
    put(x.a.buffer(0), i * 16384, pattern(sizes[i], uint8_t(i + 1)));
    put(x.a.buffer(0), i * 16384 + 8192, pattern(sizes[i], uint8_t(i + 101)));
    x.post(send_wr(i, WrOpcode::send, a_base + i * 16384, sizes[i], x.a_key), x.srq1);
    x.post(send_wr(100 + i, WrOpcode::send, a_base + i * 16384 + 8192, sizes[i], x.a_key), x.srq2);
  }
  x.run();
  const auto sent = x.a.poll(x.a.send_cq);
  REQUIRE(sent.size() == 8);
  for (const WorkCompletion& wc : sent) CHECK(wc.status == WcStatus::success);
  const auto c1 = x.b.poll(x.b.recv_cq), c2 = x.b.poll(x.cq2);
  REQUIRE(c1.size() == 4);
  REQUIRE(c2.size() == 4);
  for (uint64_t i = 0; i < 4; ++i) {
    INFO("message " << i);
    CHECK(c1[i].status == WcStatus::success);
    CHECK(c1[i].wr_id == 10 + i);
    CHECK(c1[i].opcode == WcOpcode::recv);
    CHECK(c1[i].byte_len == sizes[i]);
    CHECK(c1[i].qp_num == x.qb);  // the target QP, whichever SRQ took it
    CHECK(c2[i].wr_id == 20 + i);
    CHECK(c2[i].qp_num == x.qb);
    CHECK(slice(x.b.buffer(0), i * 8192, sizes[i]) == pattern(sizes[i], uint8_t(i + 1)));
    CHECK(slice(x.b.buffer(0), 0x80000 + i * 8192, sizes[i]) == pattern(sizes[i], uint8_t(i + 101)));
  }
  // On the wire: XRC opcodes, requests naming their SRQ, ACKs as XRC ACKNOWLEDGE.
  const auto requests = x.wire.sent(x.a.node);
  REQUIRE(!requests.empty());
  size_t to_srq2 = 0;
  for (const WireFrame& f : requests) {
    const wire::OpcodeInfo& info = wire::opcode_info(f.opcode());
    CHECK(info.transport == wire::Transport::xrc);
    CHECK(info.operation == wire::Operation::send);
    CHECK(info.has(wire::hdr_xrceth));
    CHECK((f.headers.xrceth.srq == x.srq1 || f.headers.xrceth.srq == x.srq2));
    to_srq2 += f.headers.xrceth.srq == x.srq2;
    CHECK(f.headers.bth.dest_qp == x.qb);
  }
  CHECK(to_srq2 == requests.size() / 2);
  for (const WireFrame& f : x.wire.sent(x.b.node)) CHECK(f.is(wire::Opcode::xrc_acknowledge));
}

TEST_CASE("xrc: RDMA WRITE, READ and atomics through a target use the named SRQ's PD", "[transport][xrc]") {
  XrcPair x;
  put(x.a.buffer(0), 0, pattern(3000, 7));
  put(x.b.buffer(0), 0x40000, pattern(2500, 9));
  put(x.b.buffer(0), 0x50000, {5, 0, 0, 0, 0, 0, 0, 0});
  x.post(rdma_wr(1, WrOpcode::rdma_write, a_base, 3000, x.a_key, b_base + 0x1000, x.b_key), x.srq1);
  x.post(rdma_wr(2, WrOpcode::rdma_read, a_base + 0x10000, 2500, x.a_key, b_base + 0x40000, x.b_key), x.srq2);
  SendWr add = rdma_wr(3, WrOpcode::atomic_fetch_and_add, a_base + 0x20000, 8, x.a_key, b_base + 0x50000, x.b_key);
  add.compare_add = 10;
  x.post(add, x.srq1);
  x.run();
  const auto sent = x.a.poll(x.a.send_cq);
  REQUIRE(sent.size() == 3);
  for (const WorkCompletion& wc : sent) CHECK(wc.status == WcStatus::success);
  CHECK(sent[1].opcode == WcOpcode::rdma_read);
  CHECK(slice(x.b.buffer(0), 0x1000, 3000) == pattern(3000, 7));
  CHECK(slice(x.a.buffer(0), 0x10000, 2500) == pattern(2500, 9));
  CHECK(x.a.buffer(0)[0x20000] == 5);   // the old value came back
  CHECK(x.b.buffer(0)[0x50000] == 15);  // and the add was done, once
  CHECK(x.b.poll(x.b.recv_cq).empty());
  // READ responses and the atomic ACK carry XRC opcodes, as RC's without an XRCETH.
  const auto responses = x.wire.sent(x.b.node);
  size_t read_responses = 0, atomic_acks = 0;
  for (const WireFrame& f : responses) {
    const wire::OpcodeInfo& info = wire::opcode_info(f.opcode());
    CHECK(info.transport == wire::Transport::xrc);
    CHECK_FALSE(info.has(wire::hdr_xrceth));
    read_responses += info.operation == wire::Operation::rdma_read_response;
    atomic_acks += f.is(wire::Opcode::xrc_atomic_acknowledge);
  }
  CHECK(read_responses == 3);  // 2500 bytes at MTU 1024
  CHECK(atomic_acks == 1);
}

TEST_CASE("xrc: a request naming an SRQ outside the target's domain is refused", "[transport][xrc]") {
  XrcPair x;
  uint32_t other_xrcd = 0, foreign = 0, plain = 0;
  REQUIRE(x.b.device->alloc_xrcd(other_xrcd) == 0);
  REQUIRE(x.b.device->create_xrc_srq(x.b.pd, other_xrcd, x.b.recv_cq, 16, 1, 0, foreign) == 0);
  REQUIRE(x.b.device->create_srq(x.b.pd, 16, 1, 0, plain) == 0);
  uint32_t bad_srq = 0;
  SECTION("another domain's XRC SRQ") { bad_srq = foreign; }
  SECTION("an SRQ that is not an XRC SRQ") { bad_srq = plain; }
  SECTION("no SRQ at all") { bad_srq = 0xabcd; }
  REQUIRE(x.b.device->post_srq_recv(bad_srq == 0xabcd ? x.srq1 : bad_srq, recv_wr(1, b_base, 64, x.b_key)) == 0);
  x.post(send_wr(7, WrOpcode::send, a_base, 64, x.a_key), bad_srq);
  x.run();
  const auto sent = x.a.poll(x.a.send_cq);
  REQUIRE(!sent.empty());
  CHECK(sent[0].wr_id == 7);
  CHECK(sent[0].status == WcStatus::rem_inv_req_err);
  CHECK(x.b.poll(x.b.recv_cq).empty());
  QpAttr attr;
  REQUIRE(x.b.device->query_qp(x.qb, attr) == 0);
  CHECK(attr.qp_state == QpState::err);
  // The NAK was an XRC one: invalid request.
  bool nak = false;
  for (const WireFrame& f : x.wire.sent(x.b.node)) {
    nak |= f.is(wire::Opcode::xrc_acknowledge) && f.headers.aeth.kind() == wire::AethKind::nak &&
           f.headers.aeth.low_bits() == uint8_t(wire::NakCode::invalid_request);
  }
  CHECK(nak);
}

TEST_CASE("xrc: each half has only its side of a QP", "[transport][xrc]") {
  XrcPair x;
  // A target has no send queue and no receive queue of its own; an initiator no receive queue.
  CHECK(x.b.device->post_send(x.qb, send_wr(1, WrOpcode::send, b_base, 8, x.b_key), 0) == EINVAL);
  CHECK(x.b.device->post_recv(x.qb, recv_wr(1, b_base, 8, x.b_key)) == EINVAL);
  CHECK(x.a.device->post_recv(x.qa, recv_wr(1, a_base, 8, x.a_key)) == EINVAL);
  // A target needs a domain; an XRC SRQ needs a domain and a CQ.
  QpInitAttr tgt;
  tgt.type = QpType::xrc_recv;
  tgt.xrcd = 999;
  uint32_t qpn = 0, srqn = 0;
  CHECK(x.b.device->create_qp(tgt, qpn) == EINVAL);
  CHECK(x.b.device->create_xrc_srq(x.b.pd, 999, x.b.recv_cq, 16, 1, 0, srqn) == EINVAL);
  CHECK(x.b.device->create_xrc_srq(x.b.pd, x.xrcd, 999, 16, 1, 0, srqn) == EINVAL);
  // What is in use stays: the domain while SRQs and targets are in it, a CQ while an XRC SRQ completes to it.
  CHECK(x.b.device->dealloc_xrcd(x.xrcd) == EBUSY);
  CHECK(x.b.device->destroy_cq(x.cq2) == EBUSY);
  CHECK(x.b.device->destroy_qp(x.qb) == 0);
  CHECK(x.b.device->destroy_srq(x.srq1) == 0);
  CHECK(x.b.device->dealloc_xrcd(x.xrcd) == EBUSY);
  CHECK(x.b.device->destroy_srq(x.srq2) == 0);
  CHECK(x.b.device->destroy_cq(x.cq2) == 0);
  CHECK(x.b.device->dealloc_xrcd(x.xrcd) == 0);
  CHECK(x.b.device->dealloc_xrcd(x.xrcd) == EINVAL);
}

TEST_CASE("xrc: each half's transitions are the kernel's, less the attributes it has no use for",
          "[transport][xrc]") {
  // An initiator's RTR takes no receive attributes, a target's RTS no sender's. Those an RC program passes
  // anyway (perftest -c XRC) are dropped unread, as Linux's uverbs drops them; anything else the
  // transition does not take is still refused.
  XrcPair x;
  Device& d = *x.a.device;
  // QP qpn to INIT, and the attributes of its RTR toward b.
  const auto init = [&](uint32_t qpn) {
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    REQUIRE(d.modify_qp(qpn, a, attr_state | attr_pkey_index | attr_port | attr_access_flags, 0) == 0);
    a.qp_state = QpState::rtr;
    a.path_mtu = Mtu::mtu_1024;
    a.ah_attr.dgid = x.b.address;
    return a;
  };
  const uint32_t rtr = attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn;

  QpInitAttr ini;
  ini.type = QpType::xrc_send;
  ini.pd = x.a.pd;
  ini.send_cq = x.a.send_cq;
  ini.cap = {16, 0, 1, 0, 0};
  uint32_t qpn = 0;
  REQUIRE(d.create_qp(ini, qpn) == 0);
  QpAttr a = init(qpn);
  CHECK(d.modify_qp(qpn, a, rtr | attr_qkey, 0) == EINVAL);
  a.max_dest_rd_atomic = 200;  // out of range: unread, or this would be EINVAL
  CHECK(d.modify_qp(qpn, a, rtr | attr_min_rnr_timer | attr_max_dest_rd_atomic, 0) == 0);

  uint32_t xrcd = 0, target_qpn = 0;
  REQUIRE(d.alloc_xrcd(xrcd) == 0);
  QpInitAttr target;
  target.type = QpType::xrc_recv;
  target.xrcd = xrcd;
  REQUIRE(d.create_qp(target, target_qpn) == 0);
  QpAttr t = init(target_qpn);
  t.max_dest_rd_atomic = 4;
  REQUIRE(d.modify_qp(target_qpn, t, rtr | attr_max_dest_rd_atomic | attr_min_rnr_timer, 0) == 0);
  t.qp_state = QpState::rts;
  t.timeout = 14;
  t.max_rd_atomic = 200;  // out of range: unread
  const uint32_t rts = attr_state | attr_timeout | attr_sq_psn;
  CHECK(d.modify_qp(target_qpn, t, rts | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic, 0) == 0);
}

TEST_CASE("xrc: every message arrives once and in order over a lossy, reordering link", "[transport][xrc]") {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    INFO("seed " << seed);
    XrcPair x(seed);
    sim::LinkProfile lossy;
    lossy.loss = 0.05;
    x.net.set_link_profile(x.a.node, x.b.node, lossy);
    x.net.set_link_profile(x.b.node, x.a.node, lossy);
    constexpr int n = 40;
    for (int i = 0; i < n; ++i) {
      const uint32_t srq = i % 2 ? x.srq2 : x.srq1;
      REQUIRE(x.b.device->post_srq_recv(srq, recv_wr(uint64_t(i), b_base + uint64_t(i) * 8192, 8192, x.b_key)) == 0);
    }
    for (int i = 0; i < n; ++i) {
      const uint32_t len = 1 + uint32_t(i) * 150;
      put(x.a.buffer(0), size_t(i) * 8192, pattern(len, uint8_t(i)));
      x.post(send_wr(uint64_t(i), WrOpcode::send, a_base + uint64_t(i) * 8192, len, x.a_key), i % 2 ? x.srq2 : x.srq1);
    }
    x.run();
    const auto sent = x.a.poll(x.a.send_cq);
    REQUIRE(sent.size() == n);
    for (const WorkCompletion& wc : sent) CHECK(wc.status == WcStatus::success);
    const auto c1 = x.b.poll(x.b.recv_cq), c2 = x.b.poll(x.cq2);
    REQUIRE(c1.size() == n / 2);
    REQUIRE(c2.size() == n / 2);
    for (int i = 0; i < n; ++i) {
      const WorkCompletion& wc = (i % 2 ? c2 : c1)[size_t(i / 2)];
      CHECK(wc.wr_id == uint64_t(i));
      CHECK(wc.byte_len == 1 + uint32_t(i) * 150);
      CHECK(slice(x.b.buffer(0), size_t(i) * 8192, wc.byte_len) == pattern(wc.byte_len, uint8_t(i)));
    }
    CHECK(x.a.device->counters().tx_retransmitted > 0);
  }
}
