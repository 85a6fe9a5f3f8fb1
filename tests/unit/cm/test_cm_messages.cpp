// The CM codec against ground truth: rxe's rping handshake (tests/data/captures/10-rdma-cm-rping.pcap)
// decodes to the values rdma_cm put in, and encodes back byte for byte; SIDR_REQ/SIDR_REP against their
// layout written out byte by byte; hostile input is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "tests/unit/support/capture_file.hpp"
#include "transport/cm/cm_messages.hpp"
#include "transport/cm/rdma_cm_header.hpp"
#include "transport/wire/frame.hpp"

using namespace uroce;
using namespace uroce::cm;

namespace {

// The MADs to QP1 in the rping capture, in order.
std::vector<std::vector<uint8_t>> rping_mads() {
  std::vector<std::vector<uint8_t>> mads;
  for (const auto& bytes : test::capture("10-").frames) {
    wire::Frame f;
    if (wire::parse_frame(bytes, f) != wire::ParseError::none || f.kind != wire::FrameKind::roce) continue;
    if (f.roce.bth().dest_qp != wire::gsi_qpn) continue;
    mads.emplace_back(f.roce.payload.begin(), f.roce.payload.end());
  }
  return mads;
}

}  // namespace

TEST_CASE("cm codec: rxe's rping handshake decodes and re-encodes byte for byte", "[cm]") {
  const auto mads = rping_mads();
  REQUIRE(mads.size() == 5);  // REQ REP RTU DREQ DREP
  std::vector<CmAttribute> seen;
  for (const auto& mad : mads) {
    auto d = decode(mad);
    REQUIRE(std::holds_alternative<Decoded>(d));
    const Decoded& m = std::get<Decoded>(d);
    seen.push_back(attribute_of(m.message));
    const Mad again = encode(m.message, m.header.transaction_id);
    CHECK(std::equal(again.begin(), again.end(), mad.begin()));
  }
  CHECK(seen == std::vector{CmAttribute::req, CmAttribute::rep, CmAttribute::rtu, CmAttribute::dreq, CmAttribute::drep});
}

TEST_CASE("cm codec: the fields of rxe's REQ and REP", "[cm]") {
  const auto mads = rping_mads();
  const Req req = std::get<Req>(std::get<Decoded>(decode(mads[0])).message);
  CHECK(req.local_comm_id == 0xebb31978);
  CHECK(req.service_id == service_id_of(wire::rdma_cm_ps_tcp, 7174));
  CHECK(req.local_ca_guid == 0x505400fffe77000cull);
  CHECK(req.local_qpn == 0x11);
  CHECK(req.responder_resources == 1);
  CHECK(req.initiator_depth == 1);
  CHECK(req.remote_cm_response_timeout == 20);
  CHECK(req.local_cm_response_timeout == 20);
  CHECK(req.service_type == ServiceType::rc);
  CHECK(req.starting_psn == 0xe48abb);
  CHECK(req.retry_count == 7);
  CHECK(req.rnr_retry_count == 7);
  CHECK(req.path_mtu == 3);
  CHECK(req.max_cm_retries == 15);
  CHECK(req.pkey == 0xffff);
  CHECK(req.primary.local_lid == 0xffff);
  CHECK(wire::to_string(req.primary.local_gid) == "10.77.0.12");
  CHECK(wire::to_string(req.primary.remote_gid) == "10.77.0.11");
  CHECK(req.primary.hop_limit == 64);
  CHECK(req.primary.local_ack_timeout == 19);
  const auto ip = read_ip_header(req.private_data);
  REQUIRE(ip.has_value());
  CHECK(wire::to_string(ip->source) == "10.77.0.12");
  CHECK(wire::to_string(ip->destination) == "10.77.0.11");
  uint8_t again[ip_header_size];
  write_ip_header(again, *ip);
  CHECK(std::equal(std::begin(again), std::end(again), req.private_data.begin()));

  const Rep rep = std::get<Rep>(std::get<Decoded>(decode(mads[1])).message);
  CHECK(rep.remote_comm_id == req.local_comm_id);
  CHECK(rep.local_qpn == 0x11);
  CHECK(rep.starting_psn == 0xa68abb);
  CHECK(rep.target_ack_delay == 15);
  CHECK(rep.rnr_retry_count == 7);
  CHECK(rep.responder_resources == 1);
  CHECK(rep.initiator_depth == 1);
  const Dreq dreq = std::get<Dreq>(std::get<Decoded>(decode(mads[3])).message);
  CHECK(dreq.remote_qpn == 0x11);
}

// Interop bug found by scripts/interop.sh (qperf -cm1, uroce client, rxe server): uroce's REQ carried the
// permissive LIDs 0xffff in its alternate path too; Linux's CM takes a non-zero alternate local LID for an
// alternate path and REJected with reason 18 (invalid alternate GID). A REQ without an alternate path must
// carry it all zero, byte for byte as rxe's own REQ does.
TEST_CASE("cm codec: a REQ without an alternate path encodes it all zero, as rxe's does", "[cm]") {
  constexpr size_t alternate_path_at = 120, path_size = 44;
  const auto mads = rping_mads();
  const auto rxe_alternate = std::span(mads[0]).subspan(alternate_path_at, path_size);
  CHECK(std::all_of(rxe_alternate.begin(), rxe_alternate.end(), [](uint8_t b) { return b == 0; }));

  Req req;  // as the connection manager's users build one: the primary path set, no alternate path
  req.primary.local_gid = wire::IpAddress::from_v4(0x0a630001);
  req.primary.remote_gid = wire::IpAddress::from_v4(0x0a630002);
  req.service_id = service_id_of(wire::rdma_cm_ps_tcp, 7174);
  const Mad mad = encode(req, 1);
  const auto ours = std::span(mad).subspan(alternate_path_at, path_size);
  CHECK(std::equal(ours.begin(), ours.end(), rxe_alternate.begin()));
  CHECK(std::get<Req>(std::get<Decoded>(decode(mad)).message).alternate.local_lid == 0);
}

TEST_CASE("cm codec: truncated, foreign and random MADs are refused, never read past the end", "[cm]") {
  const auto mads = rping_mads();
  for (size_t n = 0; n < wire::mad_size; n += 17) {
    auto d = decode(std::span(mads[0]).first(n));
    REQUIRE(std::holds_alternative<DecodeError>(d));
    CHECK(std::get<DecodeError>(d) == DecodeError::truncated);
  }
  std::vector<uint8_t> m = mads[0];
  m[1] = 0x03;  // SubnAdm
  CHECK(std::get<DecodeError>(decode(m)) == DecodeError::not_cm_class);
  m = mads[0];
  m[16] = 0x00, m[17] = 0x42;
  CHECK(std::get<DecodeError>(decode(m)) == DecodeError::unknown_attribute);
  m = mads[0];
  m[2] = 1;
  CHECK(std::get<DecodeError>(decode(m)) == DecodeError::bad_class_version);
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(wire::mad_size);
    for (auto& b : junk) b = uint8_t(rng());
    junk[0] = 1, junk[1] = 7, junk[2] = 2, junk[3] = 3, junk[16] = 0, junk[17] = uint8_t(0x10 + i % 8);
    auto d = decode(junk);  // any field values decode; what they mean is the state machine's to judge
    if (std::holds_alternative<Decoded>(d)) (void)encode(std::get<Decoded>(d).message, 1);
  }
  CHECK_FALSE(read_ip_header(std::span(mads[0]).first(10)).has_value());
}

// --- SIDR_REQ and SIDR_REP (IBTA 12.11) ------------------------------------------------------------------
// No capture of ours holds SIDR, so the ground truth is the layout itself (IBTA's SIDR_REQ and SIDR_REP
// message contents, as Linux's include/rdma/ibta_vol1_c12.h gives them), written out byte by byte here
// independently of the codec: offsets count from the start of the MAD (the message data starts at 24).

namespace {

// A CM MAD header (base version 1, class CM, version 2, method Send) with `attribute` and `tid`; the
// message data is filled in by the caller.
std::vector<uint8_t> cm_mad(uint16_t attribute, uint64_t tid) {
  std::vector<uint8_t> m(wire::mad_size, 0);
  m[0] = 1, m[1] = 0x07, m[2] = 2, m[3] = 0x03;
  for (int i = 0; i < 8; ++i) m[size_t(8 + i)] = uint8_t(tid >> (56 - 8 * i));
  m[16] = uint8_t(attribute >> 8), m[17] = uint8_t(attribute);
  return m;
}

// Writes `width` bytes of `value`, big-endian, at `offset`.
void put(std::vector<uint8_t>& m, size_t offset, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) m[offset + size_t(i)] = uint8_t(value >> (8 * (width - 1 - i)));
}

template <class T>
T decoded_as(std::span<const uint8_t> mad) {
  auto d = decode(mad);
  REQUIRE(std::holds_alternative<Decoded>(d));
  REQUIRE(std::holds_alternative<T>(std::get<Decoded>(d).message));
  return std::get<T>(std::get<Decoded>(d).message);
}

SidrReq full_sidr_req() {
  SidrReq r;
  r.request_id = 0x11223344;
  r.pkey = 0x8001;
  r.service_id = 0x0000000001111f90;  // rdma_cm UDP port 8080
  for (size_t i = 0; i < r.private_data.size(); ++i) r.private_data[i] = uint8_t(0xa0 + i);
  return r;
}

SidrRep full_sidr_rep() {
  SidrRep r;
  r.request_id = 0xa1b2c3d4;
  r.status = SidrStatus::redirect;
  r.additional_info_length = 0x48;
  r.qpn = 0xabcdef;
  r.service_id = 0x0102030405060708;
  r.qkey = 0xdeadbeef;
  for (size_t i = 0; i < r.additional_info.size(); ++i) r.additional_info[i] = uint8_t(0x10 + i);
  for (size_t i = 0; i < r.private_data.size(); ++i) r.private_data[i] = uint8_t(0x70 + i);
  return r;
}

}  // namespace

TEST_CASE("cm codec: SIDR_REQ fields sit where IBTA puts them", "[cm][sidr]") {
  // RequestID at 24 (4), P_Key at 28 (2), reserved 30..31, ServiceID at 32 (8), PrivateData 40..255 (216).
  std::vector<uint8_t> m = cm_mad(0x0017, 0x0000000100001000);
  put(m, 24, 0x11223344, 4);
  put(m, 28, 0x8001, 2);
  put(m, 32, 0x0000000001111f90, 8);
  for (size_t i = 0; i < 216; ++i) m[40 + i] = uint8_t(0xa0 + i);

  const SidrReq r = decoded_as<SidrReq>(m);
  CHECK(r.request_id == 0x11223344);
  CHECK(r.pkey == 0x8001);
  CHECK(r.service_id == 0x0000000001111f90);
  CHECK(r.private_data.front() == 0xa0);
  CHECK(r.private_data.back() == uint8_t(0xa0 + 215));
  CHECK(std::get<Decoded>(decode(m)).header.transaction_id == 0x0000000100001000);

  const Mad ours = encode(full_sidr_req(), 0x0000000100001000);
  CHECK(std::equal(ours.begin(), ours.end(), m.begin()));
  CHECK(attribute_of(full_sidr_req()) == CmAttribute::sidr_req);
  CHECK(sidr_req_private_size == wire::mad_size - 40);
}

TEST_CASE("cm codec: SIDR_REP fields sit where IBTA puts them", "[cm][sidr]") {
  // RequestID at 24 (4), Status 28, AdditionalInfoLength 29, reserved 30..31, QPN 32..34 (24 bits of a
  // 4-byte field whose low byte 35 is reserved), ServiceID at 36 (8), Q_Key at 44 (4), ClassPortInfo /
  // additional information 48..119 (72), PrivateData 120..255 (136).
  std::vector<uint8_t> m = cm_mad(0x0018, 0x1234567890abcdef);
  put(m, 24, 0xa1b2c3d4, 4);
  m[28] = 4;
  m[29] = 0x48;
  put(m, 32, 0xabcdef, 3);
  put(m, 36, 0x0102030405060708, 8);
  put(m, 44, 0xdeadbeef, 4);
  for (size_t i = 0; i < 72; ++i) m[48 + i] = uint8_t(0x10 + i);
  for (size_t i = 0; i < 136; ++i) m[120 + i] = uint8_t(0x70 + i);

  const SidrRep r = decoded_as<SidrRep>(m);
  CHECK(r.request_id == 0xa1b2c3d4);
  CHECK(r.status == SidrStatus::redirect);
  CHECK(r.additional_info_length == 0x48);
  CHECK(r.qpn == 0xabcdef);
  CHECK(r.service_id == 0x0102030405060708);
  CHECK(r.qkey == 0xdeadbeef);
  CHECK(r.additional_info.front() == 0x10);
  CHECK(r.additional_info.back() == uint8_t(0x10 + 71));
  CHECK(r.private_data.front() == 0x70);
  CHECK(r.private_data.back() == uint8_t(0x70 + 135));

  const Mad ours = encode(full_sidr_rep(), 0x1234567890abcdef);
  CHECK(std::equal(ours.begin(), ours.end(), m.begin()));
  CHECK(attribute_of(full_sidr_rep()) == CmAttribute::sidr_rep);
  CHECK(sidr_rep_info_size + sidr_rep_private_size == wire::mad_size - 48);
}

TEST_CASE("cm codec: SIDR messages round-trip every field; reserved bytes are written zero", "[cm][sidr]") {
  // Every field set, to values that differ from each other: the tests above show each one decodes from,
  // and encodes to, its own bytes, so a byte-identical second encoding is every field surviving the trip.
  const Mad req_mad = encode(full_sidr_req(), 7);
  CHECK(encode(decoded_as<SidrReq>(req_mad), 7) == req_mad);
  const SidrRep rep = full_sidr_rep();
  const Mad rep_mad = encode(rep, 8);
  CHECK(encode(decoded_as<SidrRep>(rep_mad), 8) == rep_mad);

  // A QPN wider than 24 bits keeps its low 24 bits and leaves the reserved byte alone.
  SidrRep wide = rep;
  wide.qpn = 0xff123456;
  const Mad wide_mad = encode(wide, 8);
  CHECK((wide_mad[32] == 0x12 && wide_mad[33] == 0x34 && wide_mad[34] == 0x56 && wide_mad[35] == 0));
  CHECK((req_mad[30] == 0 && req_mad[31] == 0 && rep_mad[30] == 0 && rep_mad[31] == 0 && rep_mad[35] == 0));

  // A status IBTA does not define is kept as it came, so the MAD still re-encodes byte for byte.
  Mad odd = rep_mad;
  odd[28] = 0xee;
  CHECK(uint8_t(decoded_as<SidrRep>(odd).status) == 0xee);
  CHECK(encode(decoded_as<SidrRep>(odd), 8) == odd);

  // Whatever a peer puts in the reserved bytes is read past, and we send zero there.
  Mad dirty = rep_mad;
  dirty[30] = dirty[31] = dirty[35] = 0x5a;
  CHECK(decoded_as<SidrRep>(dirty).qpn == rep.qpn);
  CHECK(encode(decoded_as<SidrRep>(dirty), 8) == rep_mad);
}

TEST_CASE("cm codec: truncated and random SIDR MADs are refused or decoded, never read past the end",
          "[cm][sidr]") {
  for (const Mad& mad : {encode(full_sidr_req(), 1), encode(full_sidr_rep(), 1)}) {
    for (size_t n = 0; n < wire::mad_size; ++n) {
      auto d = decode(std::span(mad).first(n));
      REQUIRE(std::holds_alternative<DecodeError>(d));
      CHECK(std::get<DecodeError>(d) == DecodeError::truncated);
    }
  }
  std::vector<uint8_t> lap = cm_mad(0x0019, 1);  // LAP: named, but not a message this CM understands
  CHECK(std::get<DecodeError>(decode(lap)) == DecodeError::unknown_attribute);
  std::mt19937 rng(19);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(wire::mad_size + size_t(i % 3));  // longer than a MAD: the rest is ignored
    for (auto& b : junk) b = uint8_t(rng());
    junk[0] = 1, junk[1] = 7, junk[2] = 2, junk[3] = 3, junk[16] = 0, junk[17] = uint8_t(0x17 + i % 2);
    auto d = decode(junk);
    REQUIRE(std::holds_alternative<Decoded>(d));
    const Mad once = encode(std::get<Decoded>(d).message, 1);
    CHECK(encode(std::get<Decoded>(decode(once)).message, 1) == once);  // stable after one round
    CHECK(attribute_of(std::get<Decoded>(d).message) == CmAttribute(0x17 + i % 2));
  }
}
