// Device::take_low_receive_queues: a QP is reported once each time its receive queue (its own or its SRQ)
// falls to half of the most it held since the last report, and only for a queue that held at least
// low_receive_queue_min_peak. uroced yields its core on a report, so that a receiver waiting for that core
// reposts before its senders are sent RNR NAKs: a report per message would cost every ping-pong a system
// call, a missing one brings the RNR storms back.
#include <vector>

#include "tests/unit/transport/transport_fixture.hpp"
#include "transport/receive_queue.hpp"

using namespace uroce::test;
using uroce::transport::low_receive_queue_min_peak;

namespace {

std::vector<uint32_t> reported(Host& h) {
  std::vector<uint32_t> qps{0xdead};  // taken into, so whatever was in it goes
  h.device->take_low_receive_queues(qps);
  return qps;
}

// `n` SENDs of 8 bytes from a to b, each run to completion; returns after the last.
void send_messages(Pair& p, unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    REQUIRE(p.post_a(send_wr(i, WrOpcode::send, Pair::a_base, 8, p.a_key)) == 0);
    REQUIRE(p.run());
  }
  CHECK(p.a.poll(p.a.send_cq).size() == n);
  CHECK(p.b.poll(p.b.recv_cq).size() == n);
}

void post_receives(Pair& p, unsigned n) {
  for (unsigned i = 0; i < n; ++i) REQUIRE(p.b.device->post_recv(p.qb, recv_wr(i, Pair::b_base, 64, p.b_key)) == 0);
}

}  // namespace

TEST_CASE("low receive queue: reported once when it falls to half of its peak", "[transport][rq]") {
  Pair p;
  post_receives(p, 64);
  send_messages(p, 31);  // 33 left: above half of 64
  CHECK(reported(p.b).empty());
  send_messages(p, 1);  // 32 left
  CHECK(reported(p.b) == std::vector<uint32_t>{p.qb});
  send_messages(p, 15);  // 17 left: more than half of the new peak (32), nothing new
  CHECK(reported(p.b).empty());
  send_messages(p, 1);  // 16: half of 32, a second fall
  CHECK(reported(p.b) == std::vector<uint32_t>{p.qb});
  CHECK(p.b.device->counters().receive_queues_low == 2);
  CHECK(p.a.device->counters().rnr_naks_received == 0);

  // Refilled by the application: a new peak, and the next fall is reported again.
  post_receives(p, 48);  // 64
  send_messages(p, 32);
  CHECK(reported(p.b) == std::vector<uint32_t>{p.qb});
  // Several falls before anyone takes the list: the QP is listed once.
  post_receives(p, 32);  // 64
  send_messages(p, 32);  // 32: reported
  send_messages(p, 16);  // 16: reported again
  CHECK(reported(p.b) == std::vector<uint32_t>{p.qb});
  CHECK(p.b.device->counters().receive_queues_low == 5);
}

TEST_CASE("low receive queue: a shallow queue is never reported", "[transport][rq]") {
  // A ping-pong that keeps a few receives posted drains its queue to empty and refills it all the time.
  Pair p;
  for (int round = 0; round < 10; ++round) {
    post_receives(p, low_receive_queue_min_peak - 1);
    send_messages(p, low_receive_queue_min_peak - 1);
  }
  CHECK(reported(p.b).empty());
  CHECK(p.b.device->counters().receive_queues_low == 0);
  // The deepest queue that counts.
  post_receives(p, low_receive_queue_min_peak);
  send_messages(p, low_receive_queue_min_peak / 2);
  CHECK(reported(p.b) == std::vector<uint32_t>{p.qb});
}

TEST_CASE("low receive queue: a receiver that keeps reposting is never reported", "[transport][rq]") {
  Pair p;
  post_receives(p, 64);
  for (int i = 0; i < 500; ++i) {
    send_messages(p, 1);
    post_receives(p, 1);
  }
  CHECK(reported(p.b).empty());
}

TEST_CASE("low receive queue: an SRQ reports the QP that took from it", "[transport][rq][srq]") {
  Pair p;
  uint32_t srq = 0;
  REQUIRE(p.b.device->create_srq(p.b.pd, 64, 1, 0, srq) == 0);
  const uint32_t qb = p.b.create_qp(QpType::rc, 64, srq);
  const uint32_t qa = p.a.create_qp(QpType::rc, 64);
  connect(p.a, qa, QpType::rc, p.b.address, qb, 300, 400, {});
  connect(p.b, qb, QpType::rc, p.a.address, qa, 400, 300, {});
  for (uint64_t i = 0; i < 32; ++i) REQUIRE(p.b.device->post_srq_recv(srq, recv_wr(i, Pair::b_base, 64, p.b_key)) == 0);
  for (uint64_t i = 0; i < 16; ++i) {
    REQUIRE(p.post(p.a, qa, send_wr(i, WrOpcode::send, Pair::a_base, 8, p.a_key)) == 0);
    REQUIRE(p.run());
  }
  CHECK(reported(p.b) == std::vector<uint32_t>{qb});
}

TEST_CASE("low receive queue: a QP reset forgets its peak", "[transport][rq]") {
  Pair p;
  post_receives(p, 64);
  QpAttr reset;
  reset.qp_state = QpState::reset;
  REQUIRE(p.b.device->modify_qp(p.qb, reset, uroce::verbs::attr_state, 0) == 0);
  connect(p.b, p.qb, QpType::rc, p.a.address, p.qa, p.config.b_psn, p.config.a_psn, {});
  post_receives(p, 4);
  send_messages(p, 4);  // empty, but it never held 16 since the reset
  CHECK(reported(p.b).empty());
}
