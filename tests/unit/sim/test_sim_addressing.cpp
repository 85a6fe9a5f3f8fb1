// How the network turns an OutPacket into a frame: addresses, MACs, IP version, TTL/hop limit, traffic
// class with ECN, flow label, UDP source port; and what it does with packets it cannot route.
#include <catch2/catch.hpp>

#include <type_traits>

#include "sim_test_support.hpp"
#include "transport/sim/device_endpoint.hpp"

using namespace uroce;
using namespace uroce::sim;
using namespace uroce::sim::test;

namespace {

wire::Frame parse(const Received& r) {
  wire::Frame f;
  REQUIRE(wire::parse_frame(r.bytes, f) == wire::ParseError::none);
  REQUIRE(f.is_roce());
  REQUIRE(wire::icrc_ok(f));
  return f;
}

}  // namespace

// The adapter must stay a complete Endpoint; constructing one would need the transport library.
static_assert(!std::is_abstract_v<DeviceEndpoint>);
static_assert(std::is_base_of_v<Endpoint, DeviceEndpoint>);

TEST_CASE("IPv4: addresses, MACs and the AddressVector's fields end up on the wire", "[sim][addressing]") {
  Pair p(1);
  verbs::AddressVector av = to(p.b_ip);
  av.hop_limit = 17;
  av.traffic_class = 0x68 | 0x3;  // DSCP 26; the ECN bits of the class are the port's business
  av.flow_label = 0x54321;
  p.a.send(av, 5, 16, true, op_send_only, 0xc123);
  p.a.send(av, 6, 16, false);
  REQUIRE(p.net.run_until_idle(never));
  REQUIRE(p.b.received.size() == 2);

  const wire::Frame f = parse(p.b.received[0]);
  CHECK(f.eth.src == p.net.mac(p.na));
  CHECK(f.eth.dst == p.net.mac(p.nb));
  CHECK(f.eth.src == wire::MacAddress{{0x02, 0, 0, 0, 0, 1}});
  CHECK(f.eth.dst == wire::MacAddress{{0x02, 0, 0, 0, 0, 2}});
  CHECK(f.ip_version == wire::IpVersion::v4);
  CHECK(f.src_ip() == p.a_ip);
  CHECK(f.dst_ip() == p.b_ip);
  CHECK(f.ipv4.ttl == 17);
  CHECK(f.ipv4.tos == (0x68 | 0x2));
  CHECK(f.ecn() == wire::Ecn::ect0);
  CHECK(f.ipv4.dont_fragment);
  CHECK(f.ipv4.checksum_ok);
  CHECK(f.udp.src_port == 0xc123);
  CHECK(f.udp.dst_port == wire::roce_v2_udp_port);
  CHECK(f.roce.bth().psn == 5);
  CHECK(f.roce.payload.size() == 16);

  const wire::Frame g = parse(p.b.received[1]);
  CHECK(g.ecn() == wire::Ecn::not_ect);
  CHECK(g.ipv4.tos == 0x68);
  CHECK(g.ipv4.identification == uint16_t(f.ipv4.identification + 1));
}

TEST_CASE("IPv6 and mixed families", "[sim][addressing][ipv6]") {
  SimNetwork net(2);
  TestEndpoint a, b, c;
  const auto a6 = ip("2001:db8::1");
  const auto b6 = ip("2001:db8:0:1::2");
  const auto c4 = ip4(192, 168, 0, 3);
  const NodeId na = net.add_node({.addresses = {ip4(192, 168, 0, 1), a6}, .mac = {}, .name = "a"});
  net.set_endpoint(na, a);
  const NodeId nb = net.add_node(b, b6, "b");
  const NodeId nc = net.add_node(
      {.addresses = {c4}, .mac = wire::MacAddress{{0x0c, 0x42, 0xa1, 0, 0, 7}}, .name = "c"});
  net.set_endpoint(nc, c);
  a.attach(net.sink(na));
  b.attach(net.sink(nb));
  c.attach(net.sink(nc));
  CHECK(net.find_node(a6) == na);
  CHECK(net.find_node(ip4(192, 168, 0, 1)) == na);
  CHECK(net.find_node(b6) == nb);
  CHECK_FALSE(net.find_node(ip4(1, 2, 3, 4)));
  CHECK(net.addresses(na).size() == 2);

  verbs::AddressVector av = to(b6);
  av.sgid_index = 1;  // a's IPv6 address
  av.hop_limit = 9;
  av.traffic_class = 0x10;
  av.flow_label = 0xabcde;
  a.send(av, 1, 16, true);
  av.sgid_index = 0;  // a's IPv4 address to an IPv6 peer: IPv6 with a v4-mapped source
  a.send(av, 2);
  c.send(to(ip4(192, 168, 0, 1)), 3);  // both IPv4: IPv4
  REQUIRE(net.run_until_idle(never));

  REQUIRE(b.received.size() == 2);
  const wire::Frame f = parse(b.received[0]);
  CHECK(f.ip_version == wire::IpVersion::v6);
  CHECK(f.src_ip() == a6);
  CHECK(f.dst_ip() == b6);
  CHECK(f.ipv6.hop_limit == 9);
  CHECK(f.ipv6.traffic_class == (0x10 | 0x2));
  CHECK(f.ipv6.flow_label == 0xabcde);
  CHECK(f.eth.src == net.mac(na));
  CHECK(f.eth.dst == net.mac(nb));
  CHECK(f.eth.ethertype == wire::ethertype_ipv6);
  const wire::Frame g = parse(b.received[1]);
  CHECK(g.ip_version == wire::IpVersion::v6);
  CHECK(g.src_ip() == ip4(192, 168, 0, 1));
  CHECK(g.ecn() == wire::Ecn::not_ect);

  REQUIRE(a.received.size() == 1);
  const wire::Frame h = parse(a.received[0]);
  CHECK(h.ip_version == wire::IpVersion::v4);
  CHECK(h.src_ip() == c4);
  CHECK(h.eth.src == wire::MacAddress{{0x0c, 0x42, 0xa1, 0, 0, 7}});
}

TEST_CASE("packets that cannot be routed or built are counted drops", "[sim][addressing]") {
  Pair p(3);
  std::vector<CaptureEvent> drops;
  p.net.set_capture([&](const CaptureEvent& e) {
    if (e.point == CapturePoint::dropped) drops.push_back(e);
  });

  p.a.send(to(ip4(10, 0, 0, 99)), 1);  // nobody has it
  verbs::AddressVector bad_sgid = to(p.b_ip);
  bad_sgid.sgid_index = 1;  // a has one address
  p.a.send(bad_sgid, 2);
  transport::OutPacket nowhere;
  p.net.sink(p.na).transmit(nowhere);
  p.a.send(to(p.b_ip), 3, 0, false, 0xff);  // an opcode the builder refuses
  REQUIRE(p.net.run_until_idle(never));

  const NetworkStats s = p.net.stats();
  CHECK(s.transmitted == 4);
  CHECK(s.dropped_unknown_destination == 1);
  CHECK(s.dropped_invalid == 3);
  CHECK(s.frames_dropped() == 4);
  CHECK(s.links.frames_sent == 0);
  CHECK(p.b.received.empty());
  REQUIRE(drops.size() == 4);
  CHECK(drops[0].reason == DropReason::unknown_destination);
  CHECK(drops[0].to == no_node);
  CHECK_FALSE(drops[0].frame.empty());  // the frame was built: it shows what was sent where
  CHECK(drops[1].reason == DropReason::invalid_packet);
  CHECK(drops[1].frame.empty());
  CHECK(to_string(drops[3].reason) == "invalid packet");
}

TEST_CASE("nodes: duplicate addresses are refused, a node can talk to itself", "[sim][addressing]") {
  Pair p(4);
  TestEndpoint c;
  CHECK_THROWS_AS(p.net.add_node(c, p.a_ip), std::invalid_argument);
  CHECK_THROWS_AS(p.net.add_node(NodeConfig{}), std::invalid_argument);
  CHECK_THROWS_AS(p.net.sink(7), std::out_of_range);
  CHECK(p.net.node_count() == 2);
  p.a.send(to(p.a_ip), 1);
  REQUIRE(p.net.run_until_idle(never));
  REQUIRE(p.a.received.size() == 1);
  CHECK(p.a.received[0].good());
  CHECK(p.net.link_stats(p.na, p.na).frames_delivered == 1);
}

TEST_CASE("replacing an endpoint: a restarted peer takes over the node", "[sim][addressing]") {
  Pair p(5);
  TestEndpoint restarted;
  p.net.set_endpoint(p.nb, restarted);
  p.a.send(to(p.b_ip), 1);
  REQUIRE(p.net.run_until_idle(never));
  CHECK(p.b.received.empty());
  CHECK(restarted.received.size() == 1);
}
