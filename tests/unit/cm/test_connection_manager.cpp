// The CM state machine: two ConnectionManagers joined by a little network that can lose MADs, driven by
// an injected clock. Handshake, retransmission of a lost REQ/REP/DREQ, REJ when nobody listens, teardown,
// duplicates, hostile MADs.
#include <catch2/catch.hpp>

#include <deque>
#include <random>

#include "transport/cm/connection_manager.hpp"
#include "transport/cm/rdma_cm_header.hpp"

using namespace uroce;
using namespace uroce::cm;

namespace {

const wire::IpAddress gid_a = wire::IpAddress::from_v4(0x0a4d0001);
const wire::IpAddress gid_b = wire::IpAddress::from_v4(0x0a4d0002);
constexpr uint64_t sid = service_id_of(wire::rdma_cm_ps_tcp, 7174);

struct Wire : MadSender {
  Wire(wire::IpAddress s, std::deque<std::pair<MadAddress, Mad>>* o) : self(s), out(o) {}
  wire::IpAddress self;
  std::deque<std::pair<MadAddress, Mad>>* out;
  unsigned drop_next = 0;  // lose the next N MADs this side sends
  std::vector<CmAttribute> sent;
  void send(const MadAddress& to, const Mad& mad) override {
    sent.push_back(CmAttribute(uint16_t(mad[16] << 8 | mad[17])));
    if (drop_next > 0) {
      --drop_next;
      return;
    }
    (void)to;
    out->push_back({MadAddress{self, 1}, mad});
  }
};

struct Pair {
  std::deque<std::pair<MadAddress, Mad>> to_a, to_b;
  Wire wa{gid_a, &to_b}, wb{gid_b, &to_a};
  ConnectionManager a{wa, CmConfig{.ca_guid = 0xa, .first_comm_id = 100}};
  ConnectionManager b{wb, CmConfig{.ca_guid = 0xb, .first_comm_id = 500}};
  Nanos now = 1'000'000;

  // Delivers everything in flight, both ways, until quiet.
  void deliver() {
    while (!to_a.empty() || !to_b.empty()) {
      while (!to_b.empty()) {
        auto [from, mad] = to_b.front();
        to_b.pop_front();
        b.receive(from, mad, now);
      }
      while (!to_a.empty()) {
        auto [from, mad] = to_a.front();
        to_a.pop_front();
        a.receive(from, mad, now);
      }
    }
  }
  void advance(Nanos dt) {
    now += dt;
    a.run(now);
    b.run(now);
    deliver();
  }
};

Req make_req() {
  Req r;
  r.service_id = sid;
  r.local_qpn = 0x11;
  r.starting_psn = 0x123456;
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.remote_cm_response_timeout = 20;
  r.local_cm_response_timeout = 20;
  r.retry_count = 7;
  r.rnr_retry_count = 7;
  r.path_mtu = 3;
  r.max_cm_retries = 15;
  r.primary.local_gid = gid_a;
  r.primary.remote_gid = gid_b;
  return r;
}

Rep make_rep() {
  Rep r;
  r.local_qpn = 0x12;
  r.starting_psn = 0x654321;
  r.responder_resources = 1;
  r.initiator_depth = 1;
  r.rnr_retry_count = 7;
  return r;
}

std::vector<CmEventType> types(const std::vector<CmEvent>& events) {
  std::vector<CmEventType> t;
  for (const auto& e : events) t.push_back(e.type);
  return t;
}

// Connects a to b; returns the two comm IDs (a's, b's).
std::pair<uint32_t, uint32_t> connect(Pair& p) {
  REQUIRE(p.b.listen(sid) == 0);
  const uint32_t ca = p.a.connect(make_req(), {gid_b, 1}, p.now);
  p.deliver();
  auto eb = p.b.take_events();
  REQUIRE(types(eb) == std::vector{CmEventType::req_received});
  const uint32_t cb = eb[0].comm_id;
  CHECK(eb[0].req.local_qpn == 0x11);
  CHECK(eb[0].req.starting_psn == 0x123456);
  CHECK(eb[0].peer.gid == gid_a);
  REQUIRE(p.b.accept(cb, make_rep(), p.now) == 0);
  p.deliver();
  auto ea = p.a.take_events();
  REQUIRE(types(ea) == std::vector{CmEventType::rep_received});
  CHECK(ea[0].rep.local_qpn == 0x12);
  CHECK(ea[0].rep.starting_psn == 0x654321);
  REQUIRE(p.a.establish(ca, p.now) == 0);
  p.deliver();
  REQUIRE(types(p.b.take_events()) == std::vector{CmEventType::established});
  CHECK(*p.a.state(ca) == CmState::established);
  CHECK(*p.b.state(cb) == CmState::established);
  return {ca, cb};
}

}  // namespace

TEST_CASE("cm: REQ, REP, RTU establish a connection", "[cm]") {
  Pair p;
  connect(p);
  CHECK(p.wa.sent == std::vector{CmAttribute::req, CmAttribute::rtu});
  CHECK(p.wb.sent == std::vector{CmAttribute::rep});
  CHECK(p.a.next_deadline() == never);
  CHECK(p.b.next_deadline() == never);
}

TEST_CASE("cm: a lost REQ is sent again after the response timeout", "[cm]") {
  Pair p;
  p.b.listen(sid);
  p.wa.drop_next = 1;
  p.a.connect(make_req(), {gid_b, 1}, p.now);
  p.deliver();
  CHECK(p.b.take_events().empty());
  const Nanos interval = p.a.next_deadline() - p.now;
  CHECK(interval == 2 * timeout_code_ns(18) + timeout_code_ns(20));
  p.advance(interval - 1);
  CHECK(p.b.take_events().empty());
  p.advance(1);
  CHECK(types(p.b.take_events()) == std::vector{CmEventType::req_received});
  CHECK(p.a.counters().retransmissions == 1);
  CHECK(p.wa.sent == std::vector{CmAttribute::req, CmAttribute::req});
}

TEST_CASE("cm: a REQ never answered ends in unreachable after max CM retries", "[cm]") {
  Pair p;
  p.wa.drop_next = 100;
  Req r = make_req();
  r.max_cm_retries = 3;
  const uint32_t id = p.a.connect(r, {gid_b, 1}, p.now);
  for (int i = 0; i < 10; ++i) p.advance(p.a.next_deadline() - p.now);
  auto e = p.a.take_events();
  REQUIRE(types(e) == std::vector{CmEventType::unreachable});
  CHECK(e[0].comm_id == id);
  CHECK(e[0].timed_out);
  CHECK(p.wa.sent.size() == 4);  // the REQ and 3 retries
  CHECK(p.a.connection_count() == 0);
  CHECK(p.a.counters().timeouts == 1);
}

TEST_CASE("cm: a REQ for a service nobody listens on is rejected (invalid service ID)", "[cm]") {
  Pair p;
  const uint32_t id = p.a.connect(make_req(), {gid_b, 1}, p.now);
  p.deliver();
  auto e = p.a.take_events();
  REQUIRE(types(e) == std::vector{CmEventType::rejected});
  CHECK(e[0].comm_id == id);
  CHECK(e[0].rej.reason == uint16_t(RejectReason::invalid_service_id));
  CHECK(e[0].rej.message_rejected == MessageRef::req);
  CHECK(p.a.connection_count() == 0);
  CHECK(p.b.connection_count() == 0);
  CHECK(p.a.next_deadline() == never);
}

TEST_CASE("cm: the passive side rejects with private data", "[cm]") {
  Pair p;
  p.b.listen(sid);
  p.a.connect(make_req(), {gid_b, 1}, p.now);
  p.deliver();
  const uint32_t cb = p.b.take_events().at(0).comm_id;
  const uint8_t why[] = {1, 2, 3};
  REQUIRE(p.b.reject(cb, uint16_t(RejectReason::consumer_defined), why, p.now) == 0);
  p.deliver();
  auto e = p.a.take_events();
  REQUIRE(types(e) == std::vector{CmEventType::rejected});
  CHECK(e[0].rej.reason == 28);
  CHECK(e[0].rej.private_data[2] == 3);
}

TEST_CASE("cm: a lost REP is sent again; a lost RTU is answered by the duplicate REP", "[cm]") {
  Pair p;
  p.b.listen(sid);
  const uint32_t ca = p.a.connect(make_req(), {gid_b, 1}, p.now);
  p.deliver();
  const uint32_t cb = p.b.take_events().at(0).comm_id;
  p.wb.drop_next = 1;
  p.b.accept(cb, make_rep(), p.now);
  p.deliver();
  CHECK(p.a.take_events().empty());
  // The REQ timer of a fires first (same interval, started earlier): b sees a duplicate REQ in rep_sent
  // and resends its REP.
  p.advance(p.a.next_deadline() - p.now);
  REQUIRE(types(p.a.take_events()) == std::vector{CmEventType::rep_received});
  p.wa.drop_next = 1;  // the RTU is lost
  p.a.establish(ca, p.now);
  p.deliver();
  CHECK(p.b.take_events().empty());
  p.advance(p.b.next_deadline() - p.now);  // b resends REP; a, established, says RTU again
  CHECK(types(p.b.take_events()) == std::vector{CmEventType::established});
  CHECK(p.a.counters().rx_duplicates >= 1);
}

TEST_CASE("cm: a duplicate REQ the application has not answered gets an MRA, which holds off the retries",
          "[cm]") {
  Pair p;
  p.b.listen(sid);
  p.a.connect(make_req(), {gid_b, 1}, p.now);
  p.deliver();
  p.b.take_events();
  p.advance(p.a.next_deadline() - p.now);  // the REQ again
  CHECK(p.wb.sent == std::vector{CmAttribute::mra});
  CHECK(p.b.take_events().empty());         // not a second connection
  CHECK(p.b.connection_count() == 1);
  CHECK(p.a.next_deadline() - p.now == 2 * timeout_code_ns(18) + timeout_code_ns(24));
}

TEST_CASE("cm: DREQ and DREP tear a connection down on both sides", "[cm]") {
  Pair p;
  auto [ca, cb] = connect(p);
  REQUIRE(p.a.disconnect(ca, p.now) == 0);
  p.deliver();
  CHECK(types(p.b.take_events()) == std::vector{CmEventType::dreq_received});
  CHECK(types(p.a.take_events()) == std::vector{CmEventType::disconnected});
  CHECK(*p.a.state(ca) == CmState::timewait);
  CHECK(*p.b.state(cb) == CmState::timewait);
  p.advance(2'000'000'000);  // timewait over
  CHECK(p.a.connection_count() == 0);
  CHECK(p.b.connection_count() == 0);
}

TEST_CASE("cm: a lost DREQ is retransmitted; a DREQ for a forgotten connection still gets its DREP", "[cm]") {
  Pair p;
  auto [ca, cb] = connect(p);
  p.wa.drop_next = 1;
  p.a.disconnect(ca, p.now);
  p.deliver();
  CHECK(p.b.take_events().empty());
  p.advance(p.a.next_deadline() - p.now);
  CHECK(types(p.b.take_events()) == std::vector{CmEventType::dreq_received});
  CHECK(types(p.a.take_events()) == std::vector{CmEventType::disconnected});

  Pair q;
  auto [qa, qb] = connect(q);
  q.b.destroy(qb, q.now);  // b sends one DREQ and forgets
  q.deliver();
  CHECK(types(q.a.take_events()) == std::vector{CmEventType::dreq_received});
  CHECK(q.b.take_events().empty());
  (void)qa;
}

TEST_CASE("cm: both sides disconnecting at once", "[cm]") {
  Pair p;
  auto [ca, cb] = connect(p);
  p.a.disconnect(ca, p.now);
  p.b.disconnect(cb, p.now);
  p.deliver();
  CHECK(types(p.a.take_events()) == std::vector{CmEventType::disconnected});
  CHECK(types(p.b.take_events()) == std::vector{CmEventType::disconnected});
  CHECK(p.a.next_deadline() != never);  // timewait only
}

TEST_CASE("cm: calls in the wrong state fail with an errno, not silently", "[cm]") {
  Pair p;
  CHECK(p.a.accept(42, make_rep(), p.now) == ENOENT);
  CHECK(p.a.disconnect(42, p.now) == ENOENT);
  const uint32_t id = p.a.connect(make_req(), {gid_b, 1}, p.now);
  CHECK(p.a.accept(id, make_rep(), p.now) == EINVAL);
  CHECK(p.a.establish(id, p.now) == EINVAL);
  CHECK(p.a.disconnect(id, p.now) == EINVAL);
  CHECK(p.b.listen(sid) == 0);
  CHECK(p.b.listen(sid) == EADDRINUSE);
}

TEST_CASE("cm: truncated, foreign and random MADs are counted and dropped, never a crash", "[cm]") {
  Pair p;
  auto [ca, cb] = connect(p);
  std::mt19937 rng(11);
  const MadAddress from{gid_a, 1};
  for (int i = 0; i < 5000; ++i) {
    std::vector<uint8_t> junk(size_t(rng() % 300));
    for (auto& b : junk) b = uint8_t(rng());
    if (junk.size() >= 24 && i % 2 == 0) {
      // Mostly well-formed CM headers, so the state machine sees hostile contents, not just bad headers.
      junk[0] = 1, junk[1] = 7, junk[2] = 2, junk[3] = 3, junk[16] = 0, junk[17] = uint8_t(0x10 + rng() % 7);
      if (i % 4 == 0 && junk.size() >= 32) {  // aimed at b's connection
        junk[28] = uint8_t(cb >> 24), junk[29] = uint8_t(cb >> 16), junk[30] = uint8_t(cb >> 8), junk[31] = uint8_t(cb);
      }
    }
    p.b.receive(from, junk, p.now);
    p.b.run(p.now += 1000);
  }
  CHECK(p.b.counters().rx_malformed > 1000);
  CHECK(p.b.counters().rx_mads == 5000 + 2);
  (void)ca;
}
