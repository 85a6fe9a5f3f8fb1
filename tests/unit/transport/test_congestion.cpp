// The congestion notification point: a packet that a switch marked Congestion Experienced makes its
// receiver send the sender's QP a CNP (opcode 0x81, BECN, PSN 0, 16 reserved bytes, DSCP 48 + ECT(0) as a
// ConnectX sends it), at most one per QP per interval; a CNP that arrives is counted.
#include "tests/unit/transport/transport_fixture.hpp"

#include "transport/wire/frame.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

// The frame with its IPv4 ECN bits set to CE, as a marking switch leaves it (header checksum fixed; the
// ICRC does not cover the TOS byte).
std::vector<uint8_t> marked_ce(std::vector<uint8_t> frame, size_t l3) {
  frame[l3 + 1] |= 0x03;
  frame[l3 + 10] = frame[l3 + 11] = 0;
  uint32_t sum = 0;
  for (size_t i = 0; i < 20; i += 2) sum += uint32_t(frame[l3 + i] << 8 | frame[l3 + i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  frame[l3 + 10] = uint8_t(~sum >> 8);
  frame[l3 + 11] = uint8_t(~sum);
  return frame;
}

bool is_cnp(const WireFrame& f) { return f.is(wire::Opcode::cnp); }

}  // namespace

TEST_CASE("congestion: a CE-marked packet is answered with one CNP per interval to the sender's QP",
          "[transport][congestion]") {
  Pair p;
  WireLog log(p.net);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(1, Pair::b_base, 4096, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(2, WrOpcode::send, Pair::a_base, 256, p.a_key)) == 0);
  REQUIRE(p.run());
  const auto sends = log.sent(p.a.node, [](const WireFrame& f) { return f.is(wire::Opcode::rc_send_only); });
  REQUIRE(sends.size() == 1);
  CHECK(log.sent(p.b.node, is_cnp).empty());  // nothing was marked: no CNP

  // The SEND again (a duplicate: re-ACKed), marked CE on the way.
  const std::vector<uint8_t> ce = marked_ce(sends[0].bytes, sends[0].l3_offset);
  wire::Frame parsed;
  REQUIRE(wire::parse_frame(ce, parsed) == wire::ParseError::none);
  REQUIRE(parsed.ecn() == wire::Ecn::ce);
  REQUIRE(wire::icrc_ok(parsed));
  p.b.device->receive(ce, p.net.now());
  REQUIRE(p.run());

  const auto cnps = log.sent(p.b.node, is_cnp);
  REQUIRE(cnps.size() == 1);
  const WireFrame& cnp = cnps[0];
  CHECK(cnp.headers.bth.becn);
  CHECK(cnp.headers.bth.dest_qp == p.qa);
  CHECK(cnp.headers.bth.psn == 0);
  CHECK(cnp.headers.bth.pkey == 0xffff);
  wire::Frame f;
  REQUIRE(wire::parse_frame(cnp.bytes, f) == wire::ParseError::none);
  CHECK(wire::icrc_ok(f));
  CHECK(f.ipv4.tos == 0xc2);  // DSCP 48, ECT(0): the golden ConnectX-4 Lx CNP's TOS
  CHECK(f.dst_ip() == p.a.address);
  CHECK(f.roce.payload.empty());  // 16 reserved bytes, no payload
  CHECK(p.b.device->counters().rx_ecn_ce == 1);
  CHECK(p.b.device->counters().cnp_sent == 1);
  CHECK(p.a.device->counters().rx_cnp == 1);  // delivered to the sender's device, and counted

  // Within the interval (50 us): marked packets make no second CNP. After it: one more.
  p.b.device->receive(ce, p.net.now());
  p.b.device->receive(ce, p.net.now() + 10'000);
  REQUIRE(p.run());
  CHECK(log.sent(p.b.node, is_cnp).size() == 1);
  CHECK(p.b.device->counters().rx_ecn_ce == 3);
  p.run_for(60'000);
  p.b.device->receive(ce, p.net.now());
  REQUIRE(p.run());
  CHECK(log.sent(p.b.node, is_cnp).size() == 2);
  CHECK(p.a.device->counters().rx_cnp == 2);
}

TEST_CASE("congestion: no CNPs when notification is off", "[transport][congestion]") {
  SECTION("off") {
    Pair p;
    WireLog log(p.net);
    uroce::transport::CongestionConfig off;
    off.notify = false;
    p.b.device->set_congestion(off);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(1, Pair::b_base, 4096, p.b_key)) == 0);
    REQUIRE(p.post_a(send_wr(2, WrOpcode::send, Pair::a_base, 64, p.a_key)) == 0);
    REQUIRE(p.run());
    const auto sends = log.sent(p.a.node, [](const WireFrame& f) { return f.is(wire::Opcode::rc_send_only); });
    REQUIRE(sends.size() == 1);
    p.b.device->receive(marked_ce(sends[0].bytes, sends[0].l3_offset), p.net.now());
    REQUIRE(p.run());
    CHECK(p.b.device->counters().rx_ecn_ce == 1);  // still counted
    CHECK(log.sent(p.b.node, is_cnp).empty());
  }
}
