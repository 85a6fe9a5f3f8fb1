// Packet pacing (transport/packet_pacing.hpp): the token bucket alone, then a raw packet QP paced through
// the device on the simulated network's clock, and the requests a device refuses.
#include "tests/unit/support/test_frames.hpp"
#include "tests/unit/transport/transport_fixture.hpp"

#include "transport/packet_pacing.hpp"

using namespace uroce::test;
using uroce::transport::PacingLimits;
using uroce::transport::PacketPacer;

namespace {

constexpr Nanos ms = 1'000'000;

int set_rate(Device& d, uint32_t qpn, uint32_t kbps, uint32_t burst) {
  QpAttr a;
  a.rate_limit = kbps;
  a.max_burst_sz = burst;
  return d.modify_qp(qpn, a, attr_rate_limit, 0);
}

}  // namespace

TEST_CASE("packet pacer: a full bucket's burst at once, then one frame per frame time", "[transport][pacing]") {
  // 8,000 kbit/s is a byte a microsecond: a 1,000-byte frame takes 1 ms; the bucket holds 3,000 bytes.
  PacketPacer p(8'000, 3'000);
  Nanos now = 0;
  std::vector<Nanos> sent;
  for (int i = 0; i < 10; ++i) {
    if (!p.allows(now)) now = p.next_send_time();
    REQUIRE(p.allows(now));
    sent.push_back(now);
    p.on_sent(1'000, now);
  }
  // The first frame, then the 3,000 bytes the bucket holds, then 1 ms apart.
  CHECK(sent == std::vector<Nanos>{0, 0, 0, 0, 1 * ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms, 6 * ms});
  // Idle for a long time: the bucket fills to its size, not beyond.
  now = 100 * ms;
  int at_once = 0;
  while (p.allows(now)) {
    p.on_sent(1'000, now);
    ++at_once;
  }
  CHECK(at_once == 4);
  // Frame times round up: 1 byte at 3 kbit/s is 2,666.67 us, never less.
  PacketPacer slow(3, 1);
  slow.on_sent(1, 0);
  CHECK(slow.next_send_time() == 0);  // the bucket holds that one byte: the next may go at once
  slow.on_sent(1, 0);
  CHECK(slow.next_send_time() == 2'666'667);
  // No burst named: one frame of the largest raw size.
  CHECK(PacketPacer(1'000, 0).burst_bytes() == PacingLimits::default_burst_bytes);
}

TEST_CASE("raw packet QP: a rate limit paces its frames on the wire, and lifting it lets the rest go",
          "[transport][raw][pacing]") {
  sim::SimNetwork net(3);
  Host a(net, ip("10.0.0.1"));
  Host b(net, ip("10.0.0.2"));
  const uint32_t key = a.add_buffer(16384, access_local_write, 0x10000);
  const uint32_t q = a.create_qp(QpType::raw_packet);
  raw_to_rts(*a.device, q);
  std::vector<Nanos> wire;
  net.set_capture([&](const sim::CaptureEvent& e) {
    if (e.point == sim::CapturePoint::transmitted && e.from == a.node) wire.push_back(e.time);
  });
  // Frames of 1,000 bytes to B's MAC (which takes none: no rule), at 8,000 kbit/s with a 2,000-byte bucket.
  frames::FrameParts parts{.dst = net.mac(b.node), .src = net.mac(a.node), .payload = frames::Bytes(958)};
  const auto frame = frames::build(parts).bytes;
  REQUIRE(frame.size() == 1'000);
  put(a.buffer(0), 0, frame);
  REQUIRE(set_rate(*a.device, q, 8'000, 2'000) == 0);
  for (uint64_t i = 0; i < 8; ++i) {
    REQUIRE(a.device->post_send(q, send_wr(i, WrOpcode::send, 0x10000, 1'000, key), net.now()) == 0);
  }
  net.run_until(4 * ms + ms / 2);
  CHECK(wire == std::vector<Nanos>{0, 0, 0, 1 * ms, 2 * ms, 3 * ms, 4 * ms});
  CHECK(a.device->counters().paced_stops >= 4);
  // Each send completes when its frame goes.
  CHECK(expect_success(a, a.send_cq, 7).size() == 7);

  // Rate 0 lifts the limit: the last frame goes at once, and so do the next.
  REQUIRE(set_rate(*a.device, q, 0, 0) == 0);
  for (uint64_t i = 8; i < 10; ++i) {
    REQUIRE(a.device->post_send(q, send_wr(i, WrOpcode::send, 0x10000, 1'000, key), net.now()) == 0);
  }
  net.run_until_idle(net.now() + 1 * ms);
  REQUIRE(wire.size() == 10);
  CHECK(wire[7] == wire[9]);
  CHECK(wire[7] < 5 * ms);
  CHECK(expect_success(a, a.send_cq, 3).size() == 3);

  // RESET forgets the rate, as mlx5 frees the QP's rate entry: back in RTS, frames go unpaced.
  REQUIRE(set_rate(*a.device, q, 8'000, 1) == 0);
  QpAttr reset;
  reset.qp_state = QpState::reset;
  REQUIRE(a.device->modify_qp(q, reset, attr_state, 0) == 0);
  raw_to_rts(*a.device, q);
  for (uint64_t i = 10; i < 14; ++i) {
    REQUIRE(a.device->post_send(q, send_wr(i, WrOpcode::send, 0x10000, 1'000, key), net.now()) == 0);
  }
  net.run_until_idle(net.now() + 1 * ms);
  REQUIRE(wire.size() == 14);
  CHECK(wire[10] == wire[13]);
  CHECK(expect_success(a, a.send_cq, 4).size() == 4);
}

TEST_CASE("packet pacing: the range, the QP types and the states that take a rate", "[transport][raw][pacing]") {
  sim::SimNetwork net(1);
  Host h(net, ip("10.0.0.1"));
  const uint32_t raw = h.create_qp(QpType::raw_packet);
  CHECK(set_rate(*h.device, raw, 1'000, 0) == EINVAL);  // RESET: only RTR->RTS and RTS->RTS take it
  raw_to_rts(*h.device, raw);
  CHECK(set_rate(*h.device, raw, PacingLimits::min_kbps, 0) == 0);
  CHECK(set_rate(*h.device, raw, PacingLimits::max_kbps, 0) == 0);
  CHECK(set_rate(*h.device, raw, PacingLimits::max_kbps + 1, 0) == EINVAL);
  CHECK(set_rate(*h.device, raw, 0, 0) == 0);
  const uint32_t rc = h.create_qp(QpType::rc);
  CHECK(set_rate(*h.device, rc, 1'000, 0) == EINVAL);  // Linux 6.1 takes IB_QP_RATE_LIMIT for raw QPs only
}
