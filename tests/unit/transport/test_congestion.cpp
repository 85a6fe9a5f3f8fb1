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

  // Within the interval (50 us) of a CNP, marked packets make no other; after it, one more. (Times from one
  // instant: run() lets virtual time pass, the sender's rate recovering meanwhile.)
  const uroce::transport::Nanos t = p.net.now();
  p.b.device->receive(ce, t);           // long after the first CNP: a CNP
  p.b.device->receive(ce, t + 10'000);  // within 50 us of it: none
  p.b.device->receive(ce, t + 40'000);  // none
  p.b.device->receive(ce, t + 60'000);  // a CNP
  CHECK(p.b.device->counters().rx_ecn_ce == 5);
  CHECK(p.b.device->counters().cnp_sent == 3);
  REQUIRE(p.run());
  CHECK(log.sent(p.b.node, is_cnp).size() == 3);
  CHECK(p.a.device->counters().rx_cnp == 3);
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

namespace {

struct Bottleneck {
  uint64_t frames = 0, marked = 0, cnps = 0, cuts = 0, paced = 0;
  double gbps = 0;  // goodput
  bool delivered = false;
};

// a sends 16 MiB of RDMA WRITEs to b through a 10 Gb/s link whose queue marks ECT packets CE from 16 KB
// (always from 64 KB), as a DCQCN switch; b answers marks with CNPs unless `notify` is off.
Bottleneck through_bottleneck(bool notify) {
  PairConfig config;
  config.buffer_size = 1 << 20;
  Pair p(config);
  uroce::sim::LinkProfile bottleneck;
  bottleneck.bandwidth = 1'250'000'000;  // bytes/s
  bottleneck.ecn_kmin = 16 * 1024;
  bottleneck.ecn_kmax = 64 * 1024;
  bottleneck.ecn_pmax = 1.0;
  p.net.set_link_profile(p.a.node, p.b.node, bottleneck);
  uroce::transport::CongestionConfig b_config;
  b_config.notify = notify;
  p.b.device->set_congestion(b_config);
  for (size_t i = 0; i < config.buffer_size; ++i) p.a.buffer(0)[i] = uint8_t(i * 7 + 3);
  constexpr uint32_t size = 64 * 1024, count = 256;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t offset = uint64_t(i % 16) * size;
    REQUIRE(p.post_a(rdma_wr(i, WrOpcode::rdma_write, Pair::a_base + offset, size, p.a_key, Pair::b_base + offset,
                             p.b_key, i + 1 == count)) == 0);
  }
  Bottleneck r;
  const uroce::transport::Nanos start = p.net.now();
  bool done = false;
  while (!done && p.net.now() - start < 10'000'000'000ull) {  // until the last WRITE completes
    p.run_for(100'000);
    done = !p.a.poll(p.a.send_cq).empty();
  }
  r.delivered = done && p.b.buffer(0) == p.a.buffer(0);
  r.gbps = double(size) * count * 8 / double(p.net.now() - start);
  const auto link = p.net.link_stats(p.a.node, p.b.node);
  r.frames = link.frames_sent;
  r.marked = link.ecn_marked;
  r.cnps = p.b.device->counters().cnp_sent;
  r.cuts = p.a.device->counters().rate_cuts;
  r.paced = p.a.device->counters().paced_stops;
  return r;
}

}  // namespace

TEST_CASE("congestion: DCQCN end to end, a fast sender into a marking 10 Gb/s bottleneck", "[transport][congestion]") {
  // Without CNPs the sender keeps the queue full (its window's worth): nearly every packet is marked.
  const Bottleneck open = through_bottleneck(false);
  REQUIRE(open.delivered);
  CHECK(open.cnps == 0);
  CHECK(open.cuts == 0);
  CHECK(open.marked > open.frames / 2);
  // With them its rate falls to what the bottleneck carries: the queue drains below the marking
  // threshold most of the time, and the data still arrives whole, once.
  const Bottleneck controlled = through_bottleneck(true);
  REQUIRE(controlled.delivered);
  CHECK(controlled.cnps > 0);
  CHECK(controlled.cuts > 0);
  CHECK(controlled.paced > 0);
  UNSCOPED_INFO("marked without CNPs " << open.marked << "/" << open.frames << ", with " << controlled.marked << "/"
                << controlled.frames << "; CNPs " << controlled.cnps << ", cuts " << controlled.cuts
                << "; goodput " << open.gbps << " / " << controlled.gbps << " Gb/s");
  CHECK(controlled.marked * 4 < open.marked);  // (measured: 741 of 16384 against 16341)
  CHECK(controlled.gbps > 7.0);                // and the bottleneck stays busy (measured: 8.5 of 10 Gb/s)
}
