// build_frame() -> parse_frame() for every valid opcode, both IP versions, with and without VLAN, and a
// range of payload sizes. The built bytes are also compared with an independent reference encoder written
// from the spec, so that a mistake made identically in the writer and the reader still fails.
#include <catch2/catch.hpp>

#include <algorithm>

#include "transport/wire/build.hpp"
#include "transport/wire/frame.hpp"
#include "wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;

namespace {

// The whole frame as the spec lays it out, from the FrameSpec's meaning (not its derived fields).
Bytes reference_frame(const FrameSpec& s) {
  const ExpectedOpcode& e = *find_expected(s.headers.bth.opcode);
  const TransportHeaders& h = s.headers;
  const size_t pad = (4 - s.payload.size() % 4) % 4;
  const size_t udp_len = 8 + 12 + e.headers_length + s.payload.size() + pad + 4;
  const bool v6 = s.ip_version == IpVersion::v6;

  Bytes b;
  b.insert(b.end(), s.eth.dst.bytes.begin(), s.eth.dst.bytes.end());
  b.insert(b.end(), s.eth.src.bytes.begin(), s.eth.src.bytes.end());
  if (s.eth.has_vlan) {
    put16(b, 0x8100);
    put16(b, s.eth.vlan_tci);
  }
  put16(b, v6 ? 0x86dd : 0x0800);
  const size_t l3 = b.size();
  if (!v6) {
    put8(b, 0x45);
    put8(b, s.ipv4.tos);
    put16(b, 20 + udp_len);
    put16(b, s.ipv4.identification);
    put16(b, s.ipv4.dont_fragment ? 0x4000 : 0);
    put8(b, s.ipv4.ttl);
    put8(b, 17);
    put16(b, 0);  // checksum, filled below
    put32(b, s.ipv4.src);
    put32(b, s.ipv4.dst);
    set16(&b[l3 + 10], ref_ip_checksum(&b[l3], 20));
  } else {
    put32(b, uint32_t(6) << 28 | uint32_t(s.ipv6.traffic_class) << 20 | s.ipv6.flow_label);
    put16(b, udp_len);
    put8(b, 17);
    put8(b, s.ipv6.hop_limit);
    b.insert(b.end(), s.ipv6.src.bytes.begin(), s.ipv6.src.bytes.end());
    b.insert(b.end(), s.ipv6.dst.bytes.begin(), s.ipv6.dst.bytes.end());
  }
  put16(b, s.udp_src_port);
  put16(b, 4791);
  put16(b, udp_len);
  put16(b, 0);
  // BTH
  put8(b, h.bth.opcode);
  put8(b, (h.bth.solicited ? 0x80 : 0) | (h.bth.migreq ? 0x40 : 0) | pad << 4);
  put16(b, h.bth.pkey);
  put8(b, (h.bth.fecn ? 0x80 : 0) | (h.bth.becn ? 0x40 : 0) | h.bth.reserved6);
  put24(b, h.bth.dest_qp);
  put8(b, (h.bth.ack_req ? 0x80 : 0) | h.bth.reserved7);
  put24(b, h.bth.psn);
  // Extension headers in wire order.
  if (e.headers & x_deth) {
    put32(b, h.deth.qkey);
    put8(b, h.deth.reserved);
    put24(b, h.deth.src_qp);
  }
  if (e.headers & x_xrc) {
    put8(b, h.xrceth.reserved);
    put24(b, h.xrceth.srq);
  }
  if (e.headers & x_feth) put32(b, h.feth.raw);
  if (e.headers & x_reth) {
    put64(b, h.reth.va);
    put32(b, h.reth.rkey);
    put32(b, h.reth.dma_length);
  }
  if (e.headers & x_atomic) {
    put64(b, h.atomic_eth.va);
    put32(b, h.atomic_eth.rkey);
    put64(b, h.atomic_eth.swap_add);
    put64(b, h.atomic_eth.compare);
  }
  if (e.headers & x_aeth) {
    put8(b, h.aeth.syndrome);
    put24(b, h.aeth.msn);
  }
  if (e.headers & x_atk) put64(b, h.atomic_ack_eth.original);
  if (e.headers & x_imm) put32(b, h.immdt);
  if (e.headers & x_ieth) put32(b, h.ieth);
  if (e.headers & x_cnp) b.insert(b.end(), h.cnp_reserved, h.cnp_reserved + 16);
  b.insert(b.end(), s.payload.begin(), s.payload.end());
  b.insert(b.end(), pad, 0);
  const uint32_t icrc = ref_icrc(std::span<const uint8_t>(b.data() + l3, b.size() - l3), v6);
  for (int i = 0; i < 4; ++i) put8(b, icrc >> (8 * i));  // least-significant byte first
  return b;
}

// Checks every decoded field of `f` (parsed from `bytes`, built from `s`) against the spec.
void check_round_trip(const FrameSpec& s, const Bytes& bytes, const Frame& f) {
  const ExpectedOpcode& e = *find_expected(s.headers.bth.opcode);
  const TransportHeaders& want = s.headers;
  const TransportHeaders& got = f.roce.headers;
  const size_t len = s.payload.size();
  const bool v6 = s.ip_version == IpVersion::v6;
  const size_t l3 = s.eth.has_vlan ? 18 : 14;
  const size_t ihl = v6 ? 40 : 20;
  const size_t udp_len = 8 + 12 + e.headers_length + len + (-len & 3) + 4;

  REQUIRE(f.error == ParseError::none);
  REQUIRE(f.kind == FrameKind::roce);
  CHECK(f.is_roce());
  CHECK(f.has(layer_ethernet));
  CHECK(f.decoded == (layer_ethernet | layer_ip | layer_udp | layer_bth | layer_transport));
  CHECK(f.bytes.data() == bytes.data());
  CHECK(f.bytes.size() == bytes.size());

  // Ethernet
  CHECK(f.eth.dst == s.eth.dst);
  CHECK(f.eth.src == s.eth.src);
  CHECK(f.eth.has_vlan == s.eth.has_vlan);
  if (s.eth.has_vlan) {
    CHECK(f.eth.vlan_tci == s.eth.vlan_tci);
    CHECK(f.eth.vlan_id() == (s.eth.vlan_tci & 0xfff));
    CHECK(f.eth.vlan_pcp() == s.eth.vlan_tci >> 13);
  }
  CHECK(f.eth.ethertype == (v6 ? 0x86dd : 0x0800));

  // Offsets
  CHECK(f.l3_offset == l3);
  CHECK(f.l4_offset == l3 + ihl);
  CHECK(f.bth_offset == l3 + ihl + 8);
  CHECK(f.end_offset == bytes.size());
  CHECK(bytes.size() == l3 + ihl + udp_len);

  // IP
  CHECK(f.ip_version == s.ip_version);
  if (!v6) {
    const uint8_t* ip = &bytes[l3];
    CHECK(f.ipv4.header_length == 20);
    CHECK(f.ipv4.tos == s.ipv4.tos);
    CHECK(f.ipv4.total_length == 20 + udp_len);
    CHECK(f.ipv4.identification == s.ipv4.identification);
    CHECK(f.ipv4.dont_fragment);
    CHECK((ip[6] & 0x40) != 0);  // DF on the wire
    CHECK_FALSE(f.ipv4.more_fragments);
    CHECK(f.ipv4.fragment_offset == 0);
    CHECK(f.ipv4.ttl == s.ipv4.ttl);
    CHECK(f.ipv4.protocol == 17);
    CHECK(f.ipv4.src == s.ipv4.src);
    CHECK(f.ipv4.dst == s.ipv4.dst);
    CHECK(f.ipv4.checksum_ok);
    CHECK(ref_ip_checksum(ip, 20) == 0);
    CHECK(internet_checksum(ip, 20) == 0);
    CHECK(f.ipv4.checksum == get16(ip + 10));
    CHECK(f.src_ip() == IpAddress::from_v4(s.ipv4.src));
    CHECK(f.dst_ip() == IpAddress::from_v4(s.ipv4.dst));
    CHECK(f.ecn() == Ecn(s.ipv4.tos & 3));
  } else {
    CHECK(f.ipv6.traffic_class == s.ipv6.traffic_class);
    CHECK(f.ipv6.flow_label == s.ipv6.flow_label);
    CHECK(f.ipv6.payload_length == udp_len);
    CHECK(f.ipv6.next_header == 17);
    CHECK(f.ipv6.hop_limit == s.ipv6.hop_limit);
    CHECK(f.ipv6.src == s.ipv6.src);
    CHECK(f.ipv6.dst == s.ipv6.dst);
    CHECK(f.src_ip() == s.ipv6.src);
    CHECK(f.dst_ip() == s.ipv6.dst);
    CHECK(f.ecn() == Ecn(s.ipv6.traffic_class & 3));
  }

  // UDP
  CHECK(f.udp.src_port == s.udp_src_port);
  CHECK(f.udp.dst_port == 4791);
  CHECK(get16(&bytes[l3 + ihl + 2]) == 4791);
  CHECK(f.udp.length == udp_len);
  CHECK(f.udp.checksum == 0);

  // BTH
  REQUIRE(f.roce.info == &opcode_info(want.bth.opcode));
  CHECK(got.bth.opcode == want.bth.opcode);
  CHECK(got.bth.solicited == want.bth.solicited);
  CHECK(got.bth.migreq == want.bth.migreq);
  CHECK(got.bth.pad_count == (-len & 3));
  CHECK(got.bth.tver == 0);
  CHECK(got.bth.pkey == want.bth.pkey);
  CHECK(got.bth.fecn == want.bth.fecn);
  CHECK(got.bth.becn == want.bth.becn);
  CHECK(got.bth.reserved6 == want.bth.reserved6);
  CHECK(got.bth.dest_qp == want.bth.dest_qp);
  CHECK(got.bth.ack_req == want.bth.ack_req);
  CHECK(got.bth.reserved7 == want.bth.reserved7);
  CHECK(got.bth.psn == want.bth.psn);

  // Extension headers: each one the opcode carries reads back as written.
  if (e.headers & x_deth) {
    CHECK(got.deth.qkey == want.deth.qkey);
    CHECK(got.deth.reserved == want.deth.reserved);
    CHECK(got.deth.src_qp == want.deth.src_qp);
  }
  if (e.headers & x_xrc) {
    CHECK(got.xrceth.reserved == want.xrceth.reserved);
    CHECK(got.xrceth.srq == want.xrceth.srq);
  }
  if (e.headers & x_feth) {
    CHECK(got.feth.raw == want.feth.raw);
    CHECK(got.feth.selectivity_level() == ((want.feth.raw >> 4) & 3));
    CHECK(got.feth.placement_type() == (want.feth.raw & 0xf));
  }
  if (e.headers & x_reth) {
    CHECK(got.reth.va == want.reth.va);
    CHECK(got.reth.rkey == want.reth.rkey);
    CHECK(got.reth.dma_length == want.reth.dma_length);
  }
  if (e.headers & x_atomic) {
    CHECK(got.atomic_eth.va == want.atomic_eth.va);
    CHECK(got.atomic_eth.rkey == want.atomic_eth.rkey);
    CHECK(got.atomic_eth.swap_add == want.atomic_eth.swap_add);
    CHECK(got.atomic_eth.compare == want.atomic_eth.compare);
  }
  if (e.headers & x_aeth) {
    CHECK(got.aeth.syndrome == want.aeth.syndrome);
    CHECK(got.aeth.msn == want.aeth.msn);
  }
  if (e.headers & x_atk) CHECK(got.atomic_ack_eth.original == want.atomic_ack_eth.original);
  if (e.headers & x_imm) CHECK(got.immdt == want.immdt);
  if (e.headers & x_ieth) CHECK(got.ieth == want.ieth);
  if (e.headers & x_cnp) CHECK(std::equal(got.cnp_reserved, got.cnp_reserved + 16, want.cnp_reserved));

  // Payload, pad, ICRC
  const size_t payload_off = l3 + ihl + 8 + 12 + e.headers_length;
  CHECK(f.roce.payload.data() == bytes.data() + payload_off);
  REQUIRE(f.roce.payload.size() == len);
  CHECK(std::equal(f.roce.payload.begin(), f.roce.payload.end(), s.payload.begin()));
  for (size_t i = 0; i < (-len & 3); ++i) CHECK(bytes[payload_off + len + i] == 0);
  const size_t icrc_off = bytes.size() - 4;
  CHECK(f.roce.icrc == (uint32_t(bytes[icrc_off]) | uint32_t(bytes[icrc_off + 1]) << 8 |
                        uint32_t(bytes[icrc_off + 2]) << 16 | uint32_t(bytes[icrc_off + 3]) << 24));
  CHECK(f.roce.icrc == ref_icrc(std::span<const uint8_t>(&bytes[l3], icrc_off - l3), v6));
  CHECK(compute_icrc(f) == f.roce.icrc);
  CHECK(icrc_ok(f));
}

const size_t payload_sizes[] = {0, 1, 2, 3, 4, 5, 255, 256, 1024, 4096};

}  // namespace

TEST_CASE("build -> parse round trip for every opcode, IP version, VLAN and payload size",
          "[wire][build][parse]") {
  unsigned frames = 0;
  for (const ExpectedOpcode& e : expected_opcodes()) {
    std::vector<size_t> sizes;
    if (e.has_payload) {
      sizes.assign(std::begin(payload_sizes), std::end(payload_sizes));
      if (e.opcode == 0x1d) sizes.push_back(8);  // ATOMIC_WRITE carries 8 bytes in practice
    } else {
      sizes = {0};
    }
    for (IpVersion v : {IpVersion::v4, IpVersion::v6}) {
      for (bool vlan : {false, true}) {
        for (size_t len : sizes) {
          for (Fill fill : {Fill::maxima, Fill::pattern_a, Fill::pattern_b}) {
            INFO(e.full_name << " IPv" << int(v) << (vlan ? " VLAN" : "") << " payload " << len << " fill "
                             << int(fill));
            const Bytes payload = random_bytes(len, len * 131 + e.opcode);
            const FrameSpec spec = make_spec(e.opcode, v, vlan, payload, fill);
            if (len % 4 != 0 && (e.position == Position::first || e.position == Position::middle)) {
              // FIRST/MIDDLE carry a whole path MTU, so a pad there is malformed: the builder refuses to
              // write such a frame (and the parser refuses to read one, see test_parse_errors.cpp).
              Bytes out(frame_size(spec));
              CHECK(build_frame(spec, out).error == BuildError::unaligned_payload);
              continue;
            }
            const Bytes bytes = build_bytes(spec);
            // Byte for byte what the spec says.
            REQUIRE(bytes == reference_frame(spec));
            check_round_trip(spec, bytes, parse(bytes));
            ++frames;
          }
        }
      }
    }
  }
  // 33 opcodes with a payload x 10 sizes (+ ATOMIC_WRITE's 8) + 7 without, and XRC's 18 with and 5
  // without, less the 10 + 6 FIRST/MIDDLE opcodes x the 5 sizes that are not a multiple of 4 (1, 2, 3,
  // 5, 255).
  CHECK(frames == ((33 + 18) * 10 + 1 + 7 + 5 - (10 + 6) * 5) * 2 * 2 * 3);
}

TEST_CASE("build: frame_size and the exact output buffer", "[wire][build]") {
  const Bytes payload = random_bytes(37, 1);
  for (IpVersion v : {IpVersion::v4, IpVersion::v6}) {
    for (bool vlan : {false, true}) {
      const FrameSpec spec = make_spec(0x0b, v, vlan, payload);
      // 14/18 + 20/40 + UDP 8 + BTH 12 + RETH 16 + ImmDt 4 + 37 + pad 3 + ICRC 4
      const size_t want = (vlan ? 18u : 14u) + (v == IpVersion::v4 ? 20u : 40u) + 8 + 12 + 16 + 4 + 37 + 3 + 4;
      CHECK(frame_size(spec) == want);

      // One byte short: refused, nothing written.
      Bytes small(want - 1, 0xa5);
      BuildResult r = build_frame(spec, small);
      CHECK(r.error == BuildError::buffer_too_small);
      CHECK(r.size == 0);
      CHECK_FALSE(r.ok());
      CHECK(std::all_of(small.begin(), small.end(), [](uint8_t x) { return x == 0xa5; }));

      // Exact size works.
      Bytes exact(want);
      r = build_frame(spec, exact);
      CHECK(r.ok());
      CHECK(r.size == want);

      // A larger buffer: same bytes, and nothing written past the frame.
      Bytes big(want + 64, 0x5a);
      r = build_frame(spec, big);
      CHECK(r.ok());
      CHECK(r.size == want);
      CHECK(std::equal(exact.begin(), exact.end(), big.begin()));
      CHECK(std::all_of(big.begin() + std::ptrdiff_t(want), big.end(), [](uint8_t x) { return x == 0x5a; }));

      // Empty output span.
      r = build_frame(spec, std::span<uint8_t>());
      CHECK(r.error == BuildError::buffer_too_small);
    }
  }
}

TEST_CASE("build: errors", "[wire][build]") {
  Bytes out(8192, 0xa5);
  const Bytes payload = random_bytes(16, 2);

  SECTION("unknown opcode") {
    for (unsigned op : {0x15u, 0x18u, 0x1eu, 0x2cu, 0x63u, 0x66u, 0x80u, 0x82u, 0xffu}) {
      INFO("opcode 0x" << std::hex << op);
      BuildResult r = build_frame(make_spec(uint8_t(op), IpVersion::v4, false, {}), out);
      CHECK(r.error == BuildError::unknown_opcode);
      CHECK(r.size == 0);
    }
  }
  SECTION("payload on an opcode that carries none") {
    for (const ExpectedOpcode& e : expected_opcodes()) {
      if (e.has_payload) continue;
      INFO(e.full_name);
      BuildResult r = build_frame(make_spec(e.opcode, IpVersion::v4, false, payload), out);
      CHECK(r.error == BuildError::payload_not_allowed);
      CHECK(r.size == 0);
      // The same opcode without a payload is fine.
      CHECK(build_frame(make_spec(e.opcode, IpVersion::v4, false, {}), out).ok());
    }
  }
  SECTION("too large") {
    // IPv4 total length = 20 + 8 + 12 + payload + pad + 4 must fit in 16 bits.
    Bytes huge(70000, 0x11);
    Bytes big_out(70000 + 128);
    auto build_len = [&](size_t n, IpVersion v) {
      return build_frame(make_spec(0x04, v, false, std::span<const uint8_t>(huge.data(), n)), big_out);
    };
    // 65488 + pad 0 -> total 65532: fits. 65489..65491 need a pad that pushes the total past 65535.
    BuildResult r = build_len(65488, IpVersion::v4);
    REQUIRE(r.ok());
    CHECK(r.size == 14 + 65532);
    const Frame f = [&] {
      Frame fr;
      parse_frame(std::span<const uint8_t>(big_out.data(), r.size), fr);
      return fr;
    }();
    CHECK(f.is_roce());
    CHECK(f.ipv4.total_length == 65532);
    CHECK(f.roce.payload.size() == 65488);
    CHECK(icrc_ok(f));
    CHECK(build_len(65489, IpVersion::v4).error == BuildError::too_large);
    CHECK(build_len(65491, IpVersion::v4).error == BuildError::too_large);
    CHECK(build_len(65492, IpVersion::v4).error == BuildError::too_large);
    CHECK(build_len(70000, IpVersion::v4).error == BuildError::too_large);
    CHECK(build_len(70000, IpVersion::v6).error == BuildError::too_large);
    CHECK(build_len(4096, IpVersion::v6).ok());
  }
}

TEST_CASE("build: the builder owns every derived field", "[wire][build]") {
  const Bytes payload = random_bytes(5, 3);
  FrameSpec s = make_spec(0x04, IpVersion::v4, false, payload);
  const Bytes clean = build_bytes(s);
  // Values a careless caller might leave in the spec; none of them may reach the wire.
  s.eth.ethertype = 0x1234;
  s.ipv4.total_length = 7;
  s.ipv4.protocol = 6;
  s.ipv4.more_fragments = true;
  s.ipv4.fragment_offset = 100;
  s.ipv4.checksum = 0xbeef;
  s.ipv4.header_length = 60;
  s.headers.bth.pad_count = 0;  // the payload needs 3
  CHECK(build_bytes(s) == clean);
  s.ip_version = IpVersion::v6;
  s.ipv6.payload_length = 1;
  s.ipv6.next_header = 6;
  const Bytes v6 = build_bytes(s);
  const Frame f = parse(v6);
  CHECK(f.is_roce());
  CHECK(f.ipv6.next_header == 17);
  CHECK(f.roce.bth().pad_count == 3);
  CHECK(icrc_ok(f));
}

TEST_CASE("build: DF is taken from the spec", "[wire][build]") {
  FrameSpec s = make_spec(0x11, IpVersion::v4, false, {});
  CHECK(s.ipv4.dont_fragment);  // the default: RoCEv2 senders set DF
  s.ipv4.dont_fragment = false;
  const Bytes b = build_bytes(s);
  CHECK((b[14 + 6] & 0x40) == 0);
  const Frame f = parse(b);
  CHECK(f.is_roce());
  CHECK_FALSE(f.ipv4.dont_fragment);
  CHECK(icrc_ok(f));
}

TEST_CASE("build: pad_for and BuildError names", "[wire][build]") {
  CHECK(pad_for(0) == 0);
  CHECK(pad_for(1) == 3);
  CHECK(pad_for(2) == 2);
  CHECK(pad_for(3) == 1);
  CHECK(pad_for(4) == 0);
  CHECK(pad_for(4097) == 3);
  CHECK(to_string(BuildError::none) == "no error");
  CHECK(to_string(BuildError::unknown_opcode) == "unknown opcode");
  CHECK(to_string(BuildError::payload_not_allowed) == "payload on an opcode that carries none");
  CHECK(to_string(BuildError::too_large) == "packet larger than 65535 bytes");
  CHECK(to_string(BuildError::buffer_too_small) == "output buffer too small");
}

TEST_CASE("parse: Ethernet trailer beyond the IP packet is ignored", "[wire][parse]") {
  // The smallest RoCEv2 frame (IPv4 ACK) is already 62 bytes, so a switch never pads it; but a capture
  // may still carry the FCS or padding after the IP packet. It must not count as payload or ICRC.
  for (unsigned op : {0x11u, 0x04u, 0x81u}) {
    for (size_t trailer : {size_t(1), size_t(4), size_t(46)}) {
      INFO("opcode 0x" << std::hex << op << std::dec << " trailer " << trailer);
      const Bytes clean = build_simple(uint8_t(op), op == 0x04 ? 1 : 0);
      Bytes b = clean;
      b.insert(b.end(), trailer, 0xee);
      const Frame f = parse(b);
      REQUIRE(f.ok());
      CHECK(f.is_roce());
      CHECK(f.end_offset == clean.size());
      CHECK(f.roce.payload.size() == (op == 0x04 ? 1u : 0u));
      CHECK(icrc_ok(f));
    }
  }
  // A short non-RoCE UDP datagram padded to the 60-byte Ethernet minimum.
  Bytes udp = build_simple(0x11);
  udp = with_udp_payload(udp, random_bytes(2, 9));  // 14 + 20 + 8 + 2 = 44 bytes
  set16(&udp[36], 53);                              // destination port 53
  udp.resize(60, 0);
  const Frame f = parse(udp);
  CHECK(f.ok());
  CHECK(f.kind == FrameKind::other_udp);
  CHECK(f.end_offset == 44);
  CHECK(f.udp.length == 10);
}
