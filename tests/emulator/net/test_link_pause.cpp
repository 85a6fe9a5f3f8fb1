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
