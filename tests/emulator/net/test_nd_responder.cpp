// The neighbour discovery responder: NS for our addresses answered with a solicited NA to the right place,
// DAD probes answered to all-nodes, what is learned from NS and NA (and what is not), conflicts, bogus
// link-layer addresses.
#include <catch2/catch.hpp>

#include "emulator/net/classify.hpp"
#include "emulator/net/nd_cache.hpp"
#include "emulator/net/nd_frames.hpp"
#include "emulator/net/nd_responder.hpp"
#include "net_test_support.hpp"

using namespace uroce;
using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

wire::IpAddress v6(const uint8_t* p) { return wire::IpAddress::from_v6_bytes(p); }

struct Responder {
  PortAddresses port = test_port();
  NetCounters counters;
  NdCache cache{port, counters};
  AddressConflicts conflicts;
  NdResponder responder{port, cache, counters, &conflicts};
  NdOutput released;
  Bytes reply = Bytes(max_nd_frame_size);

  // Classifies `f` (it must be valid ND) and hands it to the responder; the reply, if any.
  Bytes on(const Bytes& f, Nanos now = seconds(1)) {
    const Classification c = classify(std::span<const uint8_t>(f), on_vlan_of(f, port));
    REQUIRE(c.kind == FrameClass::nd);
    const size_t n = responder.on_frame(c, now, reply, released);
    return Bytes(reply.begin(), reply.begin() + long(n));
  }
};

// What the peer (fd00::2 at peer_mac) sees of our reply: classified by a port with its address.
Classification as_peer_sees(const Bytes& f, const uint8_t* peer_ip = peer_ip6, const MacAddress& mac = peer_mac) {
  PortAddresses peer;
  peer.mac = mac;
  peer.ips = {v6(peer_ip)};
  return classify(std::span<const uint8_t>(f), on_vlan_of(f, peer));
}

}  // namespace

TEST_CASE("an NS for our address is answered with a solicited NA, and its sender learned", "[nd_responder]") {
  Responder r;
  const Bytes na = r.on(peer_ns());
  REQUIRE(!na.empty());
  CHECK(get_mac(&na[0]) == peer_mac);
  CHECK(get_mac(&na[6]) == our_mac);
  const Classification c = as_peer_sees(na);
  REQUIRE(c.kind == FrameClass::nd);
  CHECK(c.nd.type == 136);
  CHECK(c.nd.solicited);
  CHECK(c.nd.override_flag);
  CHECK_FALSE(c.nd.router);
  CHECK(c.nd.target == v6(our_ip6));
  CHECK(c.nd.lladdr == our_mac);
  CHECK(c.nd.ip_src == v6(our_ip6));
  CHECK(c.nd.ip_dst == v6(peer_ip6));
  CHECK(r.counters.nd_solicitations_received == 1);
  CHECK(r.counters.nd_advertisements_sent == 1);
  CHECK(r.cache.lookup(v6(peer_ip6), seconds(1)) == peer_mac);
}

TEST_CASE("an NS without a source link-layer option is answered to the frame's source MAC", "[nd_responder]") {
  Responder r;
  Nd n;  // unicast probe, no option
  const Bytes na = r.on(nd_frame(n, peer_ip6, our_ip6, our_mac, 255, other_mac));
  REQUIRE(!na.empty());
  CHECK(get_mac(&na[0]) == other_mac);
  CHECK(as_peer_sees(na, peer_ip6, other_mac).kind == FrameClass::nd);
  CHECK_FALSE(r.cache.lookup(v6(peer_ip6), seconds(1)).has_value());  // nothing to learn
}

TEST_CASE("a DAD probe (NS from ::) is answered to all-nodes, not Solicited, and nothing learned",
          "[nd_responder]") {
  Responder r;
  Nd n;
  const auto group = solicited_ip6(our_ip6);
  const Bytes na = r.on(nd_frame(n, unspecified_ip6, group.data(), mcast_mac(group.data())));
  REQUIRE(!na.empty());
  CHECK(get_mac(&na[0]) == MacAddress{{0x33, 0x33, 0, 0, 0, 1}});
  const Classification c = as_peer_sees(na);
  REQUIRE(c.kind == FrameClass::nd);
  CHECK(c.nd.ip_dst == v6(all_nodes_ip6));
  CHECK_FALSE(c.nd.solicited);
  CHECK(c.nd.override_flag);
  CHECK(r.cache.entries() == 0);
}

TEST_CASE("an NS keeps the request's VLAN tag in the answer", "[nd_responder]") {
  Responder r;
  Nd n;
  n.options = lladdr_option(1, peer_mac);
  const Bytes na = r.on(nd_frame(n, peer_ip6, our_ip6, our_mac, 255, peer_mac, 0x2007));
  REQUIRE(na.size() == 14 + 4 + 40 + 32);
  CHECK(get16(&na[12]) == 0x8100);
  CHECK(get16(&na[14]) == 0x2007);
  CHECK(as_peer_sees(na).kind == FrameClass::nd);
}

TEST_CASE("an NA answers a resolution: the cache learns and releases; unknown peers are not added",
          "[nd_responder]") {
  Responder r;
  Bytes parked(80, 0xab);
  REQUIRE(r.cache.park(v6(peer_ip6), parked, 0) == ParkResult::queued);
  CHECK(r.on(peer_na()).empty());
  CHECK(r.counters.nd_advertisements_received == 1);
  REQUIRE(r.released.frames.size() == 1);
  CHECK(get_mac(r.released.frames[0].data()) == peer_mac);
  CHECK(r.cache.lookup(v6(peer_ip6), seconds(1)) == peer_mac);
  // An NA from a peer we never asked about creates nothing (RFC 4861 §7.2.5).
  CHECK(r.on(peer_na(peer2_ip6, other_mac)).empty());
  CHECK(r.counters.nd_ignored == 1);
  CHECK_FALSE(r.cache.lookup(v6(peer2_ip6), seconds(1)).has_value());
}

TEST_CASE("an NA with a new MAC updates an entry we hold (Override)", "[nd_responder]") {
  Responder r;
  r.cache.learn(v6(peer_ip6), peer_mac, 0, r.released);
  r.on(peer_na(peer_ip6, other_mac, 0x20));
  CHECK(r.cache.lookup(v6(peer_ip6), seconds(1)) == other_mac);
}

TEST_CASE("NS for another node only refreshes what we hold; nothing is answered", "[nd_responder]") {
  Responder r;
  // fd00::ff:0:0:1 shares our solicited-node group (the last 24 bits), so its NS reaches us.
  const uint8_t neighbour[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 1};
  const Bytes ns = peer_ns(neighbour);
  CHECK(r.on(ns).empty());
  CHECK(r.counters.nd_ignored == 1);
  CHECK(r.counters.nd_solicitations_received == 0);
  CHECK(r.cache.entries() == 0);
  r.cache.learn(v6(peer_ip6), other_mac, 0, r.released);
  CHECK(r.on(ns).empty());
  CHECK(r.cache.lookup(v6(peer_ip6), seconds(1)) == peer_mac);
}

TEST_CASE("our own address from elsewhere is a conflict; our own frames looped back are ignored",
          "[nd_responder]") {
  Responder r;
  // Another station advertises fd00::1.
  Nd na;
  na.type = 136;
  na.flags = 0x20;
  na.target = our_ip6;
  na.options = lladdr_option(2, other_mac);
  CHECK(r.on(nd_frame(na, peer_ip6, all_nodes_ip6, mcast_mac(all_nodes_ip6))).empty());
  CHECK(r.counters.nd_conflicts == 1);
  CHECK(r.conflicts.count == 1);  // noted for the log, with who claimed what
  CHECK(r.conflicts.address == v6(our_ip6));
  CHECK(r.conflicts.claimed_by == other_mac);
  // Another station sends from fd00::1.
  CHECK(r.on(peer_ns(our_ip6, our_ip6, other_mac)).empty());
  CHECK(r.counters.nd_conflicts == 2);
  CHECK(r.conflicts.count == 2);
  CHECK(r.conflicts.claimed_by == peer_mac);  // the station that sent it, whatever its option says
  // Our own unsolicited NA reflected back by a bridge.
  na.options = lladdr_option(2, our_mac);
  CHECK(r.on(nd_frame(na, our_ip6, all_nodes_ip6, mcast_mac(all_nodes_ip6), 255, our_mac)).empty());
  CHECK(r.counters.nd_conflicts == 2);
  CHECK(r.counters.nd_advertisements_sent == 0);
}

TEST_CASE("a group or zero link-layer address is bogus: not learned, not answered", "[nd_responder]") {
  Responder r;
  CHECK(r.on(peer_ns(our_ip6, peer_ip6, MacAddress{{0x01, 0, 0x5e, 0, 0, 1}})).empty());
  CHECK(r.on(peer_ns(our_ip6, peer_ip6, MacAddress{})).empty());
  CHECK(r.counters.nd_ignored == 2);
  CHECK(r.cache.entries() == 0);
  CHECK(r.counters.nd_advertisements_sent == 0);
}

TEST_CASE("our duplicate address detection reflected back is not answered", "[nd_responder]") {
  Responder r;
  // The engine's solicitation at start: from ::, to fd00::1's solicited-node group, from our MAC.
  NdMessage dad;
  dad.target = v6(our_ip6);
  dad.ip_dst = solicited_node_address(dad.target);
  Bytes f(max_nd_frame_size);
  f.resize(write_nd_frame(f, multicast_mac(dad.ip_dst), our_mac, std::nullopt, dad));
  CHECK(r.on(f).empty());
  CHECK(r.counters.nd_advertisements_sent == 0);
  CHECK(r.counters.nd_conflicts == 0);
  CHECK(r.counters.nd_ignored == 1);
  // The same solicitation from another station (it wants our address) is answered to all-nodes.
  f.resize(max_nd_frame_size);
  f.resize(write_nd_frame(f, multicast_mac(dad.ip_dst), other_mac, std::nullopt, dad));
  const Classification reply = as_peer_sees(r.on(f));
  CHECK(reply.kind == FrameClass::nd);
  CHECK(reply.nd.ip_dst == all_nodes_address());
}
