// Ground truth, the other way round: the work requests behind rxe's requests (from the captures) are
// posted to a uroce requester, rxe's answers are fed back to it, and every request uroce sends must be
// the one rxe sent, field by field (opcode, PSN, destination QP, AckReq, SE, payload bytes, RETH, ImmDt,
// IETH, AtomicETH); every work request must complete successfully, READs with the bytes rxe's responder
// returned and atomics with the original values it reported.
//
// The replay itself is pcap_tools/requester_replay.hpp, which `uroce replay --side requester` runs on any
// capture. Clean captures only: in the lossy one, which packets rxe retransmitted depends on when NAKs and
// timeouts happened, which a replay cannot reproduce, and the replay says so instead of comparing (the
// responder direction of that capture is checked in test_capture_replay.cpp).
#include "pcap_tools/requester_replay.hpp"
#include "tests/unit/support/capture_file.hpp"
#include "transport/wire/build.hpp"

#include <catch2/catch.hpp>

using namespace uroce::test;
using namespace uroce::pcap_tools;
namespace wire = uroce::wire;

namespace {

template <class T>
void show(const SequenceComparison<T>& cmp, const char* what) {
  for (const auto& d : cmp.differences) {
    UNSCOPED_INFO(what << " " << d.index << ": uroce " << (d.uroce ? to_string(*d.uroce) : "(nothing)") << " / rxe "
                       << (d.captured ? to_string(*d.captured) : "(nothing)")
                       << (d.uroce && d.captured ? " -- " + what_differs(*d.uroce, *d.captured) : ""));
  }
}

// The capture's frames with the `nth` request of connection `k` (from 0) rebuilt after `change`.
template <class Change>
FrameBytes with_request_changed(FrameBytes frames, const ReplayConnection& k, size_t nth, Change change) {
  size_t seen = 0;
  for (auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f) || !is_request_of(f, k) || seen++ != nth) continue;
    wire::FrameSpec spec = wire::spec_from_frame(f);
    const std::vector<uint8_t> payload(f.roce.payload.begin(), f.roce.payload.end());
    std::vector<uint8_t> changed_payload = payload;
    change(spec, changed_payload);
    spec.payload = changed_payload;
    std::vector<uint8_t> out(wire::frame_size(spec));
    REQUIRE(wire::build_frame(spec, out).ok());
    bytes = out;
    break;
  }
  REQUIRE(seen > nth);
  return frames;
}

}  // namespace

TEST_CASE("requester replay: uroce's requester sends what rxe's sent, and completes on rxe's answers",
          "[transport][replay]") {
  uint64_t flows = 0, compared = 0, reads = 0, atomics = 0;
  for (const Capture& c : captures()) {
    if (c.name.find("loss") != std::string::npos) continue;
    for (const ReplayConnection& k : rc_connections(c.frames)) {
      INFO(c.name << ": " << wire::to_string(k.requester) << " QP 0x" << std::hex << k.requester_qpn << " -> QP 0x"
                  << k.responder_qpn << std::dec);
      const RequesterReplayResult r = replay_requester(c.frames, k);
      REQUIRE(r.error.empty());
      REQUIRE(r.skipped.empty());
      CHECK(r.work_requests > 0);
      CHECK(r.answers > 0);
      const RequesterComparison cmp = compare_requester(r);
      show(cmp.requests, "request");
      show(cmp.completions, "completion");
      CHECK(r.got.size() == r.expected.size());
      CHECK(cmp.requests.same());
      // Every work request completed successfully, in order, READs with rxe's bytes and atomics with its
      // original values.
      CHECK(r.expected_completions.size() == r.work_requests);
      CHECK(cmp.completions.same());
      for (const Completion& done : r.got_completions) {
        CHECK(done.status == uroce::verbs::WcStatus::success);
        if (done.opcode == uroce::verbs::WcOpcode::rdma_read) {
          CHECK(!done.read.empty());
          ++reads;
        }
        atomics += done.opcode == uroce::verbs::WcOpcode::comp_swap || done.opcode == uroce::verbs::WcOpcode::fetch_add;
      }
      compared += r.got.size();
      ++flows;
    }
  }
  WARN(flows << " requester flows, " << compared << " requests compared with rxe's, " << reads << " READs and "
             << atomics << " atomics completed with rxe's data");
  CHECK(flows >= 8);
  CHECK(reads > 0);
  CHECK(atomics > 0);
}

TEST_CASE("requester replay: a lossy capture is skipped, with the reason", "[transport][replay]") {
  const Capture& c = capture("11-rc-write-loss5");
  const auto connections = rc_connections(c.frames);
  REQUIRE(!connections.empty());
  for (const ReplayConnection& k : connections) {
    const RequesterReplayResult r = replay_requester(c.frames, k);
    CHECK(r.error.empty());
    CHECK_THAT(r.skipped, Catch::Contains("retransmission") || Catch::Contains("NAK") ||
                              Catch::Contains("not in the capture"));
    CHECK(r.got.empty());
    CHECK(r.expected.empty());
  }
}

TEST_CASE("requester replay: a request changed in the capture is found, and only that one", "[transport][replay]") {
  const Capture& c = capture("05-rc-write");
  const ReplayConnection k = rc_connections(c.frames).at(0);
  SECTION("a WRITE's DMA length") {
    const FrameBytes changed = with_request_changed(
        c.frames, k, 3, [](wire::FrameSpec& spec, std::vector<uint8_t>&) { spec.headers.reth.dma_length += 1; });
    const RequesterComparison cmp = compare_requester(replay_requester(changed, k));
    REQUIRE(cmp.requests.differences.size() == 1);
    CHECK(cmp.requests.differences[0].index == 3);
    CHECK_THAT(what_differs(*cmp.requests.differences[0].uroce, *cmp.requests.differences[0].captured),
               Catch::StartsWith("DMA length"));
    CHECK(cmp.completions.same());
  }
  SECTION("a payload byte: not a difference, the work request carries it") {
    // A request's payload is read off the captured packets into the work request's data, so a changed byte
    // is sent by uroce too: what the payload comparison checks is that each byte goes out where it was.
    const FrameBytes changed = with_request_changed(c.frames, k, 3, [](wire::FrameSpec&, std::vector<uint8_t>& p) {
      REQUIRE(p.size() > 17);
      p[17] ^= 0x5a;
    });
    CHECK(compare_requester(replay_requester(changed, k)).same());
  }
  SECTION("AckReq") {
    const FrameBytes changed = with_request_changed(
        c.frames, k, 2, [](wire::FrameSpec& spec, std::vector<uint8_t>&) { spec.headers.bth.ack_req ^= true; });
    const RequesterComparison cmp = compare_requester(replay_requester(changed, k));
    REQUIRE(cmp.requests.differences.size() == 1);
    CHECK(cmp.requests.differences[0].index == 2);
    CHECK_THAT(what_differs(*cmp.requests.differences[0].uroce, *cmp.requests.differences[0].captured),
               Catch::StartsWith("AckReq"));
  }
}

TEST_CASE("requester replay: a captured READ's data is what its work request must bring", "[transport][replay]") {
  const Capture& c = capture("06-rc-read");
  const ReplayConnection k = rc_connections(c.frames).at(1);
  // The first READ response's first payload byte changed: uroce's READ brings the changed byte, and
  // its requests stay the same.
  FrameBytes frames = c.frames;
  uint8_t changed_byte = 0;
  for (auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f) || !is_answer_to(f, k) || f.roce.payload.empty()) continue;
    wire::FrameSpec spec = wire::spec_from_frame(f);
    std::vector<uint8_t> payload(f.roce.payload.begin(), f.roce.payload.end());
    changed_byte = payload[0] ^= 0xff;
    spec.payload = payload;
    std::vector<uint8_t> out(wire::frame_size(spec));
    REQUIRE(wire::build_frame(spec, out).ok());
    bytes = out;
    break;
  }
  const RequesterReplayResult r = replay_requester(frames, k);
  const RequesterComparison cmp = compare_requester(r);
  CHECK(cmp.requests.same());
  CHECK(cmp.completions.same());
  REQUIRE(!r.got_completions.empty());
  REQUIRE(!r.got_completions[0].read.empty());
  CHECK(r.got_completions[0].read[0] == changed_byte);
  CHECK(compare_requester(replay_requester(c.frames, k)).completions.differences.empty());
}

TEST_CASE("requester replay: hostile captures are refused or skipped, never replayed blindly", "[transport][replay]") {
  const Capture& c = capture("06-rc-read");
  const ReplayConnection k = rc_connections(c.frames).at(1);
  SECTION("a READ of 1 GiB is more memory than a replay registers") {
    const FrameBytes changed = with_request_changed(
        c.frames, k, 0, [](wire::FrameSpec& spec, std::vector<uint8_t>&) { spec.headers.reth.dma_length = 1u << 30; });
    const RequesterReplayResult r = replay_requester(changed, rc_connections(changed).at(1));
    CHECK_THAT(r.error, Catch::Contains("more than the 256 MiB"));
    CHECK(r.got.empty());
  }
  SECTION("a capture that begins inside a message") {
    const Capture& pingpong = capture("01-rc-send-pingpong");
    FrameBytes frames = pingpong.frames;
    const ReplayConnection first = rc_connections(frames).at(0);
    // Everything before the first SEND's second packet left out.
    size_t cut = 0, requests = 0;
    for (size_t i = 0; i < frames.size(); ++i) {
      wire::Frame f;
      if (parse_rc(frames[i], f) && is_request_of(f, first) && requests++ == 1) {
        cut = i;
        break;
      }
    }
    REQUIRE(cut > 0);
    frames.erase(frames.begin(), frames.begin() + std::ptrdiff_t(cut));
    const ReplayConnection late = rc_connections(frames).at(0);
    const RequesterReplayResult r = replay_requester(frames, late);
    CHECK_THAT(r.skipped, Catch::Contains("begins inside a message"));
  }
  SECTION("a FIRST inside a message") {
    const Capture& pingpong = capture("01-rc-send-pingpong");
    const ReplayConnection first = rc_connections(pingpong.frames).at(0);
    const FrameBytes changed = with_request_changed(
        pingpong.frames, first, 1, [](wire::FrameSpec& spec, std::vector<uint8_t>&) {
          spec.headers.bth.opcode = uint8_t(wire::Opcode::rc_send_first);
        });
    const RequesterReplayResult r = replay_requester(changed, first);
    CHECK_THAT(r.error, Catch::Contains("has had no LAST"));
  }
}
