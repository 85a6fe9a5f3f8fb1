// Every way parse_frame() refuses a frame: the exact ParseError and the offset it points at. Frames are
// built and then damaged, with lengths and checksums repaired where the test wants one specific error.
#include <catch2/catch.hpp>

#include "transport/wire/build.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/frame.hpp"
#include "wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;

namespace {

// Parses a copy held in a buffer of exactly the given size, so that any read past the end is a heap
// overflow that AddressSanitizer reports (UROCE_SANITIZE=ON).
struct Owned {
  Bytes bytes;
  Frame frame;
};
Owned parse_exact(const uint8_t* p, size_t n) {
  Owned o{Bytes(p, p + n), {}};
  const ParseError e = parse_frame(o.bytes, o.frame);
  if (e != o.frame.error) throw std::runtime_error("parse_frame's result differs from Frame::error");
  return o;
}

struct Case {
  const char* name;
  Bytes bytes;
};

// A spread of frames: every IP version, with and without VLAN, headers of every size class.
std::vector<Case> sample_frames() {
  return {
      {"RC SEND_ONLY 13 B", build_simple(0x04, 13)},
      {"RC RDMA_WRITE_ONLY_IMM 40 B", build_simple(0x0b, 40)},
      {"RC ATOMIC_ACK", build_simple(0x12)},
      {"RC COMPARE_SWAP", build_simple(0x13)},
      {"UD SEND_ONLY_IMM 256 B", build_simple(0x65, 256)},
      {"IPv6 VLAN RC SEND_ONLY 7 B", build_simple(0x04, 7, IpVersion::v6, true)},
      {"IPv6 VLAN RC SEND_FIRST 64 B", build_simple(0x00, 64, IpVersion::v6, true)},
      {"IPv4 VLAN CNP", build_simple(0x81, 0, IpVersion::v4, true)},
      {"IPv6 ACK", build_simple(0x11, 0, IpVersion::v6)},
      {"IPv4 FLUSH", build_simple(0x1c)},
  };
}

Bytes udp_payload_of(const Bytes& f) { return Bytes(f.begin() + std::ptrdiff_t(layout_of(f).bth), f.end()); }

// An ARP frame built by hand from the RFC 826 layout.
Bytes arp_frame(uint16_t op = 1) {
  Bytes b;
  const uint8_t dst[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  const uint8_t src[6] = {0x02, 0, 0, 0, 0, 0x11};
  b.insert(b.end(), dst, dst + 6);
  b.insert(b.end(), src, src + 6);
  put16(b, 0x0806);
  put16(b, 1);       // htype Ethernet
  put16(b, 0x0800);  // ptype IPv4
  put8(b, 6);
  put8(b, 4);
  put16(b, op);
  b.insert(b.end(), src, src + 6);
  put32(b, 0x0a4d000b);
  b.insert(b.end(), 6, 0);
  put32(b, 0x0a4d000c);
  return b;
}

}  // namespace

TEST_CASE("parse: every strict prefix of a frame is refused precisely", "[wire][parse][errors]") {
  for (const Case& c : sample_frames()) {
    INFO(c.name);
    const Layout l = layout_of(c.bytes);
    REQUIRE(parse(c.bytes).is_roce());
    for (size_t n = 0; n < c.bytes.size(); ++n) {
      INFO("prefix of " << n << " bytes");
      const Owned o = parse_exact(c.bytes.data(), n);
      const Frame& f = o.frame;
      REQUIRE(f.error != ParseError::none);
      CHECK_FALSE(f.is_roce());
      CHECK_FALSE(icrc_ok(f));
      CHECK(f.bytes.size() == n);
      if (n < 14) {
        CHECK(f.error == ParseError::truncated_ethernet);
        CHECK(f.error_offset == 0);
        CHECK(f.kind == FrameKind::unknown);
      } else if (l.l3 == 18 && n < 18) {
        CHECK(f.error == ParseError::truncated_ethernet);  // the VLAN tag is cut
        CHECK(f.error_offset == 12);
      } else if (n < l.l3 + l.ihl) {
        CHECK(f.error == (l.ipv6 ? ParseError::truncated_ipv6 : ParseError::truncated_ipv4));
        CHECK(f.error_offset == l.l3);
        CHECK(f.l3_offset == l.l3);
      } else {
        // The IP header is complete and claims more bytes than there are.
        CHECK(f.error == ParseError::ip_length_mismatch);
        CHECK(f.error_offset == l.l3 + (l.ipv6 ? 4 : 2));
        CHECK(f.kind == FrameKind::other_ip);
        CHECK(f.has(layer_ip));
        // Everything decoded before the error is kept, so a dissector can still print the addresses.
        CHECK(f.src_ip() == parse(c.bytes).src_ip());
      }
    }
  }
}

TEST_CASE("parse: every truncation of the UDP payload, with consistent IP/UDP lengths",
          "[wire][parse][errors]") {
  for (const Case& c : sample_frames()) {
    INFO(c.name);
    const Layout l = layout_of(c.bytes);
    const Bytes full = udp_payload_of(c.bytes);
    const ExpectedOpcode& e = *find_expected(full[0]);
    const unsigned pad = (full[1] >> 4) & 3;
    for (size_t n = 0; n < full.size(); ++n) {
      INFO("UDP payload of " << n << " bytes");
      Bytes b = with_udp_payload(c.bytes, std::span<const uint8_t>(full.data(), n));
      Frame f = parse(b);
      CHECK(f.kind == FrameKind::roce);
      CHECK(f.bth_offset == l.bth);
      // The parser's decision order, restated: BTH+ICRC, extension headers, pad, payload, alignment.
      const size_t ext = l.bth + 12, payload_off = ext + e.headers_length;
      if (n < 16) {
        CHECK(f.error == ParseError::truncated_bth);
        CHECK(f.error_offset == l.bth);
        continue;
      }
      if (n - 16 < e.headers_length) {
        CHECK(f.error == ParseError::truncated_extension_headers);
        CHECK(f.error_offset == ext);
        continue;
      }
      const size_t padded = n - 16 - e.headers_length;
      const bool first_or_middle = e.position == Position::first || e.position == Position::middle;
      if (pad > padded || (pad != 0 && first_or_middle)) {
        CHECK(f.error == ParseError::bad_pad_count);
        CHECK(f.error_offset == l.bth + 1);
      } else if (!e.has_payload && padded - pad != 0) {
        CHECK(f.error == ParseError::unexpected_payload);
        CHECK(f.error_offset == payload_off);
      } else if (padded % 4 != 0) {
        CHECK(f.error == ParseError::payload_not_aligned);
        CHECK(f.error_offset == payload_off);
      } else {
        // Well formed, only the ICRC is wrong; stamp the right one and it is a valid shorter packet.
        CHECK(f.ok());
        CHECK_FALSE(icrc_ok(f));
        fix_icrc(b);
        f = parse(b);
        REQUIRE(f.ok());
        CHECK(icrc_ok(f));
        CHECK(f.roce.payload.size() == padded - pad);
        CHECK(f.roce.payload.data() == b.data() + payload_off);
      }
    }
  }
}

TEST_CASE("parse: Ethernet and VLAN", "[wire][parse][errors]") {
  SECTION("truncated VLAN tag") {
    const Bytes b = build_simple(0x11, 0, IpVersion::v4, true);
    for (size_t n = 14; n < 18; ++n) {
      const Owned o = parse_exact(b.data(), n);
      CHECK(o.frame.error == ParseError::truncated_ethernet);
      CHECK(o.frame.error_offset == 12);
    }
  }
  SECTION("VLAN fields") {
    const Bytes b = build_simple(0x11, 0, IpVersion::v6, true, Fill::pattern_a);  // TCI 0x6123
    const Frame f = parse(b);
    REQUIRE(f.is_roce());
    CHECK(f.eth.has_vlan);
    CHECK(f.eth.vlan_tci == 0x6123);
    CHECK(f.eth.vlan_id() == 0x123);
    CHECK(f.eth.vlan_pcp() == 3);
    CHECK(f.eth.ethertype == 0x86dd);
    CHECK(f.eth.size() == 18);
    CHECK(f.l3_offset == 18);
  }
  SECTION("other ethertypes are other_l2, not errors") {
    Bytes b = build_simple(0x04, 4);
    set16(&b[12], 0x88cc);  // LLDP
    const Frame f = parse(b);
    CHECK(f.error == ParseError::none);
    CHECK(f.kind == FrameKind::other_l2);
    CHECK(f.eth.ethertype == 0x88cc);
    CHECK(f.end_offset == b.size());
    CHECK_FALSE(f.is_roce());
    CHECK_FALSE(icrc_ok(f));
    // An untagged header alone is a complete (empty) other_l2 frame.
    const Owned o = parse_exact(b.data(), 14);
    CHECK(o.frame.ok());
    CHECK(o.frame.kind == FrameKind::other_l2);
  }
}

TEST_CASE("parse: IPv4 header errors", "[wire][parse][errors]") {
  const Bytes good = build_simple(0x04, 8);
  const size_t l3 = 14;

  SECTION("IHL below 5") {
    for (uint8_t ihl = 0; ihl < 5; ++ihl) {
      Bytes b = good;
      b[l3] = uint8_t(0x40 | ihl);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::bad_ipv4_header_length);
      CHECK(f.error_offset == l3);
    }
  }
  SECTION("IHL beyond the captured bytes") {
    Bytes b = build_simple(0x11);  // 62 bytes: 48 after the Ethernet header
    b[l3] = 0x4f;                  // 60-byte header
    const Frame f = parse(b);
    CHECK(f.error == ParseError::truncated_ipv4);
    CHECK(f.error_offset == l3);
  }
  SECTION("IP version does not match the ethertype") {
    for (uint8_t v : {0, 5, 6, 15}) {
      Bytes b = good;
      b[l3] = uint8_t(v << 4 | 5);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::bad_ip_version);
      CHECK(f.error_offset == l3);
    }
    Bytes b6 = build_simple(0x04, 8, IpVersion::v6);
    b6[l3] = uint8_t(0x40 | (b6[l3] & 0x0f));
    const Frame f6 = parse(b6);
    CHECK(f6.error == ParseError::bad_ip_version);
    CHECK(f6.error_offset == l3);
  }
  SECTION("total length larger than captured, or smaller than the header") {
    for (uint32_t delta : {1u, 2u, 1000u}) {
      Bytes b = good;
      set16(&b[l3 + 2], get16(&b[l3 + 2]) + delta);
      fix_ipv4_checksum(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::ip_length_mismatch);
      CHECK(f.error_offset == l3 + 2);
    }
    for (uint32_t total : {0u, 1u, 19u}) {
      Bytes b = good;
      set16(&b[l3 + 2], total);
      fix_ipv4_checksum(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::ip_length_mismatch);
      CHECK(f.error_offset == l3 + 2);
    }
  }
  SECTION("total length shorter than the frame: the rest is trailer, so UDP no longer fits") {
    Bytes b = good;
    set16(&b[l3 + 2], get16(&b[l3 + 2]) - 4);
    fix_ipv4_checksum(b);
    const Frame f = parse(b);
    CHECK(f.error == ParseError::udp_length_mismatch);
    CHECK(f.error_offset == l3 + 20 + 4);
    CHECK(f.end_offset == b.size() - 4);
  }
  SECTION("IP packet too short for a UDP header") {
    for (uint32_t udp_bytes : {0u, 4u, 7u}) {
      Bytes b = good;
      set16(&b[l3 + 2], 20 + udp_bytes);
      fix_ipv4_checksum(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::truncated_udp);
      CHECK(f.error_offset == l3 + 20);
    }
  }
  SECTION("fragments") {
    for (uint16_t frag : {0x2000, 0x6000, 0x0001, 0x1fff, 0x4001}) {
      INFO("flags/offset 0x" << std::hex << frag);
      Bytes b = good;
      set16(&b[l3 + 6], frag);
      fix_ipv4_checksum(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::ipv4_fragment);
      CHECK(f.error_offset == l3 + 6);
      // Not UDP: a fragment is just "other IP".
      b[l3 + 9] = 6;
      fix_ipv4_checksum(b);
      const Frame t = parse(b);
      CHECK(t.ok());
      CHECK(t.kind == FrameKind::other_ip);
    }
    // DF alone is not a fragment.
    Bytes b = good;
    CHECK((b[l3 + 6] & 0x40) != 0);
    CHECK(parse(b).ok());
  }
  SECTION("a bad header checksum is reported, not fatal") {
    Bytes b = good;
    b[l3 + 10] ^= 0x01;
    const Frame f = parse(b);
    CHECK(f.is_roce());
    CHECK_FALSE(f.ipv4.checksum_ok);
    CHECK(icrc_ok(f));  // the checksum is masked out of the ICRC
  }
  SECTION("IPv4 options are skipped and covered by the ICRC") {
    // Insert a 4-byte option (NOP NOP NOP EOL): IHL 6.
    Bytes b(good.begin(), good.begin() + l3 + 20);
    b.insert(b.end(), {0x01, 0x01, 0x01, 0x00});
    b.insert(b.end(), good.begin() + l3 + 20, good.end());
    b[l3] = 0x46;
    set16(&b[l3 + 2], get16(&b[l3 + 2]) + 4);
    fix_ipv4_checksum(b);
    fix_icrc(b);  // the oracle covers the option bytes unmasked
    Frame f = parse(b);
    REQUIRE(f.is_roce());
    CHECK(f.ipv4.header_length == 24);
    CHECK(f.ipv4.checksum_ok);
    CHECK(f.l4_offset == l3 + 24);
    CHECK(f.bth_offset == l3 + 24 + 8);
    CHECK(f.roce.payload.size() == 8);
    CHECK(icrc_ok(f));
    b[l3 + 20] = 0x07;  // change an option byte: it is invariant, so the ICRC breaks
    fix_ipv4_checksum(b);
    f = parse(b);
    CHECK(f.is_roce());
    CHECK_FALSE(icrc_ok(f));
  }
}

TEST_CASE("parse: IPv6 and UDP errors", "[wire][parse][errors]") {
  SECTION("IPv6 payload length larger than captured") {
    Bytes b = build_simple(0x04, 8, IpVersion::v6);
    set16(&b[14 + 4], get16(&b[14 + 4]) + 1);
    const Frame f = parse(b);
    CHECK(f.error == ParseError::ip_length_mismatch);
    CHECK(f.error_offset == 14 + 4);
  }
  SECTION("UDP length disagrees with IP") {
    for (bool v6 : {false, true}) {
      const Bytes good = build_simple(0x04, 8, v6 ? IpVersion::v6 : IpVersion::v4);
      const Layout l = layout_of(good);
      const uint32_t udp_len = get16(&good[l.l4 + 4]);
      for (uint32_t bad : {udp_len + 1, udp_len - 1, 0u, 7u, 8u, 0xffffu}) {
        INFO("IPv" << (v6 ? 6 : 4) << " UDP length " << bad);
        Bytes b = good;
        set16(&b[l.l4 + 4], bad);
        const Frame f = parse(b);
        CHECK(f.error == ParseError::udp_length_mismatch);
        CHECK(f.error_offset == l.l4 + 4);
        CHECK(f.has(layer_udp));
      }
    }
  }
  SECTION("IPv6 next header other than UDP") {
    Bytes b = build_simple(0x04, 8, IpVersion::v6);
    b[14 + 6] = 58;  // ICMPv6
    const Frame f = parse(b);
    CHECK(f.ok());
    CHECK(f.kind == FrameKind::other_ip);
    CHECK(f.end_offset == b.size());
  }
}

TEST_CASE("parse: BTH errors", "[wire][parse][errors]") {
  SECTION("TVer other than 0") {
    for (uint8_t tver = 1; tver < 16; ++tver) {
      Bytes b = build_simple(0x04, 8);
      const Layout l = layout_of(b);
      b[l.bth + 1] = uint8_t((b[l.bth + 1] & 0xf0) | tver);
      fix_icrc(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::bad_tver);
      CHECK(f.error_offset == l.bth + 1);
      CHECK(f.kind == FrameKind::roce);
      CHECK_FALSE(icrc_ok(f));
    }
  }
  SECTION("unknown opcodes, 0x80 and 0x15 among them") {
    for (unsigned op = 0; op < 256; ++op) {
      if (find_expected(uint8_t(op))) continue;
      INFO("opcode 0x" << std::hex << op);
      Bytes b = build_simple(0x11);
      const Layout l = layout_of(b);
      b[l.bth] = uint8_t(op);
      fix_icrc(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::unknown_opcode);
      CHECK(f.error_offset == l.bth);
      CHECK(f.roce.info == nullptr);
      CHECK(f.roce.bth().opcode == op);
    }
  }
  SECTION("pad count larger than what follows the headers") {
    Bytes ack = build_simple(0x11);
    const Layout l = layout_of(ack);
    for (uint8_t pad = 1; pad <= 3; ++pad) {
      Bytes b = ack;
      b[l.bth + 1] = uint8_t(pad << 4);
      fix_icrc(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::bad_pad_count);
      CHECK(f.error_offset == l.bth + 1);
    }
    Bytes send = build_simple(0x04, 0);  // SEND_ONLY without payload
    send[l.bth + 1] = 0x20;              // pad 2 of nothing
    fix_icrc(send);
    CHECK(parse(send).error == ParseError::bad_pad_count);
  }
  SECTION("a pad on FIRST and MIDDLE packets") {
    for (uint8_t op : {0x00, 0x01, 0x06, 0x07, 0x0d, 0x0e, 0x20, 0x21, 0x26, 0x27}) {
      const Bytes good = build_simple(op, 256);
      const Layout l = layout_of(good);
      REQUIRE(parse(good).is_roce());
      for (uint8_t pad = 1; pad <= 3; ++pad) {
        INFO("opcode 0x" << std::hex << unsigned(op) << " pad " << unsigned(pad));
        Bytes b = good;
        b[l.bth + 1] = uint8_t((b[l.bth + 1] & 0xcf) | pad << 4);
        fix_icrc(b);
        const Frame f = parse(b);
        CHECK(f.error == ParseError::bad_pad_count);
        CHECK(f.error_offset == l.bth + 1);
      }
    }
    // The same pads on LAST and ONLY are fine: they just shorten the payload.
    for (uint8_t op : {0x02, 0x04, 0x08, 0x0a, 0x0f, 0x10, 0x64}) {
      const Bytes good = build_simple(op, 256);
      const Layout l = layout_of(good);
      for (uint8_t pad = 1; pad <= 3; ++pad) {
        Bytes b = good;
        b[l.bth + 1] = uint8_t((b[l.bth + 1] & 0xcf) | pad << 4);
        fix_icrc(b);
        const Frame f = parse(b);
        CHECK(f.is_roce());
        CHECK(f.roce.payload.size() == 256u - pad);
        CHECK(icrc_ok(f));
      }
    }
  }
  SECTION("payload plus pad not a multiple of 4") {
    const Bytes base = build_simple(0x04, 0);
    const Layout l = layout_of(base);
    for (size_t extra : {1, 2, 3, 5, 6, 7}) {
      for (uint8_t pad = 0; pad <= 3 && pad <= extra; ++pad) {
        INFO("payload+pad " << extra << " pad " << unsigned(pad));
        Bytes up(base.begin() + std::ptrdiff_t(l.bth), base.begin() + std::ptrdiff_t(l.bth) + 12);
        up[1] = uint8_t((up[1] & 0xcf) | pad << 4);
        up.insert(up.end(), extra + 4, 0x33);  // payload+pad, then ICRC
        Bytes b = with_udp_payload(base, up);
        fix_icrc(b);
        const Frame f = parse(b);
        CHECK(f.error == ParseError::payload_not_aligned);
        CHECK(f.error_offset == l.bth + 12);
      }
    }
  }
  SECTION("a payload on an opcode that carries none") {
    for (const ExpectedOpcode& e : expected_opcodes()) {
      if (e.has_payload) continue;
      INFO(e.full_name);
      const Bytes good = build_simple(e.opcode);
      const Layout l = layout_of(good);
      Bytes up = udp_payload_of(good);
      up.insert(up.end() - 4, {1, 2, 3, 4});  // 4 bytes between the headers and the ICRC
      Bytes b = with_udp_payload(good, up);
      fix_icrc(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::unexpected_payload);
      CHECK(f.error_offset == l.bth + 12 + e.headers_length);
    }
  }
  SECTION("a frame that is nothing but BTH and ICRC") {
    // The smallest RoCEv2 packet: an empty SEND_ONLY is 16 bytes after the UDP header.
    const Bytes b = build_simple(0x04, 0);
    CHECK(udp_payload_of(b).size() == 16);
    const Frame f = parse(b);
    CHECK(f.is_roce());
    CHECK(f.roce.payload.empty());
    CHECK(icrc_ok(f));
  }
}

TEST_CASE("parse: ARP", "[wire][parse][arp]") {
  SECTION("a request decodes") {
    const Bytes b = arp_frame(arp_op_request);
    const Frame f = parse(b);
    REQUIRE(f.ok());
    CHECK(f.kind == FrameKind::arp);
    CHECK(f.has(layer_arp));
    CHECK(f.eth.ethertype == 0x0806);
    CHECK(f.l3_offset == 14);
    CHECK(f.end_offset == 42);
    CHECK(f.arp.operation == arp_op_request);
    CHECK(f.arp.sender_mac == MacAddress{{0x02, 0, 0, 0, 0, 0x11}});
    CHECK(f.arp.sender_ip == 0x0a4d000b);
    CHECK(f.arp.target_mac == MacAddress{});
    CHECK(f.arp.target_ip == 0x0a4d000c);
    CHECK_FALSE(f.is_roce());
    CHECK_FALSE(icrc_ok(f));
  }
  SECTION("padded to the Ethernet minimum, and VLAN tagged") {
    Bytes b = arp_frame(arp_op_reply);
    b.resize(60, 0);
    Frame f = parse(b);
    CHECK(f.ok());
    CHECK(f.kind == FrameKind::arp);
    CHECK(f.arp.operation == arp_op_reply);
    CHECK(f.end_offset == 42);
    Bytes t(b.begin(), b.begin() + 12);
    t.insert(t.end(), {0x81, 0x00, 0x00, 0x05});
    t.insert(t.end(), b.begin() + 12, b.end());
    f = parse(t);
    CHECK(f.ok());
    CHECK(f.kind == FrameKind::arp);
    CHECK(f.eth.vlan_id() == 5);
    CHECK(f.arp.sender_ip == 0x0a4d000b);
  }
  SECTION("truncated") {
    const Bytes b = arp_frame();
    for (size_t n = 14; n < 42; ++n) {
      const Owned o = parse_exact(b.data(), n);
      CHECK(o.frame.error == ParseError::truncated_arp);
      CHECK(o.frame.error_offset == 14);
    }
  }
  SECTION("not IPv4 over Ethernet") {
    for (size_t off : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(4), size_t(5)}) {
      INFO("byte " << off << " of the ARP header changed");
      Bytes b = arp_frame();
      b[14 + off] ^= 0x10;  // htype (bytes 0-1), ptype (2-3), hlen (4), plen (5)
      const Frame f = parse(b);
      CHECK(f.error == ParseError::unsupported_arp);
      CHECK(f.error_offset == 14);
      CHECK(f.kind == FrameKind::arp);
    }
    Bytes b = arp_frame();
    set16(&b[14], 6);  // htype IEEE 802
    CHECK(parse(b).error == ParseError::unsupported_arp);
  }
  SECTION("write_arp / read_arp round trip") {
    ArpPacket a;
    a.operation = arp_op_reply;
    a.sender_mac = {{0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}};
    a.sender_ip = 0xc0a80001;
    a.target_mac = {{0x01, 0x02, 0x03, 0x04, 0x05, 0x06}};
    a.target_ip = 0xffffffff;
    uint8_t buf[arp_ipv4_size + 4];
    std::memset(buf, 0x77, sizeof buf);
    CHECK(write_arp(buf, a) == 28);
    CHECK(buf[28] == 0x77);  // nothing written past the packet
    // The wire layout, byte for byte (RFC 826).
    const uint8_t want[28] = {0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
                              0xc0, 0xa8, 0x00, 0x01, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0xff, 0xff, 0xff, 0xff};
    CHECK(std::equal(want, want + 28, buf));
    ArpPacket r;
    REQUIRE(read_arp(buf, r));
    CHECK(r.operation == a.operation);
    CHECK(r.sender_mac == a.sender_mac);
    CHECK(r.sender_ip == a.sender_ip);
    CHECK(r.target_mac == a.target_mac);
    CHECK(r.target_ip == a.target_ip);
    buf[5] = 16;  // IPv6-sized protocol address
    CHECK_FALSE(read_arp(buf, r));
  }
  SECTION("write_ethernet") {
    EthernetHeader h;
    h.dst = MacAddress::broadcast();
    h.src = {{1, 2, 3, 4, 5, 6}};
    h.ethertype = 0x0806;
    uint8_t buf[18] = {};
    CHECK(write_ethernet(buf, h) == 14);
    CHECK(h.size() == 14);
    const uint8_t want[14] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 0x08, 0x06};
    CHECK(std::equal(want, want + 14, buf));
    h.has_vlan = true;
    h.vlan_tci = 0xa00b;
    CHECK(write_ethernet(buf, h) == 18);
    CHECK(h.size() == 18);
    const uint8_t want_tagged[18] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6,
                                     0x81, 0x00, 0xa0, 0x0b, 0x08, 0x06};
    CHECK(std::equal(want_tagged, want_tagged + 18, buf));
    CHECK(h.vlan_id() == 0x00b);
    CHECK(h.vlan_pcp() == 5);
  }
}

TEST_CASE("parse: traffic that is not RoCEv2 is classified, not rejected", "[wire][parse]") {
  SECTION("IPv4 TCP, ICMP and others") {
    for (uint8_t proto : {0, 1, 6, 16, 18, 47, 50, 58, 132, 136, 255}) {
      INFO("protocol " << unsigned(proto));
      Bytes b = build_simple(0x04, 8);
      b[14 + 9] = proto;
      fix_ipv4_checksum(b);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::none);
      CHECK(f.kind == FrameKind::other_ip);
      CHECK(f.ipv4.protocol == proto);
      CHECK(f.ipv4.checksum_ok);
      CHECK(f.end_offset == b.size());
      CHECK_FALSE(f.is_roce());
      CHECK_FALSE(icrc_ok(f));
    }
  }
  SECTION("UDP to another port") {
    for (uint16_t port : {53, 4790, 4792, 0}) {
      Bytes b = build_simple(0x04, 8);
      set16(&b[14 + 20 + 2], port);
      const Frame f = parse(b);
      CHECK(f.error == ParseError::none);
      CHECK(f.kind == FrameKind::other_udp);
      CHECK(f.udp.dst_port == port);
      CHECK_FALSE(f.is_roce());
    }
    // The source port being 4791 does not make it RoCE.
    Bytes b = build_simple(0x04, 8);
    set16(&b[14 + 20], 4791);
    set16(&b[14 + 20 + 2], 53);
    CHECK(parse(b).kind == FrameKind::other_udp);
  }
}

TEST_CASE("parse_l3: packets without a link layer", "[wire][parse]") {
  for (bool v6 : {false, true}) {
    INFO("IPv" << (v6 ? 6 : 4));
    const Bytes frame = build_simple(0x0b, 33, v6 ? IpVersion::v6 : IpVersion::v4);
    const Bytes packet(frame.begin() + 14, frame.end());
    Frame f;
    CHECK(parse_l3(v6 ? ethertype_ipv6 : ethertype_ipv4, packet, f) == ParseError::none);
    REQUIRE(f.is_roce());
    CHECK_FALSE(f.has(layer_ethernet));
    CHECK(f.eth.ethertype == (v6 ? 0x86dd : 0x0800));
    CHECK_FALSE(f.eth.has_vlan);
    CHECK(f.l3_offset == 0);
    CHECK(f.l4_offset == (v6 ? 40u : 20u));
    CHECK(f.end_offset == packet.size());
    CHECK(f.roce.bth().opcode == 0x0b);
    CHECK(f.roce.payload.size() == 33);
    CHECK(icrc_ok(f));
    // Same packet under the wrong ethertype.
    Frame g;
    CHECK(parse_l3(v6 ? ethertype_ipv4 : ethertype_ipv6, packet, g) == ParseError::bad_ip_version);
    CHECK(g.error_offset == 0);
  }
  const Bytes arp = arp_frame();
  Frame a;
  CHECK(parse_l3(ethertype_arp, std::span<const uint8_t>(arp).subspan(14), a) == ParseError::none);
  CHECK(a.kind == FrameKind::arp);
  CHECK(a.arp.target_ip == 0x0a4d000c);
  Frame o;
  CHECK(parse_l3(0x88cc, std::span<const uint8_t>(arp), o) == ParseError::none);
  CHECK(o.kind == FrameKind::other_l2);
  Frame e;
  CHECK(parse_l3(ethertype_ipv4, {}, e) == ParseError::truncated_ipv4);
}

TEST_CASE("parse: a reused Frame carries nothing over", "[wire][parse]") {
  const Bytes good = build_simple(0x0b, 16);
  Bytes bad = good;
  bad[layout_of(bad).bth] = 0x80;
  Frame f;
  REQUIRE(parse_frame(good, f) == ParseError::none);
  REQUIRE(f.roce.payload.size() == 16);
  CHECK(parse_frame(bad, f) == ParseError::unknown_opcode);
  CHECK(f.error == ParseError::unknown_opcode);
  CHECK(f.roce.info == nullptr);
  CHECK(f.roce.payload.empty());
  CHECK_FALSE(f.has(layer_transport));
  CHECK(parse_frame(std::span<const uint8_t>(good.data(), 5), f) == ParseError::truncated_ethernet);
  CHECK(f.kind == FrameKind::unknown);
  CHECK(f.decoded == 0);
  CHECK(f.end_offset == 0);
  CHECK(parse_frame(good, f) == ParseError::none);
  CHECK(f.error == ParseError::none);
  CHECK(f.error_offset == 0);
  CHECK(icrc_ok(f));
}

TEST_CASE("parse: total over randomly damaged frames", "[wire][parse]") {
  // Not a fuzzer, but cheap insurance that every path stays inside the buffer (run it under ASan).
  Rng rng(42);
  const std::vector<Case> cases = sample_frames();
  unsigned roce_ok = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    Bytes b = cases[rng.below(unsigned(cases.size()))].bytes;
    const unsigned flips = 1 + rng.below(4);
    for (unsigned k = 0; k < flips; ++k) b[rng.below(unsigned(b.size()))] ^= uint8_t(1u << rng.below(8));
    if (rng.below(2)) b.resize(rng.below(unsigned(b.size()) + 1));
    const Owned o = parse_exact(b.data(), b.size());
    const Frame& f = o.frame;
    CHECK(f.end_offset <= b.size());
    if (f.error != ParseError::none) CHECK(f.error_offset <= b.size());
    if (f.is_roce()) {
      ++roce_ok;
      // The payload lies inside the frame, before the ICRC.
      CHECK(f.roce.payload.data() >= o.bytes.data() + f.bth_offset + 12);
      CHECK(size_t(f.roce.payload.data() - o.bytes.data()) + f.roce.payload.size() + 4 <= f.end_offset);
      (void)icrc_ok(f);
    }
  }
  CHECK(roce_ok > 0);
}

TEST_CASE("ParseError names", "[wire][parse]") {
  const std::pair<ParseError, const char*> ids[] = {
      {ParseError::none, "none"},
      {ParseError::truncated_ethernet, "truncated_ethernet"},
      {ParseError::truncated_arp, "truncated_arp"},
      {ParseError::unsupported_arp, "unsupported_arp"},
      {ParseError::truncated_mac_control, "truncated_mac_control"},
      {ParseError::truncated_ipv4, "truncated_ipv4"},
      {ParseError::bad_ip_version, "bad_ip_version"},
      {ParseError::bad_ipv4_header_length, "bad_ipv4_header_length"},
      {ParseError::ip_length_mismatch, "ip_length_mismatch"},
      {ParseError::ipv4_fragment, "ipv4_fragment"},
      {ParseError::truncated_ipv6, "truncated_ipv6"},
      {ParseError::truncated_udp, "truncated_udp"},
      {ParseError::udp_length_mismatch, "udp_length_mismatch"},
      {ParseError::truncated_bth, "truncated_bth"},
      {ParseError::bad_tver, "bad_tver"},
      {ParseError::unknown_opcode, "unknown_opcode"},
      {ParseError::truncated_extension_headers, "truncated_extension_headers"},
      {ParseError::bad_pad_count, "bad_pad_count"},
      {ParseError::payload_not_aligned, "payload_not_aligned"},
      {ParseError::unexpected_payload, "unexpected_payload"},
  };
  for (auto [e, id] : ids) {
    CHECK(error_name(e) == id);
    CHECK_FALSE(to_string(e).empty());
    if (e != ParseError::none) CHECK(to_string(e) != error_name(e));  // a phrase, not the identifier
  }
  CHECK(to_string(ParseError::none) == "no error");
  CHECK(to_string(ParseError::truncated_bth) == "truncated BTH (or no room for the ICRC)");
  CHECK(error_name(ParseError(200)) == "unknown");
}
