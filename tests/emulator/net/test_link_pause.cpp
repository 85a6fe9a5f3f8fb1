// LinkPause: which priorities the link partner's PFC and PAUSE frames hold, and until when, on an injected
// clock. A quantum is 512 bit times: 51.2 ns at 10 Gb/s.
#include <catch2/catch.hpp>

#include "emulator/net/link_pause.hpp"

using namespace uroce::emulator::net;
using uroce::wire::MacControl;

namespace {

constexpr uint64_t ten_gbps = 10'000'000'000;

MacControl pfc(uint8_t enabled, std::array<uint16_t, 8> quanta) {
  MacControl m;
  m.opcode = uroce::wire::mac_control_pfc;
  m.enabled = enabled;
  m.quanta = quanta;
  return m;
}

MacControl pause(uint16_t quanta) {
  MacControl m;
  m.opcode = uroce::wire::mac_control_pause;
  m.pause_quanta = quanta;
  return m;
}

}  // namespace

TEST_CASE("PFC holds the priorities it enables for their quanta, the others not at all", "[link_pause]") {
  LinkPause lp(ten_gbps);
  NetCounters c;
  // Priority 3 for 1000 quanta (51.2 us); priority 5's time is set but not enabled.
  lp.on_frame(pfc(0x08, {0, 0, 0, 1000, 0, 7777, 0, 0}), 1'000, c);
  for (unsigned p = 0; p < 8; ++p) CHECK(lp.paused(p, 1'000) == (p == 3));
  CHECK(lp.paused(3, 1'000 + 51'199));
  CHECK_FALSE(lp.paused(3, 1'000 + 51'200));
  CHECK(lp.until(3) == 1'000 + 51'200);  // what the engine sleeps until while it holds priority 3's frames
  CHECK(lp.until(5) == 0);
  CHECK(c.pfc_frames_received == 1);
  CHECK(c.priority_pauses == 1);
}

TEST_CASE("a refresh extends a pause, a time of 0 ends it at once", "[link_pause]") {
  LinkPause lp(ten_gbps);
  NetCounters c;
  lp.on_frame(pfc(0x08, {0, 0, 0, 1000, 0, 0, 0, 0}), 0, c);
  lp.on_frame(pfc(0x08, {0, 0, 0, 1000, 0, 0, 0, 0}), 40'000, c);  // before the first ends
  CHECK(lp.paused(3, 80'000));
  CHECK_FALSE(lp.paused(3, 91'200));
  CHECK(lp.until(3) == 91'200);
  lp.on_frame(pfc(0x18, {0, 0, 0, 0, 10, 0, 0, 0}), 50'000, c);  // XON for 3, a short pause for 4
  CHECK_FALSE(lp.paused(3, 50'000));
  CHECK(lp.until(3) == 0);
  CHECK(lp.paused(4, 50'000));
  CHECK(c.priority_resumes == 1);
  CHECK(c.priority_pauses == 3);
  lp.on_frame(pfc(0x08, {0, 0, 0, 0, 0, 0, 0, 0}), 60'000, c);  // XON for a priority not paused: no resume
  CHECK(c.priority_resumes == 1);
}

TEST_CASE("PAUSE holds every priority; a link of unknown speed is never held", "[link_pause]") {
  LinkPause lp(ten_gbps);
  NetCounters c;
  lp.on_frame(pause(0xffff), 0, c);
  for (unsigned p = 0; p < 8; ++p) CHECK(lp.paused(p, 3'355'391));
  CHECK_FALSE(lp.paused(0, 3'355'392));  // 65535 quanta at 10 Gb/s
  lp.on_frame(pause(0), 10, c);
  for (unsigned p = 0; p < 8; ++p) CHECK_FALSE(lp.paused(p, 10));
  CHECK(c.pause_frames_received == 2);
  CHECK(c.priority_resumes == 8);

  LinkPause unknown(0);
  unknown.on_frame(pause(0xffff), 0, c);
  CHECK_FALSE(unknown.paused(0, 0));
}

TEST_CASE("a frame's priority: its PCP, or its DSCP >> 3 when DSCP is trusted; 0 for the rest", "[link_pause]") {
  const std::vector<uint8_t> eth(12, 0x02);  // destination and source MACs
  const auto frame = [&](std::vector<uint8_t> rest) {
    std::vector<uint8_t> f = eth;
    f.insert(f.end(), rest.begin(), rest.end());
    return f;
  };
  // IPv4 with TOS 0x68 (DSCP 26, priority 3) + ECN 2; untagged, then on VLAN 100 with PCP 5.
  const auto v4 = frame({0x08, 0x00, 0x45, 0x6a, 0x00, 0x40});
  const auto v4_tagged = frame({0x81, 0x00, 0xa0, 0x64, 0x08, 0x00, 0x45, 0x6a, 0x00, 0x40});
  CHECK(frame_priority(v4, false) == 0);
  CHECK(frame_priority(v4, true) == 3);
  CHECK(frame_priority(v4_tagged, false) == 5);
  CHECK(frame_priority(v4_tagged, true) == 3);
  // IPv6, traffic class 0xb8 (DSCP 46, priority 5): it straddles the first two bytes.
  CHECK(frame_priority(frame({0x86, 0xdd, 0x6b, 0x80, 0x00, 0x00}), true) == 5);
  // ARP has no DSCP: 0 when DSCP is trusted (as anything not IP), its PCP otherwise.
  CHECK(frame_priority(frame({0x08, 0x06, 0x00, 0x01}), true) == 0);
  CHECK(frame_priority(frame({0x81, 0x00, 0x20, 0x64, 0x08, 0x06, 0x00, 0x01}), false) == 1);
  // Too short to say: 0, and nothing read beyond the frame.
  CHECK(frame_priority(frame({0x81, 0x00}), false) == 0);
  CHECK(frame_priority(frame({0x08, 0x00, 0x45}), true) == 0);
  CHECK(frame_priority(std::vector<uint8_t>(5, 0), true) == 0);
}
