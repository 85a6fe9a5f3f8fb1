// RC flow control and loss recovery at the edges: receiver-not-ready NAKs (the responder has no receive
// posted) with their timer and retry budget, and the local ACK timeout with its retry budget when the
// peer is gone. Expected values are the IBTA's (retry_cnt and rnr_retry are 3-bit counters, rnr_retry 7
// means forever, timeout 0 means no timeout).
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;
constexpr Nanos ms = 1'000'000;

bool is_rnr_nak(const WireFrame& f) {
  return f.is(wire::Opcode::rc_acknowledge) && f.headers.aeth.kind() == wire::AethKind::rnr_nak;
}
bool is_send_only(const WireFrame& f) { return f.is(wire::Opcode::rc_send_only); }

// Local ACK timeout of a QP with attribute `timeout`: 4.096 us * 2^timeout.
constexpr Nanos ack_timeout(uint8_t timeout) { return Nanos(4096) << timeout; }

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// RNR

TEST_CASE("rnr: a SEND without a receive is NAKed until one is posted, then completes once",
          "[transport][rc][rnr]") {
  PairConfig c;
  c.b.min_rnr_timer = 4;  // 0.04 ms
  c.a.rnr_retry = 7;
  Pair p(c);
  sim::LinkProfile link;
  link.delay = 2000;
  p.net.set_default_profile(link);
  const auto data = pattern(3000, 9);
  put(p.a.buffer(0), 0, data);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 3000, p.a_key)) == 0);
  p.run_for(5 * ms);

  const uint64_t naks_sent = p.b.device->counters().rnr_naks_sent;
  CHECK(naks_sent > 10);
  CHECK(p.a.device->counters().rnr_naks_received == naks_sent);  // a clean network loses none
  CHECK(p.a.device->counters().timeouts == 0);
  CHECK(p.a.poll(p.a.send_cq).empty());
  CHECK(p.b.poll(p.b.recv_cq).empty());
  CHECK(p.state(p.a, p.qa) == QpState::rts);
  CHECK(p.state(p.b, p.qb) == QpState::rts);
  // Every RNR NAK names the first packet of the SEND and carries b's timer.
  const auto naks = p.wire.sent(p.b.node, is_rnr_nak);
  REQUIRE(naks.size() == naks_sent);
  for (const WireFrame& f : naks) {
    CHECK(f.psn() == p.config.a_psn);
    CHECK(f.headers.aeth.low_bits() == 4);
  }

  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 1);
  CHECK(sc[0].status == WcStatus::success);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 7);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(rc[0].byte_len == 3000);
  CHECK(slice(p.b.buffer(0), 0, 3000) == data);
  // No NAK after the receive was posted, and nothing else completes later.
  CHECK(p.b.device->counters().rnr_naks_sent <= naks_sent + 1);
  p.run_for(1000 * ms);
  CHECK(p.a.poll(p.a.send_cq).empty());
  CHECK(p.b.poll(p.b.recv_cq).empty());
  CHECK(p.state(p.a, p.qa) == QpState::rts);
}

TEST_CASE("rnr: WRITE with immediate also needs a receive", "[transport][rc][rnr]") {
  PairConfig c;
  c.b.min_rnr_timer = 1;
  Pair p(c);
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write_with_imm, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
  p.run_for(1 * ms);
  CHECK(p.b.device->counters().rnr_naks_sent > 0);
  CHECK(p.a.poll(p.a.send_cq).empty());
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 0, p.b_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::success);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].opcode == WcOpcode::recv_rdma_with_imm);
  CHECK(rc[0].byte_len == 100);
}

TEST_CASE("rnr: rnr_retry bounds the number of retries", "[transport][rc][rnr]") {
  for (uint8_t rnr_retry : {0, 1, 3, 6}) {
    INFO("rnr_retry " << int(rnr_retry));
    PairConfig c;
    c.a.rnr_retry = rnr_retry;
    c.b.min_rnr_timer = 1;
    Pair p(c);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key)) == 0);
    REQUIRE(p.post_a(send_wr(2, WrOpcode::send, a_base, 100, p.a_key, false)) == 0);
    REQUIRE(p.run());
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 2);
    CHECK(sc[0].wr_id == 1);
    CHECK(sc[0].status == WcStatus::rnr_retry_exc_err);
    CHECK(sc[1].wr_id == 2);
    CHECK(sc[1].status == WcStatus::wr_flush_err);
    CHECK(p.state(p.a, p.qa) == QpState::err);
    CHECK(p.a.device->take_events().empty());  // the completion reports it
    // The first SEND went out once plus once per retry; an RNR NAK is no error for the responder.
    CHECK(p.wire.sent(p.a.node, [&](const WireFrame& f) { return f.psn() == p.config.a_psn; }).size() ==
          1u + rnr_retry);
    CHECK(p.b.device->counters().rnr_naks_sent == 1u + rnr_retry);
    CHECK(p.state(p.b, p.qb) == QpState::rts);
    CHECK(p.b.device->take_events().empty());
  }
}

TEST_CASE("rnr: rnr_retry 7 retries forever", "[transport][rc][rnr]") {
  PairConfig c;
  c.a.rnr_retry = 7;
  c.b.min_rnr_timer = 10;  // 0.32 ms: over 30,000 retries in 10 s
  Pair p(c);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key)) == 0);
  p.run_for(10'000 * ms);
  CHECK(p.a.poll(p.a.send_cq).empty());
  CHECK(p.state(p.a, p.qa) == QpState::rts);
  CHECK(p.a.device->counters().rnr_naks_received > 30'000);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::success);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(rc[0].byte_len == 100);
}

TEST_CASE("rnr: the requester waits the NAK's timer before resending", "[transport][rc][rnr]") {
  struct Case {
    uint8_t code;
    Nanos wait;
  };
  for (const Case t : {Case{14, 1'280'000}, Case{1, 10'000}, Case{18, 5'120'000}, Case{0, 655'360'000}}) {
    INFO("min_rnr_timer " << int(t.code));
    PairConfig c;
    c.a.rnr_retry = 2;
    c.b.min_rnr_timer = t.code;
    Pair p(c);
    sim::LinkProfile link;
    link.delay = 1000;
    p.net.set_default_profile(link);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key)) == 0);
    REQUIRE(p.run());
    const auto naks = p.wire.delivered(p.b.node, is_rnr_nak);
    const auto sends = p.wire.sent(p.a.node, is_send_only);
    REQUIRE(naks.size() == 3);
    REQUIRE(sends.size() == 3);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(naks[i].headers.aeth.low_bits() == t.code);
      // The retry leaves no sooner than the timer after the NAK arrived (and without dawdling).
      CHECK(sends[i + 1].time >= naks[i].time + t.wait);
      CHECK(sends[i + 1].time <= naks[i].time + t.wait + 1000);
    }
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 1);
    CHECK(sc[0].status == WcStatus::rnr_retry_exc_err);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Local ACK timeout and retry_cnt: a peer that is gone.

namespace {

struct DeadPeer {
  explicit DeadPeer(uint8_t timeout, uint8_t retry_cnt) : p([&] {
      PairConfig c;
      c.a.timeout = timeout;
      c.a.retry_cnt = retry_cnt;
      return c;
    }()) {
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
    p.net.set_node_blackholed(p.b.node, true);
    start = p.net.now();
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, 100, p.a_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, a_base, 3000, p.a_key, b_base, p.b_key, false)) == 0);
    REQUIRE(p.post_a(rdma_wr(3, WrOpcode::rdma_read, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
  }
  // Transmissions of the first packet (the SEND).
  size_t first_packet_sent() const {
    return p.wire.sent(p.a.node, [&](const WireFrame& f) { return f.psn() == p.config.a_psn; }).size();
  }

  Pair p;
  Nanos start = 0;
};

}  // namespace

TEST_CASE("retry: a dead peer fails the oldest WR with RETRY_EXC_ERR after retry_cnt retries",
          "[transport][rc][retry]") {
  for (uint8_t retry_cnt : {0, 1, 3, 7}) {
    INFO("retry_cnt " << int(retry_cnt));
    DeadPeer d(10, retry_cnt);  // 4.194 ms
    Pair& p = d.p;
    REQUIRE(p.net.run_while([&] { return p.state(p.a, p.qa) != QpState::err; }, 10'000 * ms));
    const Nanos elapsed = p.net.now() - d.start;
    const Nanos t = ack_timeout(10);
    // One timeout per transmission: the original and retry_cnt retries (retry_cnt 7 is seven retries,
    // as the specification says, not rxe's "forever").
    CHECK(elapsed * 2 >= t * (1 + retry_cnt) * 2 - t);  // at least (n - 0.5) timeouts
    CHECK(elapsed <= t * (1 + retry_cnt) + t);           // at most n + 1
    CHECK(d.first_packet_sent() == 1u + retry_cnt);
    CHECK(p.a.device->counters().timeouts == 1u + retry_cnt);
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 3);
    CHECK(sc[0].wr_id == 1);
    CHECK(sc[0].status == WcStatus::retry_exc_err);
    CHECK(sc[1].wr_id == 2);  // unsignalled, but flushed
    CHECK(sc[1].status == WcStatus::wr_flush_err);
    CHECK(sc[2].wr_id == 3);
    CHECK(sc[2].status == WcStatus::wr_flush_err);
    CHECK(p.a.device->take_events().empty());  // the completion reports it
    // Nothing more happens, ever.
    REQUIRE(p.run());
    CHECK(d.first_packet_sent() == 1u + retry_cnt);
    CHECK(p.a.poll(p.a.send_cq).empty());
    // b, cut off, never knew.
    CHECK(p.state(p.b, p.qb) == QpState::rts);
    CHECK(p.b.poll(p.b.recv_cq).empty());
  }
}

TEST_CASE("retry: with retry_cnt 3 and timeout 10 the error comes after 4 timeouts of 4.194 ms",
          "[transport][rc][retry]") {
  DeadPeer d(10, 3);
  Pair& p = d.p;
  REQUIRE(p.net.run_while([&] { return p.state(p.a, p.qa) != QpState::err; }, 10'000 * ms));
  const double timeouts = double(p.net.now() - d.start) / 4'194'304.0;
  CHECK(timeouts >= 3.5);
  CHECK(timeouts <= 5.0);
  // The retransmissions are a timeout apart.
  const auto sends = d.p.wire.sent(p.a.node, [&](const WireFrame& f) { return f.psn() == p.config.a_psn; });
  REQUIRE(sends.size() == 4);
  for (size_t i = 1; i < sends.size(); ++i) CHECK(sends[i].time - sends[i - 1].time == ack_timeout(10));
  CHECK(p.net.link_stats(p.a.node, p.b.node).dropped_blackhole == p.net.link_stats(p.a.node, p.b.node).frames_sent);
}

TEST_CASE("retry: timeout 0 never times out", "[transport][rc][retry]") {
  DeadPeer d(0, 3);
  Pair& p = d.p;
  p.run_for(100'000 * ms);
  CHECK(d.first_packet_sent() == 1);
  CHECK(p.a.device->counters().timeouts == 0);
  CHECK(p.a.poll(p.a.send_cq).empty());
  CHECK(p.state(p.a, p.qa) == QpState::rts);
  CHECK(p.a.device->next_deadline() == never);
  // When the peer comes back, nothing resends by itself either; the QP is simply waiting.
  p.net.set_node_blackholed(p.b.node, false);
  p.run_for(1000 * ms);
  CHECK(d.first_packet_sent() == 1);
  CHECK(p.a.poll(p.a.send_cq).empty());
}

TEST_CASE("retry: a peer that comes back before the budget is spent gets everything, once",
          "[transport][rc][retry]") {
  DeadPeer d(10, 3);
  Pair& p = d.p;
  p.run_for(ack_timeout(10) * 2 + ack_timeout(10) / 2);  // two timeouts, half way to the third
  p.net.set_node_blackholed(p.b.node, false);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 2);  // WR 2 is unsignalled
  CHECK(sc[0].wr_id == 1);
  CHECK(sc[0].status == WcStatus::success);
  CHECK(sc[1].wr_id == 3);
  CHECK(sc[1].status == WcStatus::success);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(d.first_packet_sent() == 4);  // at 0, 1, 2 and (b back) 3 timeouts
  CHECK(p.state(p.a, p.qa) == QpState::rts);
}
