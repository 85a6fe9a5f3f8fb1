// Looking through a tunnel (pcap_tools/tunnel.hpp) on frames built here: the carried frame is found and
// parses whole; a tunnel whose headers were cut short at any byte is no tunnel, and a carried frame cut
// short is parsed as far as it goes. tests/integration/test_tunnels_cli.py holds the commands to tshark.
#include <catch2/catch.hpp>

#include "pcap_tools/capture_reader.hpp"
#include "pcap_tools/mirror_copies.hpp"
#include "tests/unit/wire/wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;
using namespace uroce::pcap_tools;

namespace {

// Outer Ethernet + IPv4 (10.99.0.1 -> 10.99.0.2, protocol 47) + GRE with a sequence number (and ERSPAN
// type III with its platform subheader) around `inner`.
Bytes erspan_iii(const Bytes& inner, bool platform, uint16_t session = 513) {
  Bytes gre;
  put16(gre, 0x1000);  // S: a sequence number
  put16(gre, gre_erspan_iii);
  put32(gre, 7);
  put16(gre, 2u << 12 | 100);                        // version 2, VLAN 100
  put16(gre, 5u << 13 | 1u << 10 | session);         // COS 5, truncated, the session
  put32(gre, 0xdeadbeef);                             // timestamp
  put16(gre, 42);                                     // SGT
  put16(gre, 1u << 15 | 9u << 4 | 1u << 3 | (platform ? 1 : 0));  // P, hardware 9, egress, O
  if (platform) put64(gre, uint64_t(3) << 58);
  gre.insert(gre.end(), inner.begin(), inner.end());
  Bytes f = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00};
  put8(f, 0x45);
  put8(f, 0);
  put16(f, 20 + gre.size());
  put16(f, 1);
  put16(f, 0x4000);
  put8(f, 64);
  put8(f, 47);
  put16(f, 0);
  put32(f, 0x0a630001);
  put32(f, 0x0a630002);
  fix_ipv4_checksum(f);
  f.insert(f.end(), gre.begin(), gre.end());
  return f;
}

Record record_of(const Bytes& captured, size_t wire_length) {
  Record r;
  r.number = 1;
  r.bytes = captured;
  r.wire_length = uint32_t(wire_length);
  return r;
}

}  // namespace

TEST_CASE("an ERSPAN type III frame is looked through to the RoCE frame it carries") {
  const Bytes inner = build_simple(uint8_t(Opcode::rc_send_only), 100);
  for (const bool platform : {false, true}) {
    const Bytes whole = erspan_iii(inner, platform);
    Record r = record_of(whole, whole.size());
    Frame f;
    parse_frame(r.bytes, f);
    REQUIRE(look_through_tunnel(r, f) == ParseError::none);
    REQUIRE(r.tunnels.size() == 1);
    CHECK(r.tunnels[0].kind == TunnelKind::erspan_iii);
    CHECK(r.tunnels[0].session == 513);
    CHECK(r.tunnels[0].vlan == 100);
    CHECK(r.tunnels[0].cos == 5);
    CHECK(r.tunnels[0].truncated);
    CHECK(r.tunnels[0].timestamp == 0xdeadbeef);
    CHECK(r.tunnels[0].sgt == 42);
    CHECK(r.tunnels[0].hw_id == 9);
    CHECK(r.tunnels[0].egress);
    CHECK(r.tunnels[0].gre_sequence == 7u);
    CHECK(r.tunnels[0].platform_id == (platform ? std::optional<uint8_t>(3) : std::nullopt));
    CHECK(r.tunnels[0].inner_offset == whole.size() - inner.size());
    CHECK(to_string(r.tunnels[0].src) == "10.99.0.1");
    CHECK(f.is_roce());
    CHECK(icrc_ok(f));
    CHECK(f.bytes.size() == inner.size());
  }
}

TEST_CASE("a tunnel inside a tunnel is looked through too, each one's offsets in the record's bytes") {
  const Bytes inner = build_simple(uint8_t(Opcode::rc_send_only), 64);
  const Bytes middle = erspan_iii(inner, false, 7);
  const Bytes whole = erspan_iii(middle, true, 513);
  Record r = record_of(whole, whole.size());
  Frame f;
  parse_frame(r.bytes, f);
  REQUIRE(look_through_tunnel(r, f) == ParseError::none);
  REQUIRE(r.tunnels.size() == 2);
  CHECK(r.tunnels[0].session == 513);
  CHECK(r.tunnels[1].session == 7);
  CHECK(r.tunnels[0].inner_offset == whole.size() - middle.size());
  CHECK(r.tunnels[1].inner_offset == whole.size() - inner.size());
  CHECK(r.tunnels[1].inner_end == whole.size());
  CHECK(tunnels_tag(r.tunnels) == "ERSPAN type III session 513 / ERSPAN type III session 7");
  CHECK(f.is_roce());
  CHECK(icrc_ok(f));
  CHECK(f.bytes.data() == r.bytes.data() + r.tunnels[1].inner_offset);

  SECTION("cut anywhere, each tunnel whose header was captured whole is found, and nothing is read past") {
    for (size_t cut = 0; cut < whole.size(); ++cut) {
      const Bytes captured(whole.begin(), whole.begin() + long(cut));
      Record c = record_of(captured, whole.size());
      Frame g;
      parse_frame(c.bytes, g);
      look_through_tunnel(c, g);
      INFO("captured " << cut << " bytes");
      const size_t expected = cut >= whole.size() - inner.size() ? 2 : cut >= whole.size() - middle.size() ? 1 : 0;
      CHECK(c.tunnels.size() == expected);
      CHECK(g.bytes.data() + g.bytes.size() <= c.bytes.data() + c.bytes.size());
    }
  }
}

TEST_CASE("tunnels are looked through max_tunnel_depth deep, no deeper") {
  Bytes frame = build_simple(uint8_t(Opcode::rc_send_only), 8);
  for (uint16_t level = 0; level < max_tunnel_depth + 2; ++level) frame = erspan_iii(frame, false, level);
  Record r = record_of(frame, frame.size());
  Frame f;
  parse_frame(r.bytes, f);
  look_through_tunnel(r, f);
  CHECK(r.tunnels.size() == max_tunnel_depth);
  CHECK(r.tunnels.front().session == max_tunnel_depth + 1);
  CHECK_FALSE(f.is_roce());  // what is left is still a GRE packet, shown as it is
  CHECK(f.kind == FrameKind::other_ip);
}

TEST_CASE("a tunnel cut short anywhere is no tunnel, and a carried frame cut short parses as far as it goes") {
  const Bytes inner = build_simple(uint8_t(Opcode::rc_send_only), 100);
  const Bytes whole = erspan_iii(inner, true);
  const size_t inner_offset = whole.size() - inner.size();
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    const Bytes captured(whole.begin(), whole.begin() + long(cut));
    Record r = record_of(captured, whole.size());  // cut by the snaplen
    Frame f;
    parse_frame(r.bytes, f);
    look_through_tunnel(r, f);
    INFO("captured " << cut << " bytes");
    CHECK(!r.tunnels.empty() == (cut >= inner_offset));
    if (!r.tunnels.empty()) {
      CHECK(r.tunnels[0].inner_end == cut);
      CHECK_FALSE(f.ok());  // the carried frame is cut: a precise error, never a frame read past its end
      CHECK(f.bytes.size() == cut - inner_offset);
    }
  }
}

TEST_CASE("an outer packet longer than its frame, with nothing cut by the snaplen, is not looked through") {
  const Bytes whole = erspan_iii(build_simple(uint8_t(Opcode::rc_send_only), 100), false);
  const Bytes captured(whole.begin(), whole.end() - 10);
  Record r = record_of(captured, captured.size());  // the file says this is all there was
  Frame f;
  parse_frame(r.bytes, f);
  CHECK(look_through_tunnel(r, f) == ParseError::ip_length_mismatch);
  CHECK(r.tunnels.empty());
}

TEST_CASE("a packet another tunnel carries is a mirror copy; one the same tunnel carries again is sent again") {
  const Bytes inner = build_simple(uint8_t(Opcode::rc_send_only), 100);
  const Bytes one = erspan_iii(inner, false, 1), two = erspan_iii(inner, false, 2);
  MirrorCopies copies;
  uint64_t number = 0;
  auto feed = [&](const Bytes& bytes, int64_t time_ns) {
    Record r = record_of(bytes, bytes.size());
    r.number = ++number;
    r.time_ns = time_ns;
    Frame f;
    parse_frame(r.bytes, f);
    look_through_tunnel(r, f);
    return copies.copy_of(r, f);
  };
  CHECK(feed(one, 0) == 0);
  CHECK(feed(two, 1'000) == 1);        // the other mirror point, a microsecond later
  CHECK(feed(one, 50'000) == 0);       // resent: the first tunnel carries it again
  CHECK(feed(two, 51'000) == 3);       // ... and its copy
  CHECK(feed(two, 52'000) == 0);       // sent once more, seen first at the second point this time
  CHECK(feed(one, 53'000) == 5);
  CHECK(feed(two, 53'000 + MirrorCopies::window_ns + 1) == 0);  // long after: forgotten, a new packet
  // A frame that came through no tunnel is never a copy.
  Record plain = record_of(inner, inner.size());
  Frame f;
  parse_frame(plain.bytes, f);
  CHECK(copies.copy_of(plain, f) == 0);
}
