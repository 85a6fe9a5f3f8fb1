// A session's doorbell word (protocol/doorbell.hpp): the engine drains a session's rings when its client
// rang, and drains again without a ring while a ring still holds work it could not take in one turn.
#include <unistd.h>

#include "emulator/protocol/doorbell.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using protocol::CompletionEntry;

// The client's mapping of the daemon's page (a second mapping of the same memfd, as over the socket).
struct ClientDoorbell {
  explicit ClientDoorbell(const protocol::SharedRegion& page)
      : mapping(protocol::SharedRegion::attach(page.dup_fd(), page.size())) {}
  uint32_t* word() { return &reinterpret_cast<protocol::SessionDoorbell*>(mapping.data())->rung; }
  void ring() { protocol::doorbell_word(*reinterpret_cast<protocol::SessionDoorbell*>(mapping.data())).fetch_add(1); }
  protocol::SharedRegion mapping;
};

// Gives session A of `s` a doorbell page, as open_device does, and one turn (which looks at the rings
// anyway); returns the client's side of it.
ClientDoorbell attach_doorbell(ServedPair& s) {
  protocol::SharedRegion page = protocol::make_session_doorbell();
  ClientDoorbell bell(page);
  s.qa.attach_doorbell(ServedPair::session_a, std::move(page));
  s.pump();
  return bell;
}

protocol::SendEntry write_to_b(const Pair& p, uint64_t wr_id) {
  protocol::SendEntry w = send_entry(wr_id, verbs::WrOpcode::rdma_write);
  w.remote_addr = Pair::b_base;
  w.rkey = p.b_key;
  return w;
}

}  // namespace

TEST_CASE("with a doorbell, a posted request is taken once its client rings, not before", "[queues][doorbell]") {
  ServedPair s;
  Pair& p = s.pair;
  ClientDoorbell bell = attach_doorbell(s);

  protocol::SendEntry w = write_to_b(p, 7);
  w.num_sge = 1;
  const protocol::WireSge src = sge(Pair::a_base, 8, p.a_key);
  // Published, not rung.
  scribble(s.ca.raw_send, 0, &w, sizeof w, std::span(reinterpret_cast<const uint8_t*>(&src), sizeof src));
  CHECK_FALSE(s.qa.work_waiting());
  s.pump();
  CHECK(s.qa.counters().send_posted == 0);
  CHECK(view_of(s.ca.raw_send).load_consumer() == 0);

  bell.ring();
  CHECK(s.qa.work_waiting());
  s.pump();
  CHECK(s.qa.counters().send_posted == 1);
  const std::vector<CompletionEntry> done = poll_all(s.ca.send_cq);
  REQUIRE(done.size() == 1);
  CHECK(done[0].wr_id == 7);
  CHECK_FALSE(s.qa.work_waiting());
}

TEST_CASE("the client library rings the doorbell on every publication", "[queues][doorbell]") {
  ServedPair s;
  Pair& p = s.pair;
  ClientDoorbell bell = attach_doorbell(s);
  s.ca.send.use_doorbell(bell.word());
  s.ca.recv.use_doorbell(bell.word());

  const protocol::WireSge src = sge(Pair::a_base, 8, p.a_key);
  REQUIRE(s.ca.send.post(write_to_b(p, 1), std::span(&src, 1), {}) == 0);
  CHECK(*bell.word() == 1);
  // A batch staged and published at once rings once.
  REQUIRE(s.ca.send.stage(write_to_b(p, 2), std::span(&src, 1), {}) == 0);
  REQUIRE(s.ca.send.stage(write_to_b(p, 3), std::span(&src, 1), {}) == 0);
  CHECK(*bell.word() == 1);
  s.ca.send.publish();
  CHECK(*bell.word() == 2);
  const protocol::WireSge rsge = sge(Pair::a_base + 64, 64, p.a_key);
  REQUIRE(s.ca.recv.post(9, std::span(&rsge, 1)) == 0);
  CHECK(*bell.word() == 3);

  s.pump();
  CHECK(s.qa.counters().send_posted == 3);
  CHECK(s.qa.counters().recv_posted == 1);
  CHECK(poll_all(s.ca.send_cq).size() == 3);
}

TEST_CASE("more than a turn's burst is taken over the next turns without another ring", "[queues][doorbell]") {
  RingShape shape;
  shape.send_capacity = 64;
  shape.cq_capacity = 128;
  ServedPair s({}, shape);
  Pair& p = s.pair;
  ClientDoorbell bell = attach_doorbell(s);
  s.ca.send.use_doorbell(bell.word());
  const protocol::WireSge src = sge(Pair::a_base, 8, p.a_key);
  for (uint64_t i = 0; i < 50; ++i) REQUIRE(s.ca.send.stage(write_to_b(p, i), std::span(&src, 1), {}) == 0);
  s.ca.send.publish();  // one ring for 50 requests

  CHECK(s.qa.drain_work(p.net.now()) == 32);  // a burst per ring per turn
  CHECK(s.qa.work_waiting());
  CHECK(s.qa.drain_work(p.net.now()) == 18);  // the rest, although the word did not move again
  CHECK_FALSE(s.qa.work_waiting());
  s.pump();
  const std::vector<CompletionEntry> done = poll_all(s.ca.send_cq);
  REQUIRE(done.size() == 50);
  for (uint64_t i = 0; i < 50; ++i) CHECK(done[i].wr_id == i);
}

TEST_CASE("a scribbled doorbell only makes the engine look at that client's rings", "[queues][doorbell]") {
  ServedPair s;
  ClientDoorbell bell = attach_doorbell(s);
  for (uint32_t v : {0u, 0xffffffffu, 12345u, 7u}) {
    *bell.word() = v;
    s.pump();
  }
  CHECK(s.qa.counters().send_posted == 0);
  CHECK(s.qa.counters().malformed_wr == 0);
  // Forgetting the page of a session whose rings are still attached: they are scanned every turn again.
  s.qa.detach_session(ServedPair::session_a);
  const protocol::SendEntry w = write_to_b(s.pair, 3);
  const protocol::WireSge src = sge(Pair::a_base, 8, s.pair.a_key);
  REQUIRE(s.ca.send.post(w, std::span(&src, 1), {}) == 0);
  CHECK(s.qa.work_waiting());
}

TEST_CASE("open_device hands out a doorbell page only to a client that asks for one", "[queues][doorbell]") {
  ServiceHarness h;
  for (uint64_t session : {1, 2, 3}) h.service->open_session(session, getpid(), getuid());
  std::vector<int> fds;
  json reply = h.call(1, {{"op", "open_device"}}, &fds);
  CHECK(fds.size() == 3);
  CHECK(reply.at("fds") == json{"async_events", "wake", "engine_status"});
  close_all(fds);

  reply = h.call(2, {{"op", "open_device"}, {"doorbell", true}}, &fds);
  REQUIRE(fds.size() == 4);
  CHECK(reply.at("fds") == json{"async_events", "wake", "engine_status", "doorbell"});
  protocol::SharedRegion page = protocol::SharedRegion::attach(fds[3], sizeof(protocol::SessionDoorbell));
  fds[3] = -1;
  const auto* d = reinterpret_cast<const protocol::SessionDoorbell*>(page.data());
  CHECK(d->magic == protocol::session_doorbell_magic);
  CHECK(d->version == protocol::session_doorbell_version);
  close_all(fds);
  CHECK(h.error_of(3, {{"op", "open_device"}, {"doorbell", "yes"}}) == EINVAL);
}

}  // namespace uroce::test::service
