// The QP state machine through Device::modify_qp: bring-up, what query_qp reports back, draining the send
// queue (SQD and its SQ_DRAINED event), and the two ways out: ERR (everything outstanding is flushed with
// IBV_WC_WR_FLUSH_ERR) and RESET (everything is dropped without a completion).
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;

int modify(Host& h, uint32_t qpn, QpState to, uint32_t mask = 0, QpAttr attr = {}) {
  attr.qp_state = to;
  return h.device->modify_qp(qpn, attr, attr_state | mask, 0);
}

size_t count_events(Host& h, EventType type, uint32_t object) {
  size_t n = 0;
  for (const AsyncEvent& e : h.device->take_events()) {
    CHECK(e.type == type);
    CHECK(e.object == object);
    n += e.type == type && e.object == object;
  }
  return n;
}

bool is_send_only(const WireFrame& f) { return f.is(wire::Opcode::rc_send_only); }

}  // namespace

TEST_CASE("qp state: RESET -> INIT -> RTR -> RTS, and query_qp reports what was set", "[transport][qp_state]") {
  sim::SimNetwork net(1);
  Host a(net, ip("10.0.0.1"));
  const uint32_t qp = a.create_qp(QpType::rc, 100);
  QpAttr got;
  REQUIRE(a.device->query_qp(qp, got) == 0);
  CHECK(got.qp_state == QpState::reset);
  CHECK(got.cap.max_send_wr == 100);
  CHECK(got.cap.max_recv_wr == 100);
  CHECK(got.cap.max_send_sge == 16);
  CHECK(got.cap.max_inline_data == 128);

  // Steps out of order are refused, and so are missing required attributes.
  CHECK(modify(a, qp, QpState::rtr) == EINVAL);
  CHECK(modify(a, qp, QpState::rts) == EINVAL);
  CHECK(modify(a, qp, QpState::init, attr_pkey_index | attr_port) == EINVAL);  // no access flags

  QpAttr set;
  set.pkey_index = 0;
  set.port_num = 1;
  set.qp_access_flags = access_remote_write | access_remote_read;
  REQUIRE(modify(a, qp, QpState::init, attr_pkey_index | attr_port | attr_access_flags, set) == 0);
  REQUIRE(a.device->query_qp(qp, got) == 0);
  CHECK(got.qp_state == QpState::init);
  CHECK(got.cur_qp_state == QpState::init);
  CHECK(got.qp_access_flags == (access_remote_write | access_remote_read));
  CHECK(got.port_num == 1);
  CHECK(modify(a, qp, QpState::rts) == EINVAL);

  set.path_mtu = Mtu::mtu_2048;
  set.dest_qp_num = 0x1234;
  set.rq_psn = 0xabcdef;
  set.max_dest_rd_atomic = 9;
  set.min_rnr_timer = 12;
  set.ah_attr.dgid = ip("10.0.0.9");
  set.ah_attr.hop_limit = 17;
  set.ah_attr.traffic_class = 0x68;
  set.ah_attr.flow_label = 0x12345;
  const uint32_t rtr_mask =
      attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic | attr_min_rnr_timer;
  CHECK(modify(a, qp, QpState::rtr, rtr_mask & ~attr_rq_psn, set) == EINVAL);
  REQUIRE(modify(a, qp, QpState::rtr, rtr_mask, set) == 0);
  REQUIRE(a.device->query_qp(qp, got) == 0);
  CHECK(got.qp_state == QpState::rtr);
  CHECK(got.path_mtu == Mtu::mtu_2048);
  CHECK(got.dest_qp_num == 0x1234);
  CHECK(got.rq_psn == 0xabcdef);
  CHECK(got.max_dest_rd_atomic == 9);
  CHECK(got.min_rnr_timer == 12);
  CHECK(got.ah_attr.dgid == ip("10.0.0.9"));
  CHECK(got.ah_attr.hop_limit == 17);
  CHECK(got.ah_attr.traffic_class == 0x68);
  CHECK(got.ah_attr.flow_label == 0x12345);

  set.sq_psn = 0x123456;
  set.timeout = 17;
  set.retry_cnt = 5;
  set.rnr_retry = 3;
  set.max_rd_atomic = 7;
  REQUIRE(modify(a, qp, QpState::rts,
                 attr_sq_psn | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic, set) == 0);
  REQUIRE(a.device->query_qp(qp, got) == 0);
  CHECK(got.qp_state == QpState::rts);
  CHECK(got.sq_psn == 0x123456);
  CHECK(got.rq_psn == 0xabcdef);
  CHECK(got.timeout == 17);
  CHECK(got.retry_cnt == 5);
  CHECK(got.rnr_retry == 3);
  CHECK(got.max_rd_atomic == 7);
  CHECK(got.max_dest_rd_atomic == 9);
  CHECK(got.min_rnr_timer == 12);
  CHECK(got.path_mtu == Mtu::mtu_2048);
  CHECK(got.dest_qp_num == 0x1234);
  CHECK(got.qp_access_flags == (access_remote_write | access_remote_read));

  // RTS -> RTS may change what the table allows (access flags, min_rnr_timer), nothing else.
  set.qp_access_flags = access_remote_atomic;
  set.min_rnr_timer = 3;
  REQUIRE(modify(a, qp, QpState::rts, attr_access_flags | attr_min_rnr_timer, set) == 0);
  CHECK(modify(a, qp, QpState::rts, attr_path_mtu, set) == EINVAL);
  REQUIRE(a.device->query_qp(qp, got) == 0);
  CHECK(got.qp_access_flags == access_remote_atomic);
  CHECK(got.min_rnr_timer == 3);
  CHECK(got.path_mtu == Mtu::mtu_2048);
}

// ---------------------------------------------------------------------------------------------------------
// SQD

TEST_CASE("qp state: SQD lets the messages in flight finish, raises SQ_DRAINED once, and holds the rest",
          "[transport][qp_state]") {
  PairConfig c;
  c.max_wr = 1024;
  Pair p(c);
  sim::LinkProfile link;
  link.delay = 10'000;
  p.net.set_default_profile(link);
  constexpr uint64_t n = 300;
  for (uint64_t i = 0; i <= n; ++i) REQUIRE(p.b.device->post_recv(p.qb, recv_wr(i, b_base, 64, p.b_key)) == 0);
  for (uint64_t i = 0; i < n; ++i) REQUIRE(p.post_a(send_wr(i, WrOpcode::send, a_base, 16, p.a_key)) == 0);
  p.run_for(1000);  // the first window (128 PSNs) is out, no ACK back yet
  const size_t in_flight = p.wire.sent(p.a.node, is_send_only).size();
  REQUIRE(in_flight == 128);

  bool notify = true;
  SECTION("with en_sqd_async_notify") { notify = true; }
  SECTION("without") { notify = false; }
  QpAttr attr;
  attr.en_sqd_async_notify = notify ? 1 : 0;
  REQUIRE(modify(p.a, p.qa, QpState::sqd, attr_en_sqd_async_notify, attr) == 0);
  CHECK(p.state(p.a, p.qa) == QpState::sqd);
  CHECK(p.query(p.a, p.qa).sq_draining == 1);
  CHECK(p.a.device->take_events().empty());  // not drained yet: 128 are unacknowledged
  // WRs may be posted in SQD; they wait.
  REQUIRE(p.post_a(send_wr(n, WrOpcode::send, a_base, 16, p.a_key)) == 0);
  REQUIRE(p.run());
  CHECK(count_events(p.a, EventType::sq_drained, p.qa) == (notify ? 1u : 0u));
  CHECK(p.query(p.a, p.qa).sq_draining == 0);
  CHECK(p.state(p.a, p.qa) == QpState::sqd);
  CHECK(p.wire.sent(p.a.node, is_send_only).size() == in_flight);  // nothing new was started
  CHECK(p.a.poll(p.a.send_cq).size() == in_flight);
  CHECK(p.b.poll(p.b.recv_cq).size() == in_flight);

  // Back to RTS: the rest goes out; the drained event does not repeat.
  REQUIRE(modify(p.a, p.qa, QpState::rts) == 0);
  REQUIRE(p.run());
  CHECK(p.a.poll(p.a.send_cq).size() == n + 1 - in_flight);
  CHECK(p.b.poll(p.b.recv_cq).size() == n + 1 - in_flight);
  CHECK(p.a.device->take_events().empty());
}

TEST_CASE("qp state: SQD finishes a message it has started", "[transport][qp_state]") {
  Pair p;
  sim::LinkProfile link;
  link.delay = 10'000;
  p.net.set_default_profile(link);
  constexpr uint32_t length = 300 * 1024;  // 300 packets: more than one window
  put(p.a.buffer(0), 0, pattern(length, 5));
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, length, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base, length, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, length, p.a_key)) == 0);
  REQUIRE(p.post_a(send_wr(2, WrOpcode::send, a_base, 100, p.a_key)) == 0);
  p.run_for(1000);
  REQUIRE(p.wire.sent(p.a.node).size() == 128);
  QpAttr attr;
  attr.en_sqd_async_notify = 1;
  REQUIRE(modify(p.a, p.qa, QpState::sqd, attr_en_sqd_async_notify, attr) == 0);
  REQUIRE(p.run());
  CHECK(count_events(p.a, EventType::sq_drained, p.qa) == 1);
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 1);
  CHECK(sc[0].status == WcStatus::success);
  CHECK(p.wire.sent(p.a.node, [](const WireFrame& f) { return f.opcode() <= 0x04; }).size() == 300);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].byte_len == length);
  CHECK(slice(p.b.buffer(0), 0, length) == slice(p.a.buffer(0), 0, length));
  REQUIRE(modify(p.a, p.qa, QpState::rts) == 0);
  REQUIRE(p.run());
  CHECK(p.a.poll(p.a.send_cq).size() == 1);
}

TEST_CASE("qp state: SQD still retransmits everything it had sent when ACKs are lost", "[transport][qp_state]") {
  // Ten SENDs are out when the QP enters SQD, and their ACKs are lost. The timeout rewinds the requester
  // to the first one; every WQE it had started must be sent again (they are part of what drains), or b's
  // answer (an ACK for the last PSN it took, C9-105) is beyond what a has resent, and the QP fails once the
  // retries run out.
  Pair p;
  sim::LinkProfile link;
  link.delay = 10'000;
  p.net.set_default_profile(link);
  for (uint64_t i = 0; i < 11; ++i) REQUIRE(p.b.device->post_recv(p.qb, recv_wr(i, b_base, 64, p.b_key)) == 0);
  for (uint64_t i = 0; i < 10; ++i) REQUIRE(p.post_a(send_wr(i, WrOpcode::send, a_base, 16, p.a_key)) == 0);
  p.run_for(1000);
  REQUIRE(p.wire.sent(p.a.node, is_send_only).size() == 10);
  sim::LinkProfile dead = link;
  dead.blackhole = true;
  p.net.set_link_profile(p.b.node, p.a.node, dead);
  QpAttr attr;
  attr.en_sqd_async_notify = 1;
  REQUIRE(modify(p.a, p.qa, QpState::sqd, attr_en_sqd_async_notify, attr) == 0);
  REQUIRE(p.post_a(send_wr(10, WrOpcode::send, a_base, 16, p.a_key)) == 0);  // waits for RTS
  p.run_for(30'000'000);  // less than one ACK timeout (67 ms): every ACK so far is lost
  p.net.set_link_profile(p.b.node, p.a.node, link);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 10);
  for (uint64_t i = 0; i < 10; ++i) {
    CHECK(sc[i].wr_id == i);
    CHECK(sc[i].status == WcStatus::success);
  }
  CHECK(p.a.device->counters().timeouts == 1);
  CHECK(count_events(p.a, EventType::sq_drained, p.qa) == 1);
  CHECK(p.state(p.a, p.qa) == QpState::sqd);
  CHECK(p.b.poll(p.b.recv_cq).size() == 10);  // each message once
  // WR 10 was never started: it went out only after the return to RTS.
  CHECK(p.wire.sent(p.a.node, [&](const WireFrame& f) {
          return is_send_only(f) && f.psn() == p.config.a_psn + 10;
        }).empty());
  REQUIRE(modify(p.a, p.qa, QpState::rts) == 0);
  REQUIRE(p.run());
  const auto last = p.a.poll(p.a.send_cq);
  REQUIRE(last.size() == 1);
  CHECK(last[0].wr_id == 10);
  CHECK(last[0].status == WcStatus::success);
}

TEST_CASE("qp state: SQD with nothing in flight is drained at once", "[transport][qp_state]") {
  Pair p;
  REQUIRE(p.run());
  QpAttr attr;
  attr.en_sqd_async_notify = 1;
  SECTION("empty send queue") {
    REQUIRE(modify(p.a, p.qa, QpState::sqd, attr_en_sqd_async_notify, attr) == 0);
    CHECK(count_events(p.a, EventType::sq_drained, p.qa) == 1);
  }
  SECTION("WRs posted but none started") {
    // Posted in SQD (allowed), nothing started: drained is about WRs in progress, not posted ones.
    REQUIRE(modify(p.a, p.qa, QpState::sqd, attr_en_sqd_async_notify, attr) == 0);
    CHECK(count_events(p.a, EventType::sq_drained, p.qa) == 1);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key)) == 0);
    REQUIRE(p.run());
    CHECK(p.wire.frames.empty());
    CHECK(p.a.device->take_events().empty());
    CHECK(p.query(p.a, p.qa).sq_draining == 0);
  }
  CHECK(p.query(p.a, p.qa).sq_draining == 0);
  CHECK(p.state(p.a, p.qa) == QpState::sqd);
}

// ---------------------------------------------------------------------------------------------------------
// ERR and RESET

TEST_CASE("qp state: moving to ERR flushes every posted WR", "[transport][qp_state]") {
  Pair p;
  sim::LinkProfile link;
  link.delay = 10'000;
  p.net.set_default_profile(link);
  for (uint64_t i = 0; i < 5; ++i) REQUIRE(p.a.device->post_recv(p.qa, recv_wr(100 + i, a_base, 64, p.a_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(200, b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key)) == 0);
  REQUIRE(p.post_a(send_wr(2, WrOpcode::send, a_base, 100, p.a_key, false)) == 0);
  p.run_for(1000);  // sent, not yet acknowledged
  REQUIRE(modify(p.a, p.qa, QpState::err) == 0);
  CHECK(p.state(p.a, p.qa) == QpState::err);
  CHECK(p.a.device->take_events().empty());  // the application asked for it: no event
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].wr_id == 1);
  CHECK(sc[1].wr_id == 2);
  for (const auto& wc : sc) {
    CHECK(wc.status == WcStatus::wr_flush_err);
    CHECK(wc.qp_num == p.qa);
  }
  const auto rc = p.a.poll(p.a.recv_cq);
  REQUIRE(rc.size() == 5);
  for (size_t i = 0; i < rc.size(); ++i) {
    CHECK(rc[i].wr_id == 100 + i);
    CHECK(rc[i].status == WcStatus::wr_flush_err);
    CHECK(rc[i].qp_num == p.qa);
  }
  // The ACKs that come back later change nothing.
  REQUIRE(p.run());
  CHECK(p.a.poll(p.a.send_cq).empty());
  CHECK(p.a.poll(p.a.recv_cq).empty());
  CHECK(p.a.device->next_deadline() == never);
}

TEST_CASE("qp state: moving to RESET drops everything without a completion; the QP can start over",
          "[transport][qp_state]") {
  Pair p;
  sim::LinkProfile link;
  link.delay = 10'000;
  p.net.set_default_profile(link);
  for (uint64_t i = 0; i < 3; ++i) REQUIRE(p.a.device->post_recv(p.qa, recv_wr(100 + i, a_base, 64, p.a_key)) == 0);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key)) == 0);  // b has no receive: RNR
  REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_read, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
  p.run_for(1000);
  REQUIRE(modify(p.a, p.qa, QpState::reset) == 0);
  CHECK(p.state(p.a, p.qa) == QpState::reset);
  REQUIRE(p.run());
  CHECK(p.a.poll(p.a.send_cq).empty());
  CHECK(p.a.poll(p.a.recv_cq).empty());
  CHECK(p.a.device->take_events().empty());
  CHECK(p.a.device->next_deadline() == never);
  CHECK(p.post_a(send_wr(3, WrOpcode::send, a_base, 100, p.a_key)) == EINVAL);

  // Both ends start over with new PSNs; only new work happens.
  REQUIRE(modify(p.b, p.qb, QpState::reset) == 0);
  connect(p.a, p.qa, QpType::rc, p.b.address, p.qb, 77, 99);
  connect(p.b, p.qb, QpType::rc, p.a.address, p.qa, 99, 77);
  CHECK(p.query(p.a, p.qa).sq_psn == 77);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(4, WrOpcode::send, a_base, 100, p.a_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 4);
  CHECK(sc[0].status == WcStatus::success);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 7);
  CHECK(p.a.poll(p.a.recv_cq).empty());  // the receives posted before the reset are gone
}

// Both QPs of `p`, in RESET, connected again with new PSNs: a WRITE then completes alone, in success.
static void reconnect_and_write(Pair& p, uint64_t wr_id) {
  connect(p.a, p.qa, QpType::rc, p.b.address, p.qb, 10, 20);
  connect(p.b, p.qb, QpType::rc, p.a.address, p.qa, 20, 10);
  REQUIRE(p.post_a(rdma_wr(wr_id, WrOpcode::rdma_write, a_base, 8, p.a_key, b_base, p.b_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == wr_id);
  CHECK(sc[0].status == WcStatus::success);
}

TEST_CASE("qp state: RESET takes the QP's unpolled completions out of its CQs, and only its own",
          "[transport][qp_state]") {
  // A second QP on a's CQs, with a completion of its own waiting: its receive, flushed.
  Pair p;
  const uint32_t other = p.a.create_qp(QpType::rc);
  connect(p.a, other, QpType::rc, p.b.address, 0xabcd, 1, 1);
  REQUIRE(p.a.device->post_recv(other, recv_wr(900, a_base, 64, p.a_key)) == 0);
  REQUIRE(modify(p.a, other, QpState::err) == 0);
  // a's QP fails (a WRITE with a bad rkey) with three receives posted: four completions wait unpolled.
  for (uint64_t i = 0; i < 3; ++i) REQUIRE(p.a.device->post_recv(p.qa, recv_wr(100 + i, a_base, 64, p.a_key)) == 0);
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 8, p.a_key, b_base, p.b_key ^ 0x40)) == 0);
  REQUIRE(p.run());
  REQUIRE(p.state(p.a, p.qa) == QpState::err);
  REQUIRE(modify(p.a, p.qa, QpState::reset) == 0);
  CHECK(p.a.poll(p.a.send_cq).empty());
  const auto left = p.a.poll(p.a.recv_cq);  // the other QP's flush alone, as mlx5's CQ clean leaves it
  REQUIRE(left.size() == 1);
  CHECK(left[0].qp_num == other);
  CHECK(left[0].wr_id == 900);
  // Brought back, a's QP meets only what it does from now on.
  p.b.device->take_events();
  REQUIRE(modify(p.b, p.qb, QpState::reset) == 0);
  reconnect_and_write(p, 2);
}

TEST_CASE("qp state: a receive queue reports the requests it gave up, once per QP per call",
          "[transport][qp_state]") {
  // uroced frees receive ring slots from this (emulator/engine/queue_service.cpp, publish_recv_room).
  Pair p;
  std::vector<uint32_t> retired;
  for (uint64_t i = 0; i < 3; ++i) REQUIRE(p.b.device->post_recv(p.qb, recv_wr(i, b_base, 64, p.b_key)) == 0);
  CHECK(p.b.device->receive_queue_size(p.qb) == 3);
  p.b.device->take_retired_receives(retired);
  CHECK(retired.empty());  // posting retires nothing
  for (uint64_t i = 0; i < 2; ++i) REQUIRE(p.post_a(send_wr(10 + i, WrOpcode::send, a_base, 16, p.a_key)) == 0);
  REQUIRE(p.run());
  CHECK(p.b.device->receive_queue_size(p.qb) == 1);
  p.b.device->take_retired_receives(retired);
  CHECK(retired == std::vector<uint32_t>{p.qb});  // two taken, one report
  p.b.device->take_retired_receives(retired);
  CHECK(retired.empty());
  REQUIRE(modify(p.b, p.qb, QpState::err) == 0);  // the last one is flushed
  CHECK(p.b.device->receive_queue_size(p.qb) == 0);
  p.b.device->take_retired_receives(retired);
  CHECK(retired == std::vector<uint32_t>{p.qb});
}

TEST_CASE("qp state: ERR -> RESET -> back to RTS", "[transport][qp_state]") {
  Pair p;
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 8, p.a_key, b_base, p.b_key ^ 0x40)) == 0);
  REQUIRE(p.run());
  REQUIRE(p.state(p.a, p.qa) == QpState::err);
  REQUIRE(p.state(p.b, p.qb) == QpState::err);
  p.a.poll(p.a.send_cq);
  p.b.device->take_events();
  // ERR only leaves for RESET.
  CHECK(modify(p.a, p.qa, QpState::rts) == EINVAL);
  REQUIRE(modify(p.a, p.qa, QpState::reset) == 0);
  REQUIRE(modify(p.b, p.qb, QpState::reset) == 0);
  reconnect_and_write(p, 2);
}
