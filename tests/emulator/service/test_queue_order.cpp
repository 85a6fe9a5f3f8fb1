// The order in which the engine takes a client's work requests: a receive the application posted before a
// send is in the transport before that send leaves, on the QP's own receive ring or on an SRQ's, however
// many receives came first. Otherwise the peer's answer to the send can arrive before the receive it was
// meant for and be RNR-NAKed, which a NIC (seeing both at their doorbells, in order) would never do.
// DAPL's dtestsrq, which reposts many receives on its SRQ and then sends, drew hundreds of RNR NAKs a run
// from an engine that took an SRQ's ring after the session's send rings, 32 requests a turn.
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using protocol::CompletionEntry;

constexpr uint64_t answers = 40;  // more receives than a turn's burst (32)
constexpr transport::Nanos network_time = 1'000'000;

// The two clients' ends of the conversation: A posts `answers` receives, then one SEND to B; B, once it
// has that request, answers with `answers` SENDs.
struct Conversation {
  client::RecvRing& a_receives;
  client::SendRing& a_sends;
  client::SendRing& b_sends;
};

protocol::SendEntry small_send(uint64_t wr_id) {
  return send_entry(wr_id, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline);
}

// A's engine takes one turn at a time, and B's engine and client run until quiet between two of them, as
// two daemons (or a busy one) may: what A's turn let out can come back before A's next turn.
void converse(ServedPair& s, Conversation c) {
  Pair& p = s.pair;
  const std::vector<uint8_t> data(8, 5);
  for (uint64_t i = 0; i < answers; ++i) {
    const protocol::WireSge r = sge(Pair::a_base + i * 64, 64, p.a_key);
    REQUIRE(c.a_receives.post(100 + i, std::span(&r, 1)) == 0);
  }
  REQUIRE(c.a_sends.post(small_send(1), {}, data) == 0);

  bool answered = false;
  for (int a_turn = 0; a_turn < 8 && !answered; ++a_turn) {
    s.qa.drain_work(p.net.now());
    p.run_for(network_time);
    s.qa.deliver_completions();
    for (int b_turn = 0; b_turn < 100; ++b_turn) {
      unsigned moved = s.qb.deliver_completions();
      const std::vector<CompletionEntry> request = poll_all(s.cb.recv_cq);
      if (!request.empty()) {
        REQUIRE(request.size() == 1);
        CHECK(request[0].status == uint32_t(verbs::WcStatus::success));
        for (uint64_t i = 0; i < answers; ++i) REQUIRE(c.b_sends.post(small_send(200 + i), {}, data) == 0);
        answered = true;
      }
      moved += s.qb.drain_work(p.net.now());
      p.run_for(network_time);
      if (moved == 0) break;
    }
  }
  REQUIRE(answered);
  s.pump();

  const std::vector<CompletionEntry> got = poll_all(s.ca.recv_cq);
  REQUIRE(got.size() == answers);
  for (uint64_t i = 0; i < answers; ++i) {
    CHECK(got[i].wr_id == 100 + i);
    CHECK(got[i].status == uint32_t(verbs::WcStatus::success));
  }
  CHECK(p.a.device->counters().rnr_naks_sent == 0);
  CHECK(p.b.device->counters().rnr_naks_received == 0);
}

RingShape roomy() {
  RingShape shape;
  shape.send_capacity = 64;
  shape.recv_capacity = 128;
  shape.cq_capacity = 128;
  return shape;
}

}  // namespace

TEST_CASE("receives posted before a send are in the transport before it leaves, past a turn's burst",
          "[queues][order]") {
  ServedPair s({}, roomy());
  Pair& p = s.pair;
  const protocol::WireSge r = sge(Pair::b_base, 64, p.b_key);
  REQUIRE(s.cb.recv.post(1, std::span(&r, 1)) == 0);  // for A's request
  s.pump();
  converse(s, {s.ca.recv, s.ca.send, s.cb.send});
}

TEST_CASE("receives posted on an SRQ before a send are in the transport before it leaves", "[queues][order]") {
  ServedPair s({}, roomy());
  Pair& p = s.pair;
  SrqConnection c(s, SrqConnection::Side::a, 64);  // A's side takes its receives from an SRQ
  const protocol::WireSge r = sge(Pair::b_base, 64, p.b_key);
  REQUIRE(c.peer_receives.post(1, std::span(&r, 1)) == 0);  // for A's request
  s.pump();
  converse(s, {c.srq, c.srq_side_sends, c.peer_sends});
}

TEST_CASE("with a send waiting, a turn takes every receive posted before it, not a burst", "[queues][order]") {
  ServedPair s({}, roomy());
  Pair& p = s.pair;
  const protocol::WireSge r = sge(Pair::a_base, 64, p.a_key);
  for (uint64_t i = 0; i < answers; ++i) REQUIRE(s.ca.recv.post(i, std::span(&r, 1)) == 0);
  CHECK(s.qa.drain_work(p.net.now()) == 32);  // receives alone: a burst a turn, so no client starves another
  CHECK(s.qa.work_waiting());

  for (uint64_t i = 0; i < answers; ++i) REQUIRE(s.ca.recv.post(answers + i, std::span(&r, 1)) == 0);
  REQUIRE(s.ca.send.post(small_send(1), {}, std::vector<uint8_t>(8, 1)) == 0);
  CHECK(s.qa.drain_work(p.net.now()) == 2 * answers - 32 + 1);  // every receive left (48), then the send
  CHECK(s.qa.counters().recv_posted == 2 * answers);
  CHECK(s.qa.counters().send_posted == 1);
  CHECK_FALSE(s.qa.work_waiting());
}

}  // namespace uroce::test::service
