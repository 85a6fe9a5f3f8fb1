// Device::take_active_cqs: the CQs that got completions, in the order of their first one. uroced delivers
// completions (and their events) in this order, as a NIC writes completion events in completion order:
// programs waiting for a send CQ and a receive CQ on one completion channel rely on it.

#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;

TEST_CASE("cq order: CQs are listed in the order of their first new completion, once until taken",
          "[transport][cq]") {
  Pair p;
  constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;
  std::vector<uint32_t> active;
  p.b.device->take_active_cqs(active);  // whatever the setup left
  REQUIRE(p.b.send_cq < p.b.recv_cq);   // so that the order below is not the order of the CQ numbers

  // b receives first (its receive CQ), then sends and is acknowledged (its send CQ), then receives again.
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(1, b_base, 64, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(2, b_base, 64, p.b_key)) == 0);
  REQUIRE(p.a.device->post_recv(p.qa, recv_wr(3, a_base, 64, p.a_key)) == 0);
  REQUIRE(p.post_a(send_wr(10, WrOpcode::send, a_base, 8, p.a_key)) == 0);
  REQUIRE(p.run());
  REQUIRE(p.post_b(send_wr(11, WrOpcode::send, b_base, 8, p.b_key)) == 0);
  REQUIRE(p.run());
  REQUIRE(p.post_a(send_wr(12, WrOpcode::send, a_base, 8, p.a_key)) == 0);
  REQUIRE(p.run());

  p.b.device->take_active_cqs(active);
  CHECK(active == std::vector<uint32_t>{p.b.recv_cq, p.b.send_cq});
  p.b.device->take_active_cqs(active);
  CHECK(active.empty());
  CHECK(p.b.poll(p.b.recv_cq).size() == 2);
  CHECK(p.b.poll(p.b.send_cq).size() == 1);
}

TEST_CASE("completion timestamps: each completion carries the device's clock when it was made",
          "[transport][cq]") {
  Pair p;
  constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;
  constexpr Nanos delay = 10'000;  // each way
  sim::LinkProfile link;
  link.delay = delay;
  p.net.set_default_profile(link);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(1, b_base, 64, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(2, b_base, 64, p.b_key)) == 0);
  p.run_for(5'000'000);  // the clock is not where the setup left it
  const uint64_t posted = p.net.now();
  REQUIRE(p.post_a(send_wr(10, WrOpcode::send, a_base, 8, p.a_key)) == 0);
  REQUIRE(p.run());
  const auto received = p.b.poll(p.b.recv_cq);
  const auto sent = p.a.poll(p.a.send_cq);
  REQUIRE(received.size() == 1);
  REQUIRE(sent.size() == 1);
  // The receive completes when the SEND arrives, one delay after it left; the send when its ACK is back.
  CHECK(received[0].timestamp == posted + delay);
  CHECK(sent[0].timestamp == posted + 2 * delay);

  // A message 3 ms of device time later is stamped 3 ms later.
  p.run_for(3'000'000);
  REQUIRE(p.post_a(send_wr(11, WrOpcode::send, a_base, 8, p.a_key)) == 0);
  REQUIRE(p.run());
  const auto again = p.b.poll(p.b.recv_cq);
  REQUIRE(again.size() == 1);
  CHECK(again[0].timestamp - received[0].timestamp >= 3'000'000);
}
