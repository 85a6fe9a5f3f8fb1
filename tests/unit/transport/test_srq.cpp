// Shared receive queues: several QPs take their receives from one SRQ, in posting order; the limit event
// (IBV_EVENT_SRQ_LIMIT_REACHED) fires once when the SRQ drops below an armed limit and is re-armed only
// by modify_srq; an SRQ-attached QP that fails leaves the SRQ alone and reports LAST_WQE_REACHED.
#include <set>

#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = 0x10000000, b_base = 0x20000000;
constexpr uint32_t all_access = Pair::all_access;

// Host a with two RC QPs, each connected to its own QP on host b; b's two QPs share one SRQ.
struct SharedSrq {
  explicit SharedSrq(uint32_t max_wr = 64) {
    a_key = a.add_buffer(1 << 20, all_access, a_base);
    b_key = b.add_buffer(1 << 20, all_access, b_base);
    REQUIRE(b.device->create_srq(b.pd, max_wr, 4, 0, srq) == 0);
    for (int i = 0; i < 2; ++i) {
      qa[i] = a.create_qp(QpType::rc);
      qb[i] = b.create_qp(QpType::rc, 1024, srq);
    }
    QpParams params;
    params.min_rnr_timer = 1;
    for (int i = 0; i < 2; ++i) {
      connect(a, qa[i], QpType::rc, b.address, qb[i], 100, 200, params);
      connect(b, qb[i], QpType::rc, a.address, qa[i], 200, 100, params);
    }
  }
  void run() { REQUIRE(net.run_until_idle(net.now() + 10'000'000'000ull)); }
  // A SEND of `len` bytes from a's i-th QP, its bytes at a_base + offset.
  void send(int i, uint64_t id, uint64_t offset, uint32_t len) {
    REQUIRE(a.device->post_send(qa[i], send_wr(id, WrOpcode::send, a_base + offset, len, a_key), net.now()) == 0);
  }
  void post_srq(uint64_t id) {
    REQUIRE(b.device->post_srq_recv(srq, recv_wr(id, b_base + (id % 64) * 8192, 8192, b_key)) == 0);
  }
  size_t srq_limit_events() {
    size_t n = 0;
    for (const AsyncEvent& e : b.device->take_events()) {
      CHECK(e.type == EventType::srq_limit_reached);
      CHECK(e.object == srq);
      ++n;
    }
    return n;
  }

  sim::SimNetwork net{1};
  WireLog wire{net};
  Host a{net, ip("10.0.0.1")};
  Host b{net, ip("10.0.0.2")};
  uint32_t a_key = 0, b_key = 0, srq = 0;
  uint32_t qa[2] = {}, qb[2] = {};
};

}  // namespace

TEST_CASE("srq: two QPs receive from one shared queue", "[transport][srq]") {
  SharedSrq s;
  for (uint64_t id = 0; id < 6; ++id) s.post_srq(id);
  // A QP with an SRQ has no receive queue of its own.
  CHECK(s.b.device->post_recv(s.qb[0], recv_wr(99, b_base, 64, s.b_key)) == EINVAL);
  for (int k = 0; k < 6; ++k) put(s.a.buffer(0), size_t(k) * 8192, pattern(1000 + size_t(k) * 500, uint8_t(k)));
  for (int k = 0; k < 3; ++k) {
    s.send(0, uint64_t(k), uint64_t(k) * 8192, 1000 + uint32_t(k) * 500);
    s.send(1, uint64_t(k + 3), uint64_t(k + 3) * 8192, 1000 + uint32_t(k + 3) * 500);
  }
  s.run();
  CHECK(s.a.poll(s.a.send_cq).size() == 6);
  const auto rc = s.b.poll(s.b.recv_cq);
  REQUIRE(rc.size() == 6);
  std::set<uint64_t> used;
  size_t per_qp[2] = {};
  for (size_t j = 0; j < rc.size(); ++j) {
    CHECK(rc[j].status == WcStatus::success);
    CHECK(rc[j].wr_id == j);  // the shared queue is consumed in posting order
    used.insert(rc[j].wr_id);
    REQUIRE((rc[j].qp_num == s.qb[0] || rc[j].qp_num == s.qb[1]));
    const int from = rc[j].qp_num == s.qb[0] ? 0 : 1;
    ++per_qp[from];
    // Which message landed here: the first byte is the message's pattern seed.
    const int k = s.b.buffer(0)[j * 8192];
    CHECK((from == 0 ? k < 3 : k >= 3));
    CHECK(rc[j].byte_len == 1000 + uint32_t(k) * 500);
    CHECK(slice(s.b.buffer(0), j * 8192, rc[j].byte_len) ==
          slice(s.a.buffer(0), size_t(k) * 8192, rc[j].byte_len));
  }
  CHECK(used.size() == 6);
  CHECK(per_qp[0] == 3);
  CHECK(per_qp[1] == 3);
}

TEST_CASE("srq: an empty shared queue makes both QPs send RNR NAKs until it is refilled", "[transport][srq]") {
  SharedSrq s;
  s.send(0, 1, 0, 100);
  s.send(1, 2, 0, 100);
  s.net.run_until(s.net.now() + 1'000'000);
  CHECK(s.b.device->counters().rnr_naks_sent >= 2);
  CHECK(s.b.poll(s.b.recv_cq).empty());
  s.post_srq(10);
  s.post_srq(11);
  s.run();
  CHECK(s.a.poll(s.a.send_cq).size() == 2);
  const auto rc = s.b.poll(s.b.recv_cq);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(rc[1].status == WcStatus::success);
  CHECK(rc[0].qp_num != rc[1].qp_num);
}

TEST_CASE("srq: the limit event fires once when the queue drops below the limit, and re-arms on modify",
          "[transport][srq]") {
  SharedSrq s;
  for (uint64_t id = 0; id < 10; ++id) s.post_srq(id);
  REQUIRE(s.b.device->modify_srq(s.srq, 5) == 0);  // arm: fire when fewer than 5 are left
  CHECK(s.srq_limit_events() == 0);
  uint64_t next_id = 100;
  const auto consume_one = [&](int qp) {
    s.send(qp, next_id++, 0, 64);
    s.run();
    REQUIRE(s.b.poll(s.b.recv_cq).size() == 1);
  };
  // 10 -> 5 left: not below the limit yet.
  for (int i = 0; i < 5; ++i) consume_one(i % 2);
  CHECK(s.srq_limit_events() == 0);
  consume_one(1);  // 4 left
  CHECK(s.srq_limit_events() == 1);
  consume_one(0);  // 3 left: no second event without re-arming
  consume_one(1);  // 2
  CHECK(s.srq_limit_events() == 0);
  // Refill above the limit: still nothing until modify_srq arms again.
  for (uint64_t id = 20; id < 26; ++id) s.post_srq(id);  // 8
  consume_one(0);                                         // 7
  CHECK(s.srq_limit_events() == 0);
  REQUIRE(s.b.device->modify_srq(s.srq, 6) == 0);
  consume_one(1);  // 6: not below
  CHECK(s.srq_limit_events() == 0);
  consume_one(0);  // 5
  CHECK(s.srq_limit_events() == 1);
  consume_one(1);  // 4
  CHECK(s.srq_limit_events() == 0);
  // A limit of 0 disarms.
  REQUIRE(s.b.device->modify_srq(s.srq, 0) == 0);
  for (int i = 0; i < 4; ++i) consume_one(i % 2);
  CHECK(s.srq_limit_events() == 0);
  CHECK(s.b.device->modify_srq(s.srq, 65) == EINVAL);  // above max_wr
}

TEST_CASE("srq: a QP that fails leaves the shared queue to the others", "[transport][srq]") {
  SharedSrq s;
  for (uint64_t id = 0; id < 4; ++id) s.post_srq(id);
  QpAttr attr;
  attr.qp_state = QpState::err;
  REQUIRE(s.b.device->modify_qp(s.qb[0], attr, attr_state, 0) == 0);
  const auto events = s.b.device->take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == EventType::qp_last_wqe_reached);
  CHECK(events[0].object == s.qb[0]);
  CHECK(s.b.poll(s.b.recv_cq).empty());  // the SRQ's receives are not flushed
  s.send(1, 1, 0, 100);
  s.run();
  const auto rc = s.b.poll(s.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 0);
  CHECK(rc[0].qp_num == s.qb[1]);
  CHECK(rc[0].status == WcStatus::success);
}

TEST_CASE("srq: the SRQ reports the receives its QPs took, once per call, and its size",
          "[transport][srq]") {
  // uroced frees SRQ ring slots from this (emulator/engine/queue_service.cpp, drain_srq).
  SharedSrq s;
  std::vector<uint32_t> retired;
  for (uint64_t i = 0; i < 4; ++i) s.post_srq(i);
  CHECK(s.b.device->srq_size(s.srq) == 4);
  s.b.device->take_retired_srq_receives(retired);
  CHECK(retired.empty());
  s.send(0, 1, 0, 64);
  s.send(1, 2, 0, 64);
  s.run();
  CHECK(s.b.device->srq_size(s.srq) == 2);
  s.b.device->take_retired_srq_receives(retired);
  CHECK(retired == std::vector<uint32_t>{s.srq});  // two QPs took one each: one report
  s.b.device->take_retired_srq_receives(retired);
  CHECK(retired.empty());
  std::vector<uint32_t> qps;
  s.b.device->take_retired_receives(qps);
  CHECK(qps.empty());  // the QPs' own queues gave nothing up: they have none
}
