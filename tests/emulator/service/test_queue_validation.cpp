// What the QueueService does with work requests it must not pass on as they are: malformed entries a
// client wrote straight into its ring, requests the transport has no room for yet, and scribbled indexes.
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using protocol::CompletionEntry;
using protocol::SendEntry;

std::span<const uint8_t> bytes_of(const std::vector<protocol::WireSge>& sges) {
  return {reinterpret_cast<const uint8_t*>(sges.data()), sges.size() * sizeof(protocol::WireSge)};
}

}  // namespace

TEST_CASE("malformed send entries complete with an error instead of reaching the transport", "[queues]") {
  ServedPair s;  // the daemon allows 4 SGEs and 64 bytes inline on a's QP
  Pair& p = s.pair;
  const protocol::WireSge rsge = sge(Pair::b_base, 4096, p.b_key);
  REQUIRE(s.cb.recv.post(100, std::span(&rsge, 1)) == 0);
  const uint64_t frames_before = p.net.stats().transmitted;

  SendEntry bad_opcode = send_entry(1, verbs::WrOpcode::send);
  bad_opcode.opcode = 200;
  scribble(s.ca.raw_send, 0, &bad_opcode, sizeof bad_opcode);

  // Five SGEs claimed, four allowed: the fifth would be read from beyond what the slot was sized for.
  SendEntry too_many_sges = send_entry(2, verbs::WrOpcode::send);
  too_many_sges.num_sge = 5;
  scribble(s.ca.raw_send, 1, &too_many_sges, sizeof too_many_sges,
           bytes_of(std::vector<protocol::WireSge>(4, sge(Pair::a_base, 1, p.a_key))));

  SendEntry too_much_inline = send_entry(3, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline);
  too_much_inline.inline_length = 65;
  scribble(s.ca.raw_send, 2, &too_much_inline, sizeof too_much_inline);

  // A request the ring format can hold but the transport refuses when it is posted (an atomic on an
  // address that is not 8-byte aligned).
  SendEntry unaligned = send_entry(4, verbs::WrOpcode::atomic_fetch_and_add);
  unaligned.remote_addr = Pair::b_base + 4;
  unaligned.rkey = p.b_key;
  unaligned.num_sge = 1;
  scribble(s.ca.raw_send, 3, &unaligned, sizeof unaligned,
           bytes_of(std::vector<protocol::WireSge>(1, sge(Pair::a_base, 8, p.a_key))));

  // Malformed entries are not sent, so they must not have consumed anything but their own slot.
  REQUIRE(s.qa.drain_work(p.net.now()) == 4);
  CHECK(s.qa.counters().malformed_wr == 4);
  CHECK(s.qa.counters().send_posted == 0);
  REQUIRE(p.run());
  CHECK(p.net.stats().transmitted == frames_before);

  // A valid request after them still goes through.
  SendEntry good = send_entry(5, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline);
  good.inline_length = 8;
  const std::vector<uint8_t> payload = pattern(8, 7);
  scribble(s.ca.raw_send, 4, &good, sizeof good, payload);
  s.pump();

  const std::vector<CompletionEntry> done = poll_all(s.ca.send_cq);
  REQUIRE(done.size() == 5);
  for (int i = 0; i < 4; ++i) {
    CHECK(done[size_t(i)].wr_id == uint64_t(i + 1));
    CHECK(done[size_t(i)].status == uint32_t(verbs::WcStatus::loc_qp_op_err));
    CHECK(done[size_t(i)].qp_num == p.qa);
  }
  CHECK(done[4].wr_id == 5);
  CHECK(done[4].status == uint32_t(verbs::WcStatus::success));
  CHECK(s.qa.counters().malformed_wr == 4);
  CHECK(s.qa.counters().send_posted == 1);

  const std::vector<CompletionEntry> received = poll_all(s.cb.recv_cq);
  REQUIRE(received.size() == 1);  // only the valid SEND reached b
  CHECK(received[0].byte_len == 8);
  CHECK((slice(p.b.buffer(0), 0, 8) == payload));
}

TEST_CASE("a malformed receive entry is dropped and counted, the next one is posted", "[queues]") {
  ServedPair s;
  protocol::RecvEntry bad{7, 5, 0};  // five SGEs, four allowed
  scribble(s.cb.raw_recv, 0, &bad, sizeof bad);
  const protocol::RecvEntry good{8, 0, 0};
  scribble(s.cb.raw_recv, 1, &good, sizeof good);
  CHECK(s.qb.drain_work(s.pair.net.now()) == 2);
  CHECK(s.qb.counters().malformed_wr == 1);
  CHECK(s.qb.counters().recv_posted == 1);
}

TEST_CASE("a full transport send queue leaves the work request in the ring, none is lost", "[queues]") {
  PairConfig config;
  config.max_wr = 2;  // the transport's send queue holds two requests; the ring holds sixteen
  ServedPair s(config);
  Pair& p = s.pair;
  for (uint64_t i = 0; i < 5; ++i) {
    const protocol::WireSge rsge = sge(Pair::b_base + i * 64, 64, p.b_key);
    REQUIRE(s.cb.recv.post(100 + i, std::span(&rsge, 1)) == 0);
  }
  REQUIRE(s.qb.drain_work(p.net.now()) == 2);  // b's receive queue is as small: two now
  for (uint64_t i = 0; i < 5; ++i) {
    const std::vector<uint8_t> data(16, uint8_t(0xa0 + i));
    REQUIRE(s.ca.send.post(send_entry(i, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline), {}, data) == 0);
  }

  // Nothing has been sent yet, so the transport takes two and refuses the third (ENOMEM).
  CHECK(s.qa.drain_work(p.net.now()) == 2);
  CHECK(s.qa.counters().send_posted == 2);
  CHECK(s.qa.counters().malformed_wr == 0);
  CHECK(view_of(s.ca.raw_send).load_consumer() == 2);  // the third is still the client's
  CHECK(s.qa.work_waiting());
  CHECK(s.qa.drain_work(p.net.now()) == 0);  // and stays there while the queue is full

  s.pump();
  const std::vector<CompletionEntry> sent = poll_all(s.ca.send_cq);
  REQUIRE(sent.size() == 5);
  const std::vector<CompletionEntry> received = poll_all(s.cb.recv_cq);
  REQUIRE(received.size() == 5);
  for (uint64_t i = 0; i < 5; ++i) {
    CHECK(sent[i].wr_id == i);
    CHECK(sent[i].status == uint32_t(verbs::WcStatus::success));
    CHECK(received[i].wr_id == 100 + i);
    CHECK(received[i].status == uint32_t(verbs::WcStatus::success));
    CHECK(p.b.buffer(0)[i * 64] == uint8_t(0xa0 + i));  // in order, each in its own receive
  }
  CHECK(s.qa.counters().send_posted == 5);
  CHECK_FALSE(s.qa.work_waiting());
}

TEST_CASE("a scribbled producer index makes the engine take nothing", "[queues]") {
  ServedPair s;
  const SendEntry wr = send_entry(1, verbs::WrOpcode::send);
  scribble(s.ca.raw_send, 0, &wr, sizeof wr);
  view_of(s.ca.raw_send).publish_producer(1000);  // claims 1000 entries in a 16-entry ring
  CHECK_FALSE(s.qa.work_waiting());
  CHECK(s.qa.drain_work(s.pair.net.now()) == 0);
  CHECK(s.qa.counters().send_posted == 0);
  CHECK(s.qa.counters().malformed_wr == 0);
  CHECK(view_of(s.ca.raw_send).load_consumer() == 0);
}

TEST_CASE("completions wait in the transport while the client's ring is full", "[queues]") {
  RingShape shape;
  shape.cq_capacity = 4;
  ServedPair s({}, shape);
  Pair& p = s.pair;
  for (uint64_t i = 0; i < 6; ++i) {
    protocol::SendEntry w = send_entry(i, verbs::WrOpcode::rdma_write);
    w.remote_addr = Pair::b_base;
    w.rkey = p.b_key;
    const protocol::WireSge src = sge(Pair::a_base, 8, p.a_key);
    REQUIRE(s.ca.send.post(w, std::span(&src, 1), {}) == 0);
  }
  s.pump();
  std::vector<CompletionEntry> first = poll_all(s.ca.send_cq);
  REQUIRE(first.size() == 4);  // the ring's capacity; two are held back, not lost
  s.pump();
  std::vector<CompletionEntry> rest = poll_all(s.ca.send_cq);
  REQUIRE(rest.size() == 2);
  for (uint64_t i = 0; i < 4; ++i) CHECK(first[i].wr_id == i);
  CHECK(rest[0].wr_id == 4);
  CHECK(rest[1].wr_id == 5);
}

}  // namespace uroce::test::service
