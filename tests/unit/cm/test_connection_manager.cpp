// The CM state machine: two ConnectionManagers joined by a little network that can lose MADs, driven by
// an injected clock. Handshake, retransmission of a lost REQ/REP/DREQ, REJ when nobody listens, teardown,
// duplicates, hostile MADs; Service ID Resolution (SIDR_REQ/SIDR_REP) beside the connections.
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
  std::vector<std::pair<MadAddress, Mad>> log;  // every MAD sent (lost or not) and where it was sent
  void send(const MadAddress& to, const Mad& mad) override {
    sent.push_back(CmAttribute(uint16_t(mad[16] << 8 | mad[17])));
    log.push_back({to, mad});
    if (drop_next > 0) {
      --drop_next;
      return;
    }
    out->push_back({MadAddress{self, 1, to.sl}, mad});  // the receiver sees the SL it went with (its PCP)
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

TEST_CASE("cm: every MAD of a connection goes at its SL: the active side's own, the passive side's the REQ's",
          "[cm]") {
  Pair p;
  REQUIRE(p.b.listen(sid) == 0);
  const uint32_t ca = p.a.connect(make_req(), {gid_b, 1, 5}, p.now);
  p.wa.drop_next = 1;  // the first REQ is lost: the resent one keeps the SL too
  p.deliver();
  p.advance(100'000'000'000);
  auto eb = p.b.take_events();
  REQUIRE(types(eb) == std::vector{CmEventType::req_received});
  CHECK(eb[0].peer.sl == 5);
  const uint32_t cb = eb[0].comm_id;
  REQUIRE(p.b.accept(cb, make_rep(), p.now) == 0);
  p.deliver();
  REQUIRE(p.a.establish(ca, p.now) == 0);
  p.deliver();
  REQUIRE(p.b.disconnect(cb, p.now) == 0);  // a DREQ from the passive side, the DREP from the active one
  p.deliver();
  CHECK(p.wa.sent == std::vector{CmAttribute::req, CmAttribute::req, CmAttribute::rtu, CmAttribute::drep});
  CHECK(p.wb.sent == std::vector{CmAttribute::rep, CmAttribute::dreq});
  for (const auto* w : {&p.wa, &p.wb}) {
    for (const auto& [to, mad] : w->log) CHECK(to.sl == 5);
  }
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

TEST_CASE("cm: an XRC REQ is taken and its REP names the target as the EE context; other transports are refused",
          "[cm]") {
  Pair p;
  REQUIRE(p.b.listen(sid) == 0);
  Req req = make_req();
  req.service_type = ServiceType::extended;  // Linux's cm_req_set_qp_type for an XRC initiator
  req.extended_transport = extended_transport_xrc;
  const uint32_t ca = p.a.connect(req, {gid_b, 1}, p.now);
  p.deliver();
  auto eb = p.b.take_events();
  REQUIRE(types(eb) == std::vector{CmEventType::req_received});
  CHECK(is_xrc(eb[0].req.service_type, eb[0].req.extended_transport));
  Rep rep = make_rep();
  rep.local_qpn = 0;
  rep.local_eecn = 0x34;  // the target's QPN, as Linux's cm_format_rep puts it
  rep.srq = true;
  REQUIRE(p.b.accept(eb[0].comm_id, rep, p.now) == 0);
  p.deliver();
  auto ea = p.a.take_events();
  REQUIRE(types(ea) == std::vector{CmEventType::rep_received});
  CHECK(ea[0].rep.local_eecn == 0x34);
  REQUIRE(p.a.establish(ca, p.now) == 0);
  p.deliver();
  CHECK(types(p.b.take_events()) == std::vector{CmEventType::established});
  // RD, and an extended transport other than XRC: REJ invalid transport type.
  for (const auto& [type, extended] : {std::pair{ServiceType::rd, uint8_t(0)}, std::pair{ServiceType::extended, uint8_t(2)}}) {
    Req other = make_req();
    other.service_type = type;
    other.extended_transport = extended;
    p.a.connect(other, {gid_b, 1}, p.now);
    p.deliver();
    auto e = p.a.take_events();
    REQUIRE(types(e) == std::vector{CmEventType::rejected});
    CHECK(e[0].rej.reason == uint16_t(RejectReason::invalid_transport_type));
  }
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
  // Each side's DREP for the other's DREQ reached it in timewait: expected, no protocol error counted.
  CHECK(p.a.counters().rx_wrong_state == 0);
  CHECK(p.b.counters().rx_wrong_state == 0);
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

// --- Service ID Resolution (SIDR_REQ / SIDR_REP) ----------------------------------------------------------

namespace {

constexpr uint64_t udp_sid = service_id_of(wire::rdma_cm_ps_udp, 7174);
constexpr Nanos sidr_interval = 4'096'000'000;  // Linux's rdma_cm: a SIDR_REQ every 4096 ms

SidrReq make_sidr_req() {
  SidrReq r;
  r.service_id = udp_sid;
  r.pkey = 0x8001;
  r.private_data[0] = 0x42;
  return r;
}

SidrRep make_sidr_rep() {
  SidrRep r;
  r.qpn = 0x123456;
  r.qkey = 0x01234567;
  r.private_data[135] = 0x99;
  return r;
}

uint64_t tid_of(const Mad& mad) { return std::get<Decoded>(decode(mad)).header.transaction_id; }

template <class T>
T message_of(const Mad& mad) {
  return std::get<T>(std::get<Decoded>(decode(mad)).message);
}

// a asks b to resolve udp_sid (b listening); returns the two comm IDs (a's request, b's) once b has the
// sidr_req_received event.
std::pair<uint32_t, uint32_t> sidr_ask(Pair& p) {
  REQUIRE(p.b.listen(udp_sid) == 0);
  const uint32_t ca = p.a.sidr_request(make_sidr_req(), {gid_b, 1}, sidr_interval, 15, p.now);
  p.deliver();
  auto eb = p.b.take_events();
  REQUIRE(types(eb) == std::vector{CmEventType::sidr_req_received});
  return {ca, eb[0].comm_id};
}

}  // namespace

TEST_CASE("cm sidr: SIDR_REQ and SIDR_REP resolve a service between two CMs", "[cm][sidr]") {
  Pair p;
  REQUIRE(p.b.listen(udp_sid) == 0);
  const uint32_t ca = p.a.sidr_request(make_sidr_req(), {gid_b, 1}, sidr_interval, 15, p.now);
  CHECK(ca == 100);  // a comm ID from the connections' space
  CHECK(p.a.next_deadline() == p.now + sidr_interval);
  p.deliver();
  auto eb = p.b.take_events();
  REQUIRE(types(eb) == std::vector{CmEventType::sidr_req_received});
  const uint32_t cb = eb[0].comm_id;
  CHECK(cb == 500);
  CHECK(eb[0].peer == MadAddress{gid_a, 1});
  CHECK(eb[0].sidr_req.request_id == ca);
  CHECK(eb[0].sidr_req.service_id == udp_sid);
  CHECK(eb[0].sidr_req.pkey == 0x8001);
  CHECK(eb[0].sidr_req.private_data[0] == 0x42);
  CHECK(p.b.next_deadline() == never);  // the passive side waits for its owner, with no timer

  REQUIRE(p.b.sidr_reply(cb, make_sidr_rep(), p.now) == 0);
  p.deliver();
  auto ea = p.a.take_events();
  REQUIRE(types(ea) == std::vector{CmEventType::sidr_rep_received});
  CHECK(ea[0].comm_id == ca);
  CHECK(ea[0].peer.gid == gid_b);
  CHECK(ea[0].sidr_rep.status == SidrStatus::valid);
  CHECK(ea[0].sidr_rep.request_id == ca);
  CHECK(ea[0].sidr_rep.service_id == udp_sid);
  CHECK(ea[0].sidr_rep.qpn == 0x123456);
  CHECK(ea[0].sidr_rep.qkey == 0x01234567);
  CHECK(ea[0].sidr_rep.private_data[135] == 0x99);

  // On the wire: our transaction ID (the MAD agent's number above the comm ID), answered with the same
  // one, sent back to where the SIDR_REQ came from.
  CHECK(p.wa.sent == std::vector{CmAttribute::sidr_req});
  CHECK(p.wb.sent == std::vector{CmAttribute::sidr_rep});
  CHECK(tid_of(p.wa.log[0].second) == (uint64_t(1) << 32 | ca));
  CHECK(tid_of(p.wb.log[0].second) == tid_of(p.wa.log[0].second));
  CHECK(p.wa.log[0].first == MadAddress{gid_b, 1});
  CHECK(p.wb.log[0].first == MadAddress{gid_a, 1});
  CHECK(message_of<SidrReq>(p.wa.log[0].second).request_id == ca);

  // Both sides are done: nothing pending, no timer, no connection; the next ID is a fresh one.
  CHECK(p.a.next_deadline() == never);
  CHECK(p.b.sidr_reply(cb, make_sidr_rep(), p.now) == ENOENT);
  CHECK(p.a.connection_count() == 0);
  CHECK(p.b.connection_count() == 0);
  CHECK(p.a.state(ca) == nullptr);
  CHECK(p.a.connect(make_req(), {gid_b, 1}, p.now) == ca + 1);
  CHECK(p.a.counters().tx_mads == 2);
  CHECK(p.b.counters().tx_mads == 1);
  CHECK(p.a.counters().retransmissions == 0);
}

TEST_CASE("cm sidr: an unanswered SIDR_REQ is resent every retry interval, then unreachable", "[cm][sidr]") {
  Pair p;
  p.wa.drop_next = 100;
  const Nanos start = p.now;
  const uint32_t id = p.a.sidr_request(make_sidr_req(), {gid_b, 1}, sidr_interval, 3, p.now);
  p.advance(sidr_interval - 1);
  CHECK(p.a.counters().retransmissions == 0);
  p.advance(1);
  CHECK(p.a.counters().retransmissions == 1);
  for (int i = 0; i < 10 && p.a.next_deadline() != never; ++i) {
    CHECK(p.a.next_deadline() - p.now == sidr_interval);
    p.advance(p.a.next_deadline() - p.now);
  }
  auto e = p.a.take_events();
  REQUIRE(types(e) == std::vector{CmEventType::unreachable});
  CHECK(e[0].comm_id == id);
  CHECK(e[0].timed_out);
  CHECK(e[0].peer.gid == gid_b);
  CHECK(p.now - start == 4 * sidr_interval);  // the SIDR_REQ, 3 retries, one more interval of waiting
  CHECK(p.wa.sent == std::vector(4, CmAttribute::sidr_req));
  for (const auto& [to, mad] : p.wa.log) CHECK(mad == p.wa.log[0].second);  // the same MAD each time
  CHECK(p.a.counters().tx_mads == 4);
  CHECK(p.a.counters().retransmissions == 3);
  CHECK(p.a.counters().timeouts == 1);
  CHECK(p.a.next_deadline() == never);
  p.advance(100 * sidr_interval);
  CHECK(p.a.take_events().empty());
  CHECK(p.a.counters().tx_mads == 4);
}

TEST_CASE("cm sidr: a SIDR_REQ for a service nobody listens on is answered with status 1", "[cm][sidr]") {
  Pair p;
  p.b.listen(sid);  // a connection service, not the one asked about
  const uint32_t ca = p.a.sidr_request(make_sidr_req(), {gid_b, 1}, sidr_interval, 15, p.now);
  p.deliver();
  CHECK(p.b.take_events().empty());
  CHECK(p.wb.sent == std::vector{CmAttribute::sidr_rep});
  CHECK(tid_of(p.wb.log[0].second) == tid_of(p.wa.log[0].second));
  auto e = p.a.take_events();
  REQUIRE(types(e) == std::vector{CmEventType::sidr_rep_received});
  CHECK(e[0].comm_id == ca);
  CHECK(e[0].sidr_rep.status == SidrStatus::service_id_not_supported);
  CHECK(uint8_t(e[0].sidr_rep.status) == 1);
  CHECK(e[0].sidr_rep.request_id == ca);
  CHECK(e[0].sidr_rep.service_id == udp_sid);
  CHECK(p.a.next_deadline() == never);
  CHECK(p.b.next_deadline() == never);
}

TEST_CASE("cm sidr: a duplicate SIDR_REQ is counted and dropped while the first is unanswered", "[cm][sidr]") {
  Pair p;
  auto [ca, cb] = sidr_ask(p);
  const Mad first = p.wa.log[0].second;
  p.advance(sidr_interval);  // a heard nothing: its SIDR_REQ again
  CHECK(p.a.counters().retransmissions == 1);
  CHECK(p.b.counters().rx_duplicates == 1);
  CHECK(p.b.take_events().empty());
  CHECK(p.wb.sent.empty());
  REQUIRE(p.b.sidr_reply(cb, make_sidr_rep(), p.now) == 0);
  p.deliver();
  CHECK(types(p.a.take_events()) == std::vector{CmEventType::sidr_rep_received});
  // Answered, the request is forgotten: the same SIDR_REQ again is a new request (as in Linux, whose CM
  // drops it from its table of remote SIDR requests when it sends the SIDR_REP).
  p.b.receive({gid_a, 1}, first, p.now);
  auto again = p.b.take_events();
  REQUIRE(types(again) == std::vector{CmEventType::sidr_req_received});
  CHECK(again[0].comm_id != cb);
  CHECK(p.b.counters().rx_duplicates == 1);
  // The same request ID from another port is another request, not a duplicate.
  p.b.receive({gid_b, 1}, first, p.now);
  CHECK(types(p.b.take_events()) == std::vector{CmEventType::sidr_req_received});
  CHECK(p.b.counters().rx_duplicates == 1);
  (void)ca;
}

TEST_CASE("cm sidr: destroying an unanswered passive request answers it \"rejected\"", "[cm][sidr]") {
  Pair p;
  auto [ca, cb] = sidr_ask(p);
  p.b.destroy(cb, p.now);
  CHECK(p.wb.sent == std::vector{CmAttribute::sidr_rep});
  CHECK(tid_of(p.wb.log[0].second) == tid_of(p.wa.log[0].second));
  p.deliver();
  auto e = p.a.take_events();
  REQUIRE(types(e) == std::vector{CmEventType::sidr_rep_received});
  CHECK(e[0].comm_id == ca);
  CHECK(e[0].sidr_rep.status == SidrStatus::rejected);
  CHECK(e[0].sidr_rep.request_id == ca);
  CHECK(e[0].sidr_rep.service_id == udp_sid);
  CHECK(p.b.take_events().empty());
  CHECK(p.b.sidr_reply(cb, make_sidr_rep(), p.now) == ENOENT);
  p.b.destroy(cb, p.now);  // twice: nothing more is said
  CHECK(p.wb.sent.size() == 1);
}

TEST_CASE("cm sidr: destroying our own request forgets it, with no event; its late answer is dropped",
          "[cm][sidr]") {
  Pair p;
  auto [ca, cb] = sidr_ask(p);
  p.a.destroy(ca, p.now);
  CHECK(p.wa.sent == std::vector{CmAttribute::sidr_req});  // nothing said on the wire
  CHECK(p.a.next_deadline() == never);
  REQUIRE(p.b.sidr_reply(cb, make_sidr_rep(), p.now) == 0);
  p.deliver();
  p.advance(20 * sidr_interval);
  CHECK(p.a.take_events().empty());
  CHECK(p.a.counters().rx_unknown_connection == 1);
  CHECK(p.a.counters().retransmissions == 0);
}

TEST_CASE("cm sidr: a SIDR_REP for no pending request is counted and dropped", "[cm][sidr]") {
  Pair p;
  auto [ca, cb] = connect(p);
  auto [sa, sb] = sidr_ask(p);
  const auto stray = [&](ConnectionManager& cm, uint32_t request_id) {
    SidrRep rep = make_sidr_rep();
    rep.request_id = request_id;
    cm.receive({gid_b, 1}, encode(rep, 9), p.now);
  };
  stray(p.a, 4242);  // never asked
  stray(p.a, ca);    // a connection's comm ID, not a SIDR request
  stray(p.b, sb);    // b's passive request: b asked nothing
  CHECK(p.a.counters().rx_unknown_connection == 2);
  CHECK(p.b.counters().rx_unknown_connection == 1);
  CHECK(p.a.take_events().empty());
  CHECK(p.b.take_events().empty());
  CHECK(*p.a.state(ca) == CmState::established);
  CHECK(p.b.sidr_reply(sb, make_sidr_rep(), p.now) == 0);  // still pending
  p.deliver();
  CHECK(types(p.a.take_events()) == std::vector{CmEventType::sidr_rep_received});
  (void)cb, (void)sa;
}

TEST_CASE("cm sidr: sidr_reply to anything but a pending passive SIDR request fails", "[cm][sidr]") {
  Pair p;
  auto [ca, cb] = sidr_ask(p);
  CHECK(p.b.sidr_reply(4242, make_sidr_rep(), p.now) == ENOENT);  // unknown
  CHECK(p.a.sidr_reply(ca, make_sidr_rep(), p.now) == ENOENT);    // our own request, not a peer's
  const uint32_t conn = p.a.connect(make_req(), {gid_b, 1}, p.now);
  CHECK(p.a.sidr_reply(conn, make_sidr_rep(), p.now) == ENOENT);  // a connection
  SidrRep too_much = make_sidr_rep();
  too_much.additional_info_length = sidr_rep_info_size + 1;
  CHECK(p.b.sidr_reply(cb, too_much, p.now) == EINVAL);
  CHECK(p.b.sidr_reply(cb, make_sidr_rep(), p.now) == 0);  // still pending after the refused call
  CHECK(p.wb.sent == std::vector{CmAttribute::sidr_rep});
}

TEST_CASE("cm sidr: connection calls and messages naming a SIDR request treat it as no connection",
          "[cm][sidr]") {
  Pair p;
  auto [ca, cb] = sidr_ask(p);
  CHECK(p.b.accept(cb, make_rep(), p.now) == ENOENT);
  CHECK(p.b.reject(cb, 28, {}, p.now) == ENOENT);
  CHECK(p.a.establish(ca, p.now) == ENOENT);
  CHECK(p.a.notify_established(ca) == ENOENT);
  CHECK(p.a.disconnect(ca, p.now) == ENOENT);
  CHECK(p.a.state(ca) == nullptr);
  CHECK(p.b.state(cb) == nullptr);
  CHECK(p.a.connection_count() == 0);
  CHECK(p.b.connection_count() == 0);

  // Each connection message, aimed at the SIDR request's comm ID on both sides.
  const auto aimed = [](uint32_t id) {
    Rep rep = make_rep();
    rep.remote_comm_id = id;
    Mra mra;
    mra.remote_comm_id = id;
    Rej rej;
    rej.remote_comm_id = id;
    return std::vector<CmMessage>{rep, mra, rej, Rtu{77, id, {}}, Dreq{77, id, 0, {}}, Drep{77, id, {}}};
  };
  for (const CmMessage& m : aimed(cb)) p.b.receive({gid_a, 1}, encode(m, 5), p.now);
  for (const CmMessage& m : aimed(ca)) p.a.receive({gid_b, 1}, encode(m, 5), p.now);
  CHECK(p.b.counters().rx_unknown_connection == 6);
  CHECK(p.a.counters().rx_unknown_connection == 6);
  CHECK(p.b.counters().rx_wrong_state == 0);
  CHECK(p.a.take_events().empty());
  CHECK(p.b.take_events().empty());
  // The DREQ got its DREP, as any DREQ for a connection not known does; nothing else was answered.
  CHECK(p.wb.sent == std::vector{CmAttribute::drep});
  CHECK(p.wa.sent == std::vector{CmAttribute::sidr_req, CmAttribute::drep});
  CHECK(p.a.connection_count() == 0);
  CHECK(p.b.connection_count() == 0);

  // Both requests carry on untouched.
  p.to_a.clear(), p.to_b.clear();
  REQUIRE(p.b.sidr_reply(cb, make_sidr_rep(), p.now) == 0);
  p.deliver();
  auto e = p.a.take_events();
  REQUIRE(types(e) == std::vector{CmEventType::sidr_rep_received});
  CHECK(e[0].comm_id == ca);
}

TEST_CASE("cm sidr: random SIDR MADs aimed at pending requests are counted, never a crash", "[cm][sidr]") {
  Pair p;
  auto [ca, cb] = sidr_ask(p);
  std::mt19937 rng(23);
  for (int i = 0; i < 5000; ++i) {
    std::vector<uint8_t> junk(wire::mad_size);
    for (auto& b : junk) b = uint8_t(rng());
    junk[0] = 1, junk[1] = 7, junk[2] = 2, junk[3] = 3, junk[16] = 0, junk[17] = uint8_t(0x17 + i % 2);
    if (i % 3 == 0) {  // the request ID of a pending request
      const uint32_t id = i % 2 ? ca : cb;
      junk[24] = uint8_t(id >> 24), junk[25] = uint8_t(id >> 16), junk[26] = uint8_t(id >> 8), junk[27] = uint8_t(id);
    }
    ConnectionManager& cm = i % 4 < 2 ? p.a : p.b;
    cm.receive({i % 5 ? gid_b : gid_a, 1}, junk, p.now);
    for (const CmEvent& e : cm.take_events()) {
      if (e.type == CmEventType::sidr_req_received && i % 2) cm.sidr_reply(e.comm_id, make_sidr_rep(), p.now);
      if (e.type == CmEventType::sidr_req_received && !(i % 2)) cm.destroy(e.comm_id, p.now);
    }
    p.now += rng() % sidr_interval;  // timers run (a's request times out), what they send is lost
    p.a.run(p.now);
    p.b.run(p.now);
    p.to_a.clear(), p.to_b.clear();
  }
  CHECK(p.a.counters().rx_mads + p.b.counters().rx_mads == 5000 + 1);
  CHECK(p.a.counters().rx_malformed + p.b.counters().rx_malformed == 0);
}
