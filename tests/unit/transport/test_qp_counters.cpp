// Per-QP counters (what `uroce stats` shows for each queue pair) agree with what went over the wire.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;

namespace {

uroce::transport::QpCounters counters_of(const uroce::transport::Device& d, uint32_t qpn) {
  uroce::transport::QpCounters found;
  bool seen = false;
  d.for_each_qp_counters([&](uint32_t n, const uroce::transport::QpCounters& c) {
    if (n == qpn) found = c, seen = true;
  });
  REQUIRE(seen);
  return found;
}

}  // namespace

TEST_CASE("qp counters: packets and bytes each way; a missing receive shows as RNR NAKs", "[transport][counters]") {
  sim::SimNetwork net{3};
  Host a{net, ip("10.0.0.1")};
  Host b{net, ip("10.0.0.2")};
  const uint32_t a_key = a.add_buffer(1 << 16, QpParams{}.access, 0x10000000);
  const uint32_t b_key = b.add_buffer(1 << 16, QpParams{}.access, 0x20000000);
  const uint32_t qa = a.create_qp(QpType::rc), qb = b.create_qp(QpType::rc);
  QpParams params;
  params.min_rnr_timer = 1;
  connect(a, qa, QpType::rc, b.address, qb, 1000, 5000, params);
  connect(b, qb, QpType::rc, a.address, qa, 5000, 1000, params);

  // A 4-packet SEND (path MTU 1024 by default) with no receive posted: RNR NAKed, then accepted.
  REQUIRE(a.device->post_send(qa, send_wr(1, WrOpcode::send, 0x10000000, 4096, a_key), 0) == 0);
  REQUIRE(net.run_until_idle(net.now() + 1'000'000));
  REQUIRE(b.device->post_recv(qb, recv_wr(2, 0x20000000, 4096, b_key)) == 0);
  REQUIRE(net.run_until_idle(net.now() + 10'000'000'000ull));
  REQUIRE(a.poll(a.send_cq).size() == 1);

  const auto ca = counters_of(*a.device, qa), cb = counters_of(*b.device, qb);
  CHECK(cb.rnr_naks_sent >= 1);
  CHECK(ca.rnr_naks_received == cb.rnr_naks_sent);
  CHECK(ca.tx_packets == cb.rx_packets);  // a clean network: every packet sent arrived
  CHECK(cb.tx_packets == ca.rx_packets);
  CHECK(ca.tx_retransmitted > 0);         // the SEND went again after the RNR wait
  CHECK(ca.tx_payload_bytes == 4096 * (1 + ca.tx_retransmitted / 4));
  CHECK(a.device->counters().tx_packets == ca.tx_packets);
}
