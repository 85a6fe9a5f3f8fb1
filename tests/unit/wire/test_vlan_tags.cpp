// VLAN tags before the IP header: none, one 802.1Q tag, or two (QinQ: a provider's service tag, 802.1ad
// 0x88a8 or the older 0x9100, outside the customer's 802.1Q tag). The frames are made here by inserting
// tag bytes into a built frame, not by the builder, so the parser is checked against bytes laid out by
// hand; the builder's tags are then checked against those same bytes.
#include <catch2/catch.hpp>

#include "tests/unit/wire/wire_test_support.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/icrc.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;

namespace {

// `untagged` (Ethernet II, no tag) with tags (TPID, TCI) inserted after the source MAC, outermost first.
Bytes with_tags(const Bytes& untagged, std::initializer_list<std::pair<uint16_t, uint16_t>> tags) {
  Bytes out(untagged.begin(), untagged.begin() + 12);
  for (const auto& [tpid, tci] : tags) {
    put16(out, tpid);
    put16(out, tci);
  }
  out.insert(out.end(), untagged.begin() + 12, untagged.end());
  return out;
}

}  // namespace

TEST_CASE("parse: QinQ frames give both tags and the RoCE packet inside", "[wire][parse][vlan]") {
  const Bytes plain = build_simple(0x04, 64, IpVersion::v4);  // RC SEND_ONLY
  const Frame reference = parse(plain);
  REQUIRE(reference.is_roce());

  for (uint16_t outer_tpid : {ethertype_service_vlan, ethertype_qinq_legacy, ethertype_vlan}) {
    INFO("outer TPID " << outer_tpid);
    const Bytes b = with_tags(plain, {{outer_tpid, 0xa064}, {ethertype_vlan, 0x6123}});  // S: PCP 5 VID 100
    const Frame f = parse(b);
    REQUIRE(f.error == ParseError::none);
    REQUIRE(f.is_roce());
    CHECK(f.eth.has_outer_vlan);
    CHECK(f.eth.outer_vlan_tpid == outer_tpid);
    CHECK(f.eth.outer_vlan_id() == 100);
    CHECK(f.eth.outer_vlan_pcp() == 5);
    CHECK(f.eth.has_vlan);
    CHECK(f.eth.vlan_tpid == ethertype_vlan);
    CHECK(f.eth.vlan_id() == 0x123);
    CHECK(f.eth.vlan_pcp() == 3);
    CHECK(f.eth.ethertype == ethertype_ipv4);
    CHECK(f.eth.size() == 22);
    CHECK(f.l3_offset == 22);
    CHECK(f.roce.bth().dest_qp == reference.roce.bth().dest_qp);
    CHECK(f.roce.bth().psn == reference.roce.bth().psn);
    CHECK(f.roce.payload.size() == reference.roce.payload.size());
    CHECK(icrc_ok(f));  // the ICRC starts at the IP header: tags change nothing in it
  }
}

TEST_CASE("parse: a lone service tag, and one tag more than two", "[wire][parse][vlan]") {
  const Bytes plain = build_simple(0x0a, 32, IpVersion::v6);  // RC RDMA_WRITE_ONLY over IPv6

  SECTION("a lone 802.1ad tag is the frame's VLAN, with its TPID") {
    const Frame f = parse(with_tags(plain, {{ethertype_service_vlan, 0x0007}}));
    REQUIRE(f.is_roce());
    CHECK(f.eth.has_vlan);
    CHECK_FALSE(f.eth.has_outer_vlan);
    CHECK(f.eth.vlan_tpid == ethertype_service_vlan);
    CHECK(f.eth.vlan_id() == 7);
    CHECK(f.l3_offset == 18);
  }
  SECTION("a third tag is a payload of another type (as an unknown ethertype)") {
    const Bytes b = with_tags(plain, {{ethertype_service_vlan, 1}, {ethertype_vlan, 2}, {ethertype_vlan, 3}});
    const Frame f = parse(b);
    CHECK(f.error == ParseError::none);
    CHECK(f.kind == FrameKind::other_l2);
    CHECK(f.eth.has_outer_vlan);
    CHECK(f.eth.vlan_id() == 2);
    CHECK(f.eth.ethertype == ethertype_vlan);
    CHECK_FALSE(f.is_roce());
  }
  SECTION("another TPID after a tag is the payload's type") {
    const Frame f = parse(with_tags(plain, {{ethertype_vlan, 9}, {0x88e7, 0}}));  // 802.1ah: not a tag here
    CHECK(f.error == ParseError::none);
    CHECK(f.kind == FrameKind::other_l2);
    CHECK(f.eth.has_vlan);
    CHECK_FALSE(f.eth.has_outer_vlan);
  }
}

TEST_CASE("parse: a QinQ frame cut inside its tags", "[wire][parse][vlan]") {
  const Bytes b = with_tags(build_simple(0x04, 8), {{ethertype_service_vlan, 0x0064}, {ethertype_vlan, 0x0005}});
  for (size_t n = 14; n < 22; ++n) {
    INFO("cut at " << n);
    Frame f;
    const Bytes cut(b.begin(), b.begin() + std::ptrdiff_t(n));
    CHECK(parse_frame(cut, f) == ParseError::truncated_ethernet);
    CHECK(f.error_offset == (n < 18 ? 12u : 16u));  // the type field of the tag that is cut
  }
  Frame f;
  const Bytes whole_tags(b.begin(), b.begin() + 22);
  CHECK(parse_frame(whole_tags, f) == ParseError::truncated_ipv4);
}

TEST_CASE("build: write_ethernet lays out both tags as the parser reads them", "[wire][build][vlan]") {
  const Bytes plain = build_simple(0x04, 16);
  const Bytes payload = random_bytes(16, 0x04 * 7919u + 16);  // (the spec keeps a view of it)
  FrameSpec spec = make_spec(0x04, IpVersion::v4, true, payload, Fill::pattern_a);
  spec.eth.vlan_tci = 0x6123;
  spec.eth.has_outer_vlan = true;
  spec.eth.outer_vlan_tpid = ethertype_qinq_legacy;
  spec.eth.outer_vlan_tci = 0xa064;
  const Bytes built = build_bytes(spec);
  const Bytes by_hand = with_tags(plain, {{ethertype_qinq_legacy, 0xa064}, {ethertype_vlan, 0x6123}});
  REQUIRE(built.size() == by_hand.size());
  CHECK(std::equal(built.begin(), built.begin() + 22, by_hand.begin()));
  const Frame f = parse(built);
  REQUIRE(f.is_roce());
  CHECK(icrc_ok(f));
  CHECK(f.eth.outer_vlan_tpid == ethertype_qinq_legacy);
  CHECK(f.eth.outer_vlan_tci == 0xa064);

  SECTION("an outer tag without an inner one is not written") {
    spec.eth.has_vlan = false;
    const Bytes untagged = build_bytes(spec);
    CHECK(untagged.size() == plain.size());
    CHECK(get16(&untagged[12]) == ethertype_ipv4);
  }
}
