// PFC and PAUSE (MAC Control, ethertype 0x8808): frames written out byte by byte as 802.1Qbb and 802.3
// Annex 31B lay them out (tshark reads the same fields from the same bytes: test_dissect_cli.py), truncated
// bodies refused, and the length of a quantum.
#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include "transport/wire/frame.hpp"
#include "transport/wire/mac_control.hpp"

using namespace uroce::wire;

namespace {

// A 60-byte frame (the minimum without FCS) from 02:00:00:00:00:09 to the MAC Control group, `body` after
// the ethertype, zero padding after it; with a tag when `tci` is set.
std::vector<uint8_t> mac_control_frame(std::vector<uint8_t> body, std::optional<uint16_t> tci = {}) {
  std::vector<uint8_t> f = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x09};
  if (tci) f.insert(f.end(), {0x81, 0x00, uint8_t(*tci >> 8), uint8_t(*tci)});
  f.insert(f.end(), {0x88, 0x08});
  f.insert(f.end(), body.begin(), body.end());
  if (f.size() < 60) f.resize(60, 0);
  return f;
}

// PFC: opcode 0x0101, the class-enable vector (priorities 3 and 4), then eight times: 3 for 0xffff quanta,
// 4 released (0), the others' times set but not enabled.
const std::vector<uint8_t> pfc_body = {0x01, 0x01, 0x00, 0x18, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
                                       0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x00, 0x00};

}  // namespace

TEST_CASE("a PFC frame decodes priority by priority", "[wire][mac_control]") {
  const auto bytes = mac_control_frame(pfc_body);
  Frame f;
  REQUIRE(parse_frame(bytes, f) == ParseError::none);
  CHECK(f.kind == FrameKind::mac_control);
  CHECK(f.has(layer_mac_control));
  CHECK(f.eth.dst == mac_control_group);
  const MacControl& m = f.mac_control;
  CHECK(m.is_pfc());
  CHECK_FALSE(m.is_pause());
  CHECK(m.enabled == 0x18);
  CHECK(m.reserved_enable_bits == 0);
  CHECK(m.quanta == std::array<uint16_t, 8>{7, 0, 0, 0xffff, 0, 0x1234, 0, 0});
  CHECK(f.end_offset == 14 + pfc_body_size);  // the padding is not part of it

  std::vector<uint8_t> written(pfc_body_size);
  CHECK(write_mac_control(written.data(), m) == pfc_body_size);
  CHECK(written == pfc_body);
}

TEST_CASE("a PAUSE frame, a tagged PFC frame and an opcode decoded no further", "[wire][mac_control]") {
  Frame f;
  const auto pause = mac_control_frame({0x00, 0x01, 0x20, 0x00});
  REQUIRE(parse_frame(pause, f) == ParseError::none);
  CHECK(f.mac_control.is_pause());
  CHECK(f.mac_control.pause_quanta == 0x2000);

  const auto tagged = mac_control_frame(pfc_body, uint16_t(3 << 13));
  REQUIRE(parse_frame(tagged, f) == ParseError::none);
  CHECK(f.kind == FrameKind::mac_control);
  CHECK(f.mac_control.quanta[3] == 0xffff);

  const auto gate = mac_control_frame({0x00, 0x02, 0xaa, 0xbb});  // EPON's GATE: the opcode only
  REQUIRE(parse_frame(gate, f) == ParseError::none);
  CHECK(f.kind == FrameKind::mac_control);
  CHECK(f.mac_control.opcode == 2);
  CHECK(f.mac_control.enabled == 0);
}

TEST_CASE("a MAC Control body shorter than its opcode's is malformed", "[wire][mac_control]") {
  for (size_t keep : {0u, 1u, 2u, 3u, 19u}) {
    std::vector<uint8_t> f = mac_control_frame(pfc_body);
    f.resize(14 + keep);  // the frame ends inside the body: no padding either
    Frame parsed;
    INFO("body bytes " << keep);
    CHECK(parse_frame(f, parsed) == ParseError::truncated_mac_control);
    CHECK(parsed.kind == FrameKind::mac_control);
    CHECK(parsed.error_offset == 14);
    CHECK_FALSE(parsed.has(layer_mac_control));
  }
  std::vector<uint8_t> pause = {0x01, 0x80, 0xc2, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 9, 0x88, 0x08, 0x00, 0x01, 0x20};
  Frame parsed;
  CHECK(parse_frame(pause, parsed) == ParseError::truncated_mac_control);
}

TEST_CASE("a pause quantum is 512 bit times of the link", "[wire][mac_control]") {
  CHECK(pause_nanoseconds(1, 1'000'000'000) == 512);            // 1 Gb/s: 512 ns
  CHECK(pause_nanoseconds(0xffff, 10'000'000'000) == 3'355'392);  // 10 Gb/s: 3.36 ms
  CHECK(pause_nanoseconds(0xffff, 100'000'000'000) == 335'540);   // 100 Gb/s: 335.5392 us, rounded up
  CHECK(pause_nanoseconds(0, 100'000'000'000) == 0);
  CHECK(pause_nanoseconds(100, 0) == 0);  // no speed known: nothing to wait
}
