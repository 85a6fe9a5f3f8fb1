// frame_spec_for(): what a port makes of the transport's packet, the 802.1Q tag above all: a port on a
// VLAN tags every RoCE frame with its VID and the address vector's service level as priority (PCP).
#include <catch2/catch.hpp>

#include <vector>

#include "transport/outgoing_frame.hpp"
#include "transport/wire/frame.hpp"
#include "transport/wire/opcode.hpp"

using namespace uroce;
using namespace uroce::transport;

namespace {

// The frame a port with `port` addressing sends for a 64-byte SEND to `av`, parsed back.
struct Sent {
  std::vector<uint8_t> bytes;
  wire::Frame frame;
};

Sent send(const verbs::AddressVector& av, const PortAddressing& port) {
  static const std::vector<uint8_t> payload(64, 0x5a);
  OutPacket p;
  p.destination = &av;
  p.headers.bth.opcode = uint8_t(wire::Opcode::rc_send_only);
  p.headers.bth.dest_qp = 0x11;
  p.headers.bth.psn = 0x123456;
  p.payload = payload;
  const wire::FrameSpec spec = frame_spec_for(p, port);
  Sent s;
  s.bytes.resize(wire::frame_size(spec));
  REQUIRE(wire::build_frame(spec, s.bytes).error == wire::BuildError::none);
  REQUIRE(wire::parse_frame(s.bytes, s.frame) == wire::ParseError::none);
  REQUIRE(s.frame.is_roce());
  return s;
}

PortAddressing port_v4(std::optional<uint16_t> vlan) {
  PortAddressing port;
  port.src_ip = wire::IpAddress::from_v4(0x0a000001);
  port.src_mac = wire::MacAddress{{0x02, 0, 0, 0, 0, 1}};
  port.dst_mac = wire::MacAddress{{0x02, 0, 0, 0, 0, 2}};
  port.vlan_id = vlan;
  return port;
}

}  // namespace

TEST_CASE("a port on no VLAN sends RoCE frames untagged, whatever the service level", "[outgoing_frame]") {
  verbs::AddressVector av;
  av.dgid = wire::IpAddress::from_v4(0x0a000002);
  av.service_level = 5;
  const Sent s = send(av, port_v4(std::nullopt));
  CHECK_FALSE(s.frame.eth.has_vlan);
  CHECK(s.frame.l3_offset == 14);
  CHECK(s.bytes.size() == 14 + 20 + 8 + 12 + 64 + 4);
}

TEST_CASE("a port on a VLAN tags RoCE frames with its VID and the service level as priority", "[outgoing_frame]") {
  verbs::AddressVector av;
  av.dgid = wire::IpAddress::from_v4(0x0a000002);
  av.traffic_class = 26 << 2;  // DSCP 26 stays in the IP header, apart from the priority
  for (const uint8_t sl : {0, 3, 7, 13}) {
    av.service_level = sl;
    const Sent s = send(av, port_v4(100));
    CHECK(s.frame.eth.has_vlan);
    CHECK(s.frame.eth.vlan_id() == 100);
    CHECK(s.frame.eth.vlan_pcp() == (sl & 7));  // PCP has 3 bits: SL 13 is priority 5
    CHECK((s.frame.eth.vlan_tci & 0x1000) == 0);  // DEI clear
    CHECK(s.frame.ipv4.tos >> 2 == 26);
    CHECK(s.frame.l3_offset == 18);
    CHECK(s.bytes.size() == 18 + 20 + 8 + 12 + 64 + 4);
    // The tag is outside the ICRC's coverage (it starts at the IP header): the frame checks.
    CHECK(wire::icrc_ok(s.frame));
  }
}

TEST_CASE("VLAN 0 gives priority-tagged frames; IPv6 frames are tagged alike", "[outgoing_frame]") {
  verbs::AddressVector av;
  av.dgid = wire::IpAddress::from_v4(0x0a000002);
  av.service_level = 3;
  const Sent tagged = send(av, port_v4(0));
  CHECK(tagged.frame.eth.has_vlan);
  CHECK(tagged.frame.eth.vlan_tci == 0x6000);

  PortAddressing port = port_v4(4094);
  uint8_t a[16] = {0xfd, 0, 0, 0x75, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  port.src_ip = wire::IpAddress::from_v6_bytes(a);
  a[15] = 2;
  av.dgid = wire::IpAddress::from_v6_bytes(a);
  av.service_level = 6;
  const Sent v6 = send(av, port);
  CHECK(v6.frame.ip_version == wire::IpVersion::v6);
  CHECK(v6.frame.eth.vlan_tci == (6 << 13 | 4094));
  CHECK(wire::icrc_ok(v6.frame));
}
