// The small pieces: addresses and their text forms, PSN arithmetic, AETH helpers, RNR timers, UDP source
// ports, MAD headers, byte-order helpers and the header codecs used on their own.
#include <catch2/catch.hpp>

#include <string>

#include "transport/wire/address.hpp"
#include "transport/wire/bth.hpp"
#include "transport/wire/bytes.hpp"
#include "transport/wire/ip.hpp"
#include "transport/wire/mad.hpp"
#include "wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;

TEST_CASE("psn_diff: signed distance modulo 2^24", "[wire][psn]") {
  CHECK(psn_diff(0, 0) == 0);
  CHECK(psn_diff(5, 3) == 2);
  CHECK(psn_diff(3, 5) == -2);
  // Across the wrap.
  CHECK(psn_diff(0, 0xffffff) == 1);
  CHECK(psn_diff(0xffffff, 0) == -1);
  CHECK(psn_diff(10, 0xfffff0) == 26);
  CHECK(psn_diff(0xfffff0, 10) == -26);
  // The 2^23 window edge: +2^23-1 is ahead, 2^23 is behind.
  CHECK(psn_diff(0x7fffff, 0) == 0x7fffff);
  CHECK(psn_diff(0x800000, 0) == -0x800000);
  CHECK(psn_diff(0, 0x7fffff) == -0x7fffff);
  CHECK(psn_diff(0, 0x800000) == -0x800000);
  CHECK(psn_diff(0x800001, 1) == -0x800000);
  CHECK(psn_diff(0x1000000 + 7, 7) == 0);  // bits above 24 do not count
  // Antisymmetric everywhere except at -2^23.
  Rng r(5);
  for (int i = 0; i < 2000; ++i) {
    const uint32_t a = uint32_t(r.next()) & 0xffffff, b = uint32_t(r.next()) & 0xffffff;
    const int32_t d = psn_diff(a, b);
    CHECK(d >= -0x800000);
    CHECK(d <= 0x7fffff);
    CHECK(((b + uint32_t(d)) & 0xffffff) == a);
    if (d != -0x800000) CHECK(psn_diff(b, a) == -d);
  }
}

TEST_CASE("rnr_timer_microseconds: IBTA table 45", "[wire][aeth]") {
  // rocev2.md, in ms: 655.36 0.01 0.02 ... 491.52.
  const uint32_t us[32] = {655360, 10,    20,    30,    40,    60,     80,     120,    160,   240,  320,
                           480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,  10240, 15360,
                           20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  for (uint8_t code = 0; code < 32; ++code) {
    INFO("code " << unsigned(code));
    CHECK(rnr_timer_microseconds(code) == us[code]);
  }
  CHECK(rnr_timer_microseconds(0) == 655360);
  CHECK(rnr_timer_microseconds(1) == 10);
  CHECK(rnr_timer_microseconds(14) == 1280);
  CHECK(rnr_timer_microseconds(31) == 491520);
}

TEST_CASE("Aeth constructors and kind()", "[wire][aeth]") {
  Aeth a = Aeth::ack(5);
  CHECK(a.syndrome == 0x1f);  // no end-to-end flow control by default
  CHECK(a.msn == 5);
  CHECK(a.kind() == AethKind::ack);
  CHECK(a.low_bits() == aeth_credit_invalid);
  a = Aeth::ack(0x1234567, 3);
  CHECK(a.syndrome == 0x03);
  CHECK(a.msn == 0x234567);  // 24 bits
  CHECK(a.kind() == AethKind::ack);

  a = Aeth::rnr_nak(7, 14);
  CHECK(a.syndrome == 0x2e);
  CHECK(a.msn == 7);
  CHECK(a.kind() == AethKind::rnr_nak);
  CHECK(a.low_bits() == 14);
  CHECK(Aeth::rnr_nak(0, 0xff).syndrome == 0x3f);  // the timer is 5 bits
  CHECK(Aeth::rnr_nak(0xffffff, 1).msn == 0xffffff);
  CHECK(Aeth::rnr_nak(0x1abcdef, 1).msn == 0xabcdef);  // 24 bits
  CHECK(Aeth::nak(0x1abcdef, NakCode::invalid_request).msn == 0xabcdef);

  const std::pair<NakCode, uint8_t> naks[] = {{NakCode::psn_sequence_error, 0x60},
                                              {NakCode::invalid_request, 0x61},
                                              {NakCode::remote_access_error, 0x62},
                                              {NakCode::remote_operational_error, 0x63},
                                              {NakCode::invalid_rd_request, 0x64}};
  for (auto [code, syndrome] : naks) {
    a = Aeth::nak(0xffffff, code);
    CHECK(a.syndrome == syndrome);
    CHECK(a.msn == 0xffffff);
    CHECK(a.kind() == AethKind::nak);
    CHECK(a.low_bits() == uint8_t(code));
  }
  // Classes 010 and 1xx are reserved.
  for (unsigned s = 0; s < 256; ++s) {
    const AethKind k = Aeth{uint8_t(s), 0}.kind();
    const unsigned cls = s >> 5;
    CHECK(k == (cls == 0 ? AethKind::ack : cls == 1 ? AethKind::rnr_nak : cls == 3 ? AethKind::nak
                                                                                    : AethKind::reserved));
  }
  CHECK(to_string(AethKind::ack) == "ACK");
  CHECK(to_string(AethKind::rnr_nak) == "RNR NAK");
  CHECK(to_string(AethKind::nak) == "NAK");
  CHECK(to_string(AethKind::reserved) == "reserved");
  CHECK(nak_code_name(0) == "PSN sequence error");
  CHECK(nak_code_name(1) == "invalid request");
  CHECK(nak_code_name(2) == "remote access error");
  CHECK(nak_code_name(3) == "remote operational error");
  CHECK(nak_code_name(4) == "invalid RD request");
  CHECK(nak_code_name(5) == "reserved NAK code");
  CHECK(nak_code_name(31) == "reserved NAK code");
}

TEST_CASE("UDP source port from the flow label", "[wire][udp]") {
  // rocev2.md: ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000, values worked out by hand.
  CHECK(udp_source_port_from_flow_label(0) == 0xc000);
  CHECK(udp_source_port_from_flow_label(0x12345) == 0xe341);
  CHECK(udp_source_port_from_flow_label(0xfffff) == 0xffc0);
  CHECK(udp_source_port_from_flow_label(0x3fff) == 0xffff);
  CHECK(udp_source_port_from_flow_label(0x4000) == 0xc001);
  CHECK(udp_source_port_from_flow_label(0xfc000) == 0xc03f);
  // Only the 20-bit label counts.
  CHECK(udp_source_port_from_flow_label(0xfff12345) == 0xe341);
  // Always in 0xC000-0xFFFF, for every flow label.
  bool all_in_range = true;
  for (uint32_t fl = 0; fl <= 0xfffff; ++fl) {
    const uint16_t p = udp_source_port_from_flow_label(fl);
    all_in_range &= p >= 0xc000;
  }
  CHECK(all_in_range);
  // As rdma_calc_flow_label(): fold the product of the QP numbers into 20 bits.
  CHECK(flow_label_from_qpns(0x11, 0x12) == 0x132);
  CHECK(flow_label_from_qpns(0x12, 0x11) == 0x132);
  CHECK(flow_label_from_qpns(0xffffff, 0xffffff) == 0xfff1e);
  CHECK(flow_label_from_qpns(0x1234, 0x5678ab) == 0xceadc);
  CHECK(flow_label_from_qpns(0, 0x123) == 0);
}

TEST_CASE("internet_checksum", "[wire][ip]") {
  // RFC 1071's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2, checksum 220d.
  const uint8_t rfc[8] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  CHECK(internet_checksum(rfc, 8) == 0x220d);
  CHECK(internet_checksum(rfc, 0) == 0xffff);
  // Odd lengths pad with a zero byte.
  CHECK(internet_checksum(rfc, 3) == uint16_t(~(0x0001 + 0xf200)));
  const Bytes data = random_bytes(101, 3);
  for (size_t n = 0; n <= data.size(); ++n) CHECK(internet_checksum(data.data(), n) == ref_ip_checksum(data.data(), n));
  // The golden CNP's IPv4 header (rocev2.md) checks out.
  const uint8_t hdr[20] = {0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11,
                           0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01};
  CHECK(internet_checksum(hdr, 20) == 0);
}

TEST_CASE("IP header writers", "[wire][ip]") {
  Ipv4Header h;
  h.tos = 0x03;
  h.total_length = 0x1234;
  h.identification = 0xabcd;
  h.ttl = 7;
  h.src = 0x0a000001;
  h.dst = 0xc0a80102;
  uint8_t b[40] = {};
  CHECK(write_ipv4(b, h) == 20);
  const uint8_t want[20] = {0x45, 0x03, 0x12, 0x34, 0xab, 0xcd, 0x40, 0x00, 0x07, 0x11,
                            0, 0, 0x0a, 0x00, 0x00, 0x01, 0xc0, 0xa8, 0x01, 0x02};
  CHECK(std::equal(want, want + 10, b));
  CHECK(std::equal(want + 12, want + 20, b + 12));
  CHECK(ref_ip_checksum(b, 20) == 0);
  CHECK(h.ecn() == Ecn::ce);
  CHECK(h.dscp() == 0);
  h.dont_fragment = false;
  h.more_fragments = true;
  h.fragment_offset = 0x1abc;
  write_ipv4(b, h);
  CHECK(b[6] == 0x3a);
  CHECK(b[7] == 0xbc);

  Ipv6Header v;
  v.traffic_class = 0xa5;
  v.flow_label = 0xfedcb;
  v.payload_length = 0x0102;
  v.hop_limit = 9;
  v.src = *parse_ip("2001:db8::1");
  v.dst = *parse_ip("fe80::2");
  CHECK(write_ipv6(b, v) == 40);
  const uint8_t want6[8] = {0x6a, 0x5f, 0xed, 0xcb, 0x01, 0x02, 0x11, 0x09};
  CHECK(std::equal(want6, want6 + 8, b));
  CHECK(std::equal(v.src.bytes.begin(), v.src.bytes.end(), b + 8));
  CHECK(std::equal(v.dst.bytes.begin(), v.dst.bytes.end(), b + 24));
  CHECK(v.ecn() == Ecn::ect1);

  UdpHeader u;
  u.src_port = 0xc123;
  u.length = 0x40;
  CHECK(write_udp(b, u) == 8);
  const uint8_t want_udp[8] = {0xc1, 0x23, 0x12, 0xb7, 0x00, 0x40, 0x00, 0x00};
  CHECK(std::equal(want_udp, want_udp + 8, b));
}

TEST_CASE("parse_ip, parse_mac and the text forms", "[wire][address]") {
  SECTION("IPv4") {
    const auto a = parse_ip("10.77.0.11");
    REQUIRE(a);
    CHECK(a->is_v4());
    CHECK(a->v4() == 0x0a4d000b);
    CHECK(*a == IpAddress::from_v4(0x0a4d000b));
    const uint8_t raw[4] = {10, 77, 0, 11};
    CHECK(*a == IpAddress::from_v4_bytes(raw));
    // Held as the v4-mapped GID.
    const uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 11};
    CHECK(std::equal(mapped, mapped + 16, a->bytes.begin()));
    CHECK(to_string(*a) == "10.77.0.11");
    CHECK(gid_string(*a) == "::ffff:10.77.0.11");
    // The v4-mapped text is the same address.
    CHECK(parse_ip("::ffff:10.77.0.11") == a);
    CHECK(to_string(*parse_ip("::ffff:10.77.0.11")) == "10.77.0.11");
    CHECK(to_string(IpAddress::from_v4(0xffffffff)) == "255.255.255.255");
    CHECK(to_string(IpAddress::from_v4(0)) == "0.0.0.0");
  }
  SECTION("IPv6") {
    const auto a = parse_ip("2001:DB8:0:0:0:0:0:1");
    REQUIRE(a);
    CHECK_FALSE(a->is_v4());
    CHECK(a->bytes[0] == 0x20);
    CHECK(a->bytes[1] == 0x01);
    CHECK(a->bytes[15] == 0x01);
    CHECK(to_string(*a) == "2001:db8::1");  // RFC 5952: lower case, longest zero run compressed
    CHECK(gid_string(*a) == "2001:db8::1");
    CHECK(to_string(*parse_ip("fe80::0211:22ff:fe33:4455")) == "fe80::211:22ff:fe33:4455");
    CHECK(to_string(*parse_ip("::")) == "::");
    CHECK(to_string(*parse_ip("::1")) == "::1");
    CHECK(to_string(*parse_ip("2001:db8:0:0:1:0:0:1")) == "2001:db8::1:0:0:1");
    CHECK(to_string(IpAddress::from_v6_bytes(parse_ip("fe80::1")->bytes.data())) == "fe80::1");
  }
  SECTION("bad IP text") {
    for (const char* s : {"", "10.0.0", "10.0.0.256", "1.2.3.4.5", " 10.0.0.1", "10.0.0.1 ", "010.0.0.1",
                          "a.b.c.d", "2001:db8::1::2", "fe80::g", "10.0.0.1/24", "localhost"}) {
      INFO("'" << s << "'");
      CHECK_FALSE(parse_ip(s).has_value());
    }
    // Text after an embedded NUL is not ignored.
    CHECK_FALSE(parse_ip(std::string_view("10.0.0.1\0junk", 13)).has_value());
  }
  SECTION("MAC") {
    const auto m = parse_mac("02:00:0a:FF:ee:11");
    REQUIRE(m);
    CHECK(*m == MacAddress{{0x02, 0x00, 0x0a, 0xff, 0xee, 0x11}});
    CHECK(to_string(*m) == "02:00:0a:ff:ee:11");
    CHECK(to_string(MacAddress::broadcast()) == "ff:ff:ff:ff:ff:ff");
    CHECK(parse_mac("ff:ff:ff:ff:ff:ff") == MacAddress::broadcast());
    CHECK(parse_mac("2:0:a:ff:ee:11") == m);  // leading zeros may be left out
    CHECK(to_string(MacAddress{}) == "00:00:00:00:00:00");
  }
  SECTION("bad MAC text") {
    for (const char* s : {"", "02:00:00:00:00", "02:00:00:00:00:11:22", "02-00-00-00-00-11", "02:00:00:00:00:11 ",
                          "02:00:00:00:00:1g", "002:00:00:00:00:11", "02:00:00:00:00:011", "02::00:00:00:00",
                          // sscanf's %x would take these: a sign, a 0x prefix, spaces.
                          "-1:00:00:00:00:00", "+2:00:00:00:00:11", "0x:00:00:00:00:00", " 02:00:00:00:00:11",
                          "02: 00:00:00:00:11"}) {
      INFO("'" << s << "'");
      CHECK_FALSE(parse_mac(s).has_value());
    }
    CHECK_FALSE(parse_mac(std::string_view("02:00:00:00:00:11\0", 18)).has_value());
  }
}

TEST_CASE("MAD header", "[wire][mad]") {
  MadHeader h;
  h.base_version = 1;
  h.mgmt_class = mgmt_class_cm;
  h.class_version = 2;
  h.method = 0x83;
  h.status = 0x1234;
  h.class_specific = 0x5678;
  h.transaction_id = 0x0102030405060708ull;
  h.attribute_id = 0x0013;
  h.reserved = 0xabcd;
  h.attribute_modifier = 0xdeadbeef;
  uint8_t buf[mad_size] = {};
  write_mad_header(buf, h);
  // IBTA 13.4.3: the common MAD header, big-endian.
  const uint8_t want[24] = {0x01, 0x07, 0x02, 0x83, 0x12, 0x34, 0x56, 0x78, 1, 2, 3, 4,
                            5,    6,    7,    8,    0x00, 0x13, 0xab, 0xcd, 0xde, 0xad, 0xbe, 0xef};
  CHECK(std::equal(want, want + 24, buf));
  CHECK(buf[24] == 0);  // nothing past the header
  const auto r = read_mad_header(std::span<const uint8_t>(buf, 24));
  REQUIRE(r);
  CHECK(r->base_version == 1);
  CHECK(r->mgmt_class == 0x07);
  CHECK(r->class_version == 2);
  CHECK(r->method == 0x83);
  CHECK(r->status == 0x1234);
  CHECK(r->class_specific == 0x5678);
  CHECK(r->transaction_id == 0x0102030405060708ull);
  CHECK(r->attribute_id == 0x0013);
  CHECK(r->reserved == 0xabcd);
  CHECK(r->attribute_modifier == 0xdeadbeef);
  CHECK_FALSE(read_mad_header(std::span<const uint8_t>(buf, 23)).has_value());
  CHECK_FALSE(read_mad_header({}).has_value());
  CHECK(gsi_qpn == 1);
  CHECK(gsi_qkey == 0x80010000);
}

TEST_CASE("MAD names", "[wire][mad]") {
  const std::pair<uint16_t, const char*> cm[] = {
      {0x10, "REQ"},      {0x11, "MRA"},      {0x12, "REJ"}, {0x13, "REP"}, {0x14, "RTU"},
      {0x15, "DREQ"},     {0x16, "DREP"},     {0x17, "SIDR_REQ"}, {0x18, "SIDR_REP"}, {0x19, "LAP"},
      {0x1a, "APR"},      {0x20, "ClassPortInfo"}};
  for (auto [id, name] : cm) CHECK(cm_attribute_name(id) == name);
  CHECK(cm_attribute_name(0x0f).empty());
  CHECK(cm_attribute_name(0x1b).empty());
  CHECK(cm_attribute_name(0x1000).empty());
  // REJ reasons: every one of IBTA table 112 has words; what it does not define has none.
  for (uint16_t reason = 1; reason <= 33; ++reason) CHECK_FALSE(cm_reject_reason_name(reason).empty());
  CHECK(cm_reject_reason_name(8) == "invalid service ID");
  CHECK(cm_reject_reason_name(28) == "consumer reject");
  CHECK(cm_reject_reason_name(0).empty());
  CHECK(cm_reject_reason_name(34).empty());
  // SIDR_REP statuses: 0 to 5 have words, later ones none.
  for (uint8_t status = 0; status <= 5; ++status) CHECK_FALSE(cm_sidr_status_name(status).empty());
  CHECK(cm_sidr_status_name(1) == "service ID not supported");
  CHECK(cm_sidr_status_name(2) == "rejected");
  CHECK(cm_sidr_status_name(6).empty());
  CHECK(mgmt_class_name(0x07) == "CM");
  CHECK(mgmt_class_name(0x01) == "SubnMgt");
  CHECK(mgmt_class_name(0x03) == "SubnAdm");
  CHECK(mgmt_class_name(0x81) == "SubnMgtDirectedRoute");
  CHECK(mgmt_class_name(0x02).empty());
}

TEST_CASE("big-endian byte helpers", "[wire][bytes]") {
  uint8_t b[10] = {};
  store_be16(b, 0x1234);
  CHECK((b[0] == 0x12 && b[1] == 0x34));
  CHECK(load_be16(b) == 0x1234);
  store_be24(b, 0xabcdef);
  CHECK((b[0] == 0xab && b[1] == 0xcd && b[2] == 0xef));
  CHECK(load_be24(b) == 0xabcdef);
  store_be24(b, 0xff123456);  // only 24 bits are stored
  CHECK(load_be24(b) == 0x123456);
  store_be32(b, 0x89abcdef);
  CHECK((b[0] == 0x89 && b[3] == 0xef));
  CHECK(load_be32(b) == 0x89abcdef);
  store_be64(b + 1, 0x0102030405060708ull);
  for (int i = 0; i < 8; ++i) CHECK(b[1 + i] == i + 1);
  CHECK(load_be64(b + 1) == 0x0102030405060708ull);
  store_be64(b, 0xffffffffffffffffull);
  CHECK(load_be64(b) == 0xffffffffffffffffull);
}

TEST_CASE("BTH and extension header codecs on their own", "[wire][bth]") {
  Bth b;
  b.opcode = 0x0a;
  b.solicited = true;
  b.pad_count = 2;
  b.pkey = 0x8001;
  b.becn = true;
  b.dest_qp = 0xabcdef;
  b.ack_req = true;
  b.psn = 0x123456;
  uint8_t raw[12];
  write_bth(raw, b);
  const uint8_t want[12] = {0x0a, 0xa0, 0x80, 0x01, 0x40, 0xab, 0xcd, 0xef, 0x80, 0x12, 0x34, 0x56};
  CHECK(std::equal(want, want + 12, raw));
  Bth r;
  read_bth(raw, r);
  CHECK(r.opcode == 0x0a);
  CHECK(r.solicited);
  CHECK_FALSE(r.migreq);
  CHECK(r.pad_count == 2);
  CHECK(r.tver == 0);
  CHECK(r.pkey == 0x8001);
  CHECK_FALSE(r.fecn);
  CHECK(r.becn);
  CHECK(r.reserved6 == 0);
  CHECK(r.dest_qp == 0xabcdef);
  CHECK(r.ack_req);
  CHECK(r.reserved7 == 0);
  CHECK(r.psn == 0x123456);
  // Defaults: P_Key 0xFFFF.
  CHECK(Bth{}.pkey == 0xffff);
  CHECK(default_pkey == 0xffff);

  // All extension headers at once, in wire order.
  TransportHeaders h = make_spec(0x04, IpVersion::v4, false, {}, Fill::pattern_a).headers;
  uint8_t ext[128];
  std::memset(ext, 0xee, sizeof ext);
  const unsigned n = write_extension_headers(ext, 0x3ff, h);
  CHECK(n == 8 + 4 + 4 + 16 + 28 + 4 + 8 + 4 + 4 + 16);
  CHECK(ext[n] == 0xee);
  // DETH, XRCETH, FETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, CNP: the first bytes of each.
  CHECK(load_be32(ext) == h.deth.qkey);
  CHECK(load_be32(ext + 8) == (uint32_t(h.xrceth.reserved) << 24 | h.xrceth.srq));
  CHECK(load_be32(ext + 12) == h.feth.raw);
  CHECK(load_be64(ext + 16) == h.reth.va);
  CHECK(load_be64(ext + 32) == h.atomic_eth.va);
  CHECK(ext[60] == h.aeth.syndrome);
  CHECK(load_be64(ext + 64) == h.atomic_ack_eth.original);
  CHECK(load_be32(ext + 72) == h.immdt);
  CHECK(load_be32(ext + 76) == h.ieth);
  TransportHeaders back;
  CHECK(read_extension_headers(ext, 0x3ff, back) == n);
  CHECK(back.deth.qkey == h.deth.qkey);
  CHECK(back.deth.src_qp == h.deth.src_qp);
  CHECK(back.xrceth.srq == h.xrceth.srq);
  CHECK(back.feth.raw == h.feth.raw);
  CHECK(back.reth.dma_length == h.reth.dma_length);
  CHECK(back.atomic_eth.compare == h.atomic_eth.compare);
  CHECK(back.atomic_eth.swap_add == h.atomic_eth.swap_add);
  CHECK(back.aeth.msn == h.aeth.msn);
  CHECK(back.atomic_ack_eth.original == h.atomic_ack_eth.original);
  CHECK(back.immdt == h.immdt);
  CHECK(back.ieth == h.ieth);
  CHECK(write_extension_headers(ext, 0, h) == 0);
}
