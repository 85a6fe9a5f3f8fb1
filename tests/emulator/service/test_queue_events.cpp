// How the QueueService tells clients that something happened: completion channel records for armed CQs
// (one per arming), and async events, which go to the session that owns the object and to no other.
#include <fcntl.h>

#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using protocol::AsyncEventRecord;
using protocol::CompletionEventRecord;

// An RDMA WRITE of 8 bytes from a to b: one completion on a's send CQ and nothing on b's side.
void post_write(ServedPair& s, uint64_t wr_id) {
  protocol::SendEntry w = send_entry(wr_id, verbs::WrOpcode::rdma_write);
  w.remote_addr = Pair::b_base;
  w.rkey = s.pair.b_key;
  const protocol::WireSge src = sge(Pair::a_base, 8, s.pair.a_key);
  REQUIRE(s.ca.send.post(w, std::span(&src, 1), {}) == 0);
}

}  // namespace

TEST_CASE("an armed CQ writes exactly one record to its channel per arming", "[queues][events]") {
  ServedPair s;
  Pipe channel;
  s.qa.set_channel(s.pair.a.send_cq, channel.write_fd);

  post_write(s, 1);
  s.pump();
  CHECK(poll_all(s.ca.send_cq).size() == 1);
  CHECK(drain_records<CompletionEventRecord>(channel.read_fd).empty());  // not armed: no event

  s.ca.send_cq.arm(false);
  s.pump();
  CHECK(drain_records<CompletionEventRecord>(channel.read_fd).empty());  // armed, but nothing completed yet

  post_write(s, 2);
  post_write(s, 3);
  post_write(s, 4);
  s.pump();
  const auto events = drain_records<CompletionEventRecord>(channel.read_fd);
  REQUIRE(events.size() == 1);  // three completions, one arming: one event
  CHECK(events[0].cq == s.pair.a.send_cq);
  CHECK(poll_all(s.ca.send_cq).size() == 3);

  post_write(s, 5);  // the arming was used up
  s.pump();
  CHECK(drain_records<CompletionEventRecord>(channel.read_fd).empty());

  for (uint64_t round = 0; round < 3; ++round) {  // re-armed each time: one event each time
    s.ca.send_cq.arm(false);
    post_write(s, 10 + round);
    s.pump();
    CHECK(drain_records<CompletionEventRecord>(channel.read_fd).size() == 1);
  }
  CHECK(s.qa.counters().events_sent == 4);
  CHECK(s.qa.counters().events_lost == 0);
}

// ibv_req_notify_cq(solicited_only): an unsolicited SEND does not fire the channel; a solicited one does.
TEST_CASE("solicited-only arming fires on a solicited receive, not on an unsolicited one", "[queues][events]") {
  ServedPair s;
  Pipe channel;
  s.qb.set_channel(s.pair.b.recv_cq, channel.write_fd);
  const protocol::WireSge rsge = sge(Pair::b_base, 64, s.pair.b_key);
  REQUIRE(s.cb.recv.post(1, std::span(&rsge, 1)) == 0);
  REQUIRE(s.cb.recv.post(2, std::span(&rsge, 1)) == 0);
  s.cb.recv_cq.arm(true);

  const std::vector<uint8_t> data(8, 1);
  REQUIRE(s.ca.send.post(send_entry(1, verbs::WrOpcode::send, verbs::send_inline), {}, data) == 0);  // not solicited
  s.pump();
  REQUIRE(poll_all(s.cb.recv_cq).size() == 1);
  CHECK(drain_records<CompletionEventRecord>(channel.read_fd).empty());

  REQUIRE(s.ca.send.post(send_entry(2, verbs::WrOpcode::send, verbs::send_inline | verbs::send_solicited), {}, data) ==
          0);
  s.pump();
  REQUIRE(poll_all(s.cb.recv_cq).size() == 1);
  CHECK(drain_records<CompletionEventRecord>(channel.read_fd).size() == 1);
}

TEST_CASE("a completion channel that is full loses the event without blocking the engine", "[queues][events]") {
  ServedPair s;
  Pipe channel;
  const int capacity = fcntl(channel.write_fd, F_GETPIPE_SZ);
  REQUIRE(capacity > 0);
  const std::vector<uint8_t> filler(size_t(capacity), 0);
  REQUIRE(write(channel.write_fd, filler.data(), filler.size()) == capacity);
  s.qa.set_channel(s.pair.a.send_cq, channel.write_fd);

  s.ca.send_cq.arm(false);
  post_write(s, 1);
  s.pump();
  CHECK(poll_all(s.ca.send_cq).size() == 1);
  CHECK(s.qa.counters().events_lost == 1);
  CHECK(s.qa.counters().events_sent == 0);
}

TEST_CASE("a QP error event goes to the session that owns the QP, and only there", "[queues][events]") {
  ServedPair s;
  Pair& p = s.pair;
  Pipe events_a, events_b, events_other;
  s.qa.set_event_pipe(ServedPair::session_a, events_a.write_fd);
  s.qb.set_event_pipe(ServedPair::session_b, events_b.write_fd);
  s.qb.set_event_pipe(99, events_other.write_fd);  // another client of b's daemon

  // A SEND into a receive buffer whose lkey is not b's: b's responder cannot place the data and its QP
  // goes to the error state with IBV_EVENT_QP_FATAL.
  const protocol::WireSge bad = sge(Pair::b_base, 64, p.b_key + 0x100);
  REQUIRE(s.cb.recv.post(7, std::span(&bad, 1)) == 0);
  const std::vector<uint8_t> data(16, 2);
  REQUIRE(s.ca.send.post(send_entry(1, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline), {}, data) == 0);
  s.pump();

  const auto at_b = drain_records<AsyncEventRecord>(events_b.read_fd);
  REQUIRE(at_b.size() == 1);
  CHECK(at_b[0].type == uint32_t(verbs::EventType::qp_fatal));
  CHECK(at_b[0].object == p.qb);
  CHECK(drain_records<AsyncEventRecord>(events_a.read_fd).empty());
  CHECK(drain_records<AsyncEventRecord>(events_other.read_fd).empty());

  const auto received = poll_all(s.cb.recv_cq);
  REQUIRE_FALSE(received.empty());
  CHECK(received[0].wr_id == 7);
  CHECK(received[0].status == uint32_t(verbs::WcStatus::loc_prot_err));
  const auto sent = poll_all(s.ca.send_cq);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == uint32_t(verbs::WcStatus::rem_op_err));
}

// A QP several sessions hold (an XRC target QP opened with ibv_open_qp): each of them hears of its events.
TEST_CASE("a shared QP's event goes to every session that holds it", "[queues][events]") {
  ServedPair s;
  Pair& p = s.pair;
  Pipe events_b, events_holder, events_other;
  s.qb.set_event_pipe(ServedPair::session_b, events_b.write_fd);
  s.qb.set_event_pipe(99, events_holder.write_fd);
  s.qb.set_event_pipe(100, events_other.write_fd);
  s.qb.set_qp_holders(p.qb, {ServedPair::session_b, 99});

  const protocol::WireSge bad = sge(Pair::b_base, 64, p.b_key + 0x100);  // as above: b's QP fails
  REQUIRE(s.cb.recv.post(7, std::span(&bad, 1)) == 0);
  const std::vector<uint8_t> data(16, 2);
  REQUIRE(s.ca.send.post(send_entry(1, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline), {}, data) == 0);
  s.pump();

  for (int fd : {events_b.read_fd, events_holder.read_fd}) {
    const auto got = drain_records<AsyncEventRecord>(fd);
    REQUIRE(got.size() == 1);
    CHECK(got[0].type == uint32_t(verbs::EventType::qp_fatal));
    CHECK(got[0].object == p.qb);
  }
  CHECK(drain_records<AsyncEventRecord>(events_other.read_fd).empty());
}

TEST_CASE("an SRQ limit event goes to the session that owns the SRQ", "[queues][events]") {
  ServedPair s;
  Pair& p = s.pair;
  // A second connection between a and b whose b side takes its receives from an SRQ (limit 2).
  SrqConnection c(s, SrqConnection::Side::b, 16, 2);

  Pipe events_a, events_b, events_other;
  s.qa.set_event_pipe(ServedPair::session_a, events_a.write_fd);
  s.qb.set_event_pipe(ServedPair::session_b, events_b.write_fd);
  s.qb.set_event_pipe(99, events_other.write_fd);

  for (uint64_t i = 0; i < 3; ++i) {
    const protocol::WireSge r = sge(Pair::b_base + i * 64, 64, p.b_key);
    REQUIRE(c.srq.post(50 + i, std::span(&r, 1)) == 0);
  }
  s.pump();
  CHECK(drain_records<AsyncEventRecord>(events_b.read_fd).empty());  // 3 posted, limit 2: not below yet

  const std::vector<uint8_t> data(8, 3);
  for (uint64_t i = 0; i < 2; ++i) {
    const protocol::SendEntry e = send_entry(i, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline);
    REQUIRE(c.peer_sends.post(e, {}, data) == 0);
  }
  s.pump();
  CHECK(poll_all(s.cb.recv_cq).size() == 2);
  const auto at_b = drain_records<AsyncEventRecord>(events_b.read_fd);
  REQUIRE(at_b.size() == 1);
  CHECK(at_b[0].type == uint32_t(verbs::EventType::srq_limit_reached));
  CHECK(at_b[0].object == c.srqn);
  CHECK(drain_records<AsyncEventRecord>(events_a.read_fd).empty());
  CHECK(drain_records<AsyncEventRecord>(events_other.read_fd).empty());
}

TEST_CASE("an event for a session without an event pipe is counted as lost", "[queues][events]") {
  ServedPair s;
  Pair& p = s.pair;
  const protocol::WireSge bad = sge(Pair::b_base, 64, p.b_key + 0x100);
  REQUIRE(s.cb.recv.post(7, std::span(&bad, 1)) == 0);
  const std::vector<uint8_t> data(16, 2);
  REQUIRE(s.ca.send.post(send_entry(1, verbs::WrOpcode::send, verbs::send_inline), {}, data) == 0);
  s.pump();
  CHECK(s.qb.counters().events_lost == 1);
  CHECK(s.qb.counters().events_sent == 0);
}

}  // namespace uroce::test::service
