// Ground truth: the requests that rxe's requester sent (from the real captures) are fed into a uroce
// responder, and what uroce answers must be what rxe's responder answered, packet for packet: opcode, PSN,
// AckReq, AETH syndrome and MSN, payload length. Neither side of those captures is uroce's code.
//
// The replay itself is pcap_tools/responder_replay.hpp, which `uroce replay` runs on any capture: only
// R_Keys and the responder's QP number are rewritten on the way in (the addresses are kept by registering
// memory at the very addresses the captures use), which changes nothing the responder's answers depend on.
// Payload bytes are not compared (READ data and atomic results depend on memory contents this test does
// not have), lengths are.
#include "pcap_tools/responder_replay.hpp"
#include "tests/unit/support/capture_file.hpp"
#include "transport/wire/build.hpp"

#include <catch2/catch.hpp>

using namespace uroce::test;
using namespace uroce::pcap_tools;
namespace wire = uroce::wire;

namespace {

std::string where(const Capture& c, const ReplayConnection& k) {
  return c.name + ": " + wire::to_string(k.requester) + " -> " + wire::to_string(k.responder) + " QP " +
         std::to_string(k.responder_qpn);
}

void show(const Comparison& cmp) {
  for (const auto& d : cmp.differences) {
    UNSCOPED_INFO("answer " << d.index << ": uroce " << (d.uroce ? to_string(*d.uroce) : "(nothing)") << " / rxe "
                            << (d.captured ? to_string(*d.captured) : "(nothing)"));
  }
}

}  // namespace

TEST_CASE("capture replay: uroce's responder answers rxe's requests exactly as rxe did", "[transport][replay]") {
  uint64_t connections = 0, compared = 0;
  for (const Capture& c : captures()) {
    for (const ReplayConnection& k : rc_connections(c.frames)) {
      INFO(where(c, k));
      const ReplayResult r = replay_responder(c.frames, k);
      REQUIRE(r.error.empty());
      CHECK(r.requests > 0);
      CHECK(k.requester_qpn != 0);
      if (c.name.find("loss") == std::string::npos) {
        const Comparison cmp = compare_exact(r.expected, r.got);
        show(cmp);
        CHECK(cmp.same());
        CHECK(cmp.matched == r.expected.size());
      } else {
        // The 5% loss of this capture was applied to rxe's answers too, before they reached the capture
        // point: some of its ACKs are missing there (e.g. only four of the six duplicate ACKs after frame
        // 100 were captured, and the ACKs for MSN 26 and 27 never were, yet MSN 28 follows). So what rxe was
        // seen to answer must appear, in order, within uroce's answers, and every answer uroce sent beyond
        // those must be a plain ACK, i.e. something a lost frame explains.
        const Comparison cmp = compare_lossy(r.expected, r.got);
        show(cmp);
        CHECK(cmp.same());
        CHECK(cmp.matched == r.expected.size());
        CHECK(r.got.size() - r.expected.size() <= r.got.size() / 10);
        // Compared answer for answer instead, the lost frames show.
        CHECK_FALSE(compare_exact(r.expected, r.got).same());
      }
      ++connections;
      compared += r.got.size();
    }
  }
  WARN(connections << " connections, " << compared << " answers compared with rxe's");
  CHECK(connections >= 10);
}

TEST_CASE("capture replay: the path MTU and the connection's shape come from the capture", "[transport][replay]") {
  const Capture c = capture("06-rc-read");
  const auto connections = rc_connections(c.frames);
  REQUIRE(connections.size() == 2);
  // QP 0x11: READs of 64 bytes, one response packet each, so no MTU shows; QP 0x12: READs of 8 KiB, whose
  // responses' FIRST and MIDDLE packets carry 1024 bytes.
  CHECK(connections[0].path_mtu == 0);
  CHECK(connections[1].path_mtu == 1024);
  for (const ReplayConnection& k : connections) {
    CHECK(k.requester_qpn == k.responder_qpn);  // (ib_read_bw's two QPs on either side)
    REQUIRE(k.regions.size() == 1);
    CHECK(k.regions.begin()->second.second > k.regions.begin()->second.first);
  }
}

TEST_CASE("capture replay: an answer changed in the capture is found, and only that one", "[transport][replay]") {
  Capture c = capture("05-rc-write");
  const ReplayConnection k = rc_connections(c.frames).at(0);
  // The captured responder's third answer gets another MSN (the frame rebuilt, so its ICRC stays good).
  size_t seen = 0;
  for (auto& bytes : c.frames) {
    wire::Frame f;
    if (wire::parse_frame(bytes, f) != wire::ParseError::none || !f.is_roce() || f.roce.info->is_request) continue;
    if (f.src_ip() != k.responder || f.roce.bth().dest_qp != k.requester_qpn || seen++ != 2) continue;
    wire::FrameSpec spec = wire::spec_from_frame(f);
    spec.headers.aeth.msn += 7;
    std::vector<uint8_t> out(wire::frame_size(spec));
    REQUIRE(wire::build_frame(spec, out).ok());
    bytes = out;
    break;
  }
  REQUIRE(seen == 3);
  const ReplayResult r = replay_responder(c.frames, k);
  const Comparison cmp = compare_exact(r.expected, r.got);
  REQUIRE(cmp.differences.size() == 1);
  CHECK(cmp.differences[0].index == 2);
  CHECK(cmp.differences[0].captured->msn == cmp.differences[0].uroce->msn + 7);
}

TEST_CASE("capture replay: requests reaching more memory than a replay registers are refused", "[transport][replay]") {
  Capture c = capture("05-rc-write");
  // Every RETH of the capture made to name 1 GiB.
  for (auto& bytes : c.frames) {
    wire::Frame f;
    if (wire::parse_frame(bytes, f) != wire::ParseError::none || !f.is_roce() ||
        !f.roce.info->has(wire::hdr_reth)) {
      continue;
    }
    wire::FrameSpec spec = wire::spec_from_frame(f);
    spec.headers.reth.dma_length = 1u << 30;
    std::vector<uint8_t> out(wire::frame_size(spec));
    REQUIRE(wire::build_frame(spec, out).ok());
    bytes = out;
  }
  const ReplayConnection k = rc_connections(c.frames).at(0);
  const ReplayResult r = replay_responder(c.frames, k);
  CHECK(r.error.find("more than the 256 MiB") != std::string::npos);
  CHECK(r.got.empty());
}

TEST_CASE("capture replay: the two comparisons", "[transport][replay]") {
  const Answer ack{0x11, 5, false, 0x1f, 1, 0}, nak{0x11, 6, false, 0x60, 1, 0}, read{0x10, 7, false, 0, 2, 8};
  CHECK(compare_exact({ack, read}, {ack, read}).same());
  const Comparison shorter = compare_exact({ack, read}, {ack});
  REQUIRE(shorter.differences.size() == 1);
  CHECK(!shorter.differences[0].uroce);
  CHECK(shorter.differences[0].captured == read);
  // Lossy: uroce's extra plain ACK is explained by a lost frame, an extra NAK is not, and every captured
  // answer must be found in order.
  CHECK(compare_lossy({read}, {ack, read}).same());
  CHECK_FALSE(compare_lossy({read}, {nak, read}).same());
  CHECK_FALSE(compare_lossy({read, ack}, {ack, read}).same());
}
