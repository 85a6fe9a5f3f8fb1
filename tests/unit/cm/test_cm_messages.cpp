// The CM codec against ground truth: rxe's rping handshake (tests/data/captures/10-rdma-cm-rping.pcap)
// decodes to the values rdma_cm put in, and encodes back byte for byte; hostile input is refused.
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
