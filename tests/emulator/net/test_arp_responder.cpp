// The ARP responder and the ARP frame builders: every field of what goes out, and exactly when the cache
// learns, updates or ignores.
#include <catch2/catch.hpp>

#include "emulator/net/arp_frames.hpp"
#include "emulator/net/arp_responder.hpp"
#include "net_test_support.hpp"

using namespace uroce::emulator::net;
using namespace uroce::emulator::net::test;

namespace {

struct Responder {
  PortAddresses port = test_port();
  NetCounters counters;
  ArpCache cache{port, counters};
  AddressConflicts conflicts;
  ArpResponder responder{port, cache, counters, &conflicts};
  ArpOutput released;
  std::array<uint8_t, max_arp_frame_size> buf{};

  // The reply to `frame` (empty if none).
  Bytes receive(const Bytes& frame, Nanos now = 0) {
    const Classification c = classify(frame, on_vlan_of(frame, port));
    REQUIRE(c.kind == FrameClass::arp);
    const size_t n = responder.on_frame(c, now, buf, released);
    return Bytes(buf.begin(), buf.begin() + std::ptrdiff_t(n));
  }
};

// Checks every byte of an ARP frame against the RFC 826 layout.
void check_arp_frame(const Bytes& f, const MacAddress& eth_dst, std::optional<uint16_t> vlan, uint16_t op,
                     const MacAddress& sender_mac, uint32_t sender_ip, const MacAddress& target_mac,
                     uint32_t target_ip) {
  const size_t l3 = vlan ? 18 : 14;
  REQUIRE(f.size() == l3 + 28);
  CHECK(get_mac(&f[0]) == eth_dst);
  CHECK(get_mac(&f[6]) == our_mac);
  if (vlan) {
    CHECK(get16(&f[12]) == 0x8100);
    CHECK(get16(&f[14]) == *vlan);
  }
  CHECK(get16(&f[l3 - 2]) == 0x0806);
  CHECK(get16(&f[l3]) == 1);
  CHECK(get16(&f[l3 + 2]) == 0x0800);
  CHECK(f[l3 + 4] == 6);
  CHECK(f[l3 + 5] == 4);
  CHECK(get16(&f[l3 + 6]) == op);
  CHECK(get_mac(&f[l3 + 8]) == sender_mac);
  CHECK(get32(&f[l3 + 14]) == sender_ip);
  CHECK(get_mac(&f[l3 + 18]) == target_mac);
  CHECK(get32(&f[l3 + 24]) == target_ip);
}

}  // namespace

TEST_CASE("a request for one of our addresses gets a reply, and its sender is learned", "[arp]") {
  Responder r;
  const Bytes reply = r.receive(arp_frame({}), seconds(5));
  check_arp_frame(reply, peer_mac, std::nullopt, 2, our_mac, our_ip, peer_mac, peer_ip);
  CHECK(r.counters.arp_requests_received == 1);
  CHECK(r.counters.arp_replies_sent == 1);
  CHECK(r.cache.lookup(peer_ip, seconds(5)) == peer_mac);
  CHECK(r.released.frames.empty());

  // The second address answers for itself; the requester's ARP hardware address is where the reply goes,
  // even when the Ethernet source differs (a proxy or bridge relayed the request).
  const MacAddress requester{{0x02, 0xaa, 0, 0, 0, 7}};
  const Bytes reply2 =
      r.receive(arp_frame({.sender_mac = requester, .sender_ip = 0xc0a80107, .target_ip = our_ip2}));
  check_arp_frame(reply2, requester, std::nullopt, 2, our_mac, our_ip2, requester, 0xc0a80107);
}

TEST_CASE("a tagged request gets a reply with the same tag", "[arp]") {
  Responder r;
  const Bytes reply = r.receive(arp_frame({}, MacAddress::broadcast(), 0xa00c));
  check_arp_frame(reply, peer_mac, 0xa00c, 2, our_mac, our_ip, peer_mac, peer_ip);
}

TEST_CASE("a request sent to our MAC (a unicast probe from a peer's cache) is answered", "[arp]") {
  Responder r;
  const Bytes reply = r.receive(arp_frame({.target_mac = our_mac}, our_mac));
  check_arp_frame(reply, peer_mac, std::nullopt, 2, our_mac, our_ip, peer_mac, peer_ip);
}

TEST_CASE("ARP for other addresses is ignored but refreshes an entry we hold", "[arp]") {
  Responder r;
  CHECK(r.receive(arp_frame({.target_ip = other_ip})).empty());
  CHECK(r.counters.arp_ignored == 1);
  CHECK(r.counters.arp_replies_sent == 0);
  CHECK_FALSE(r.cache.lookup(peer_ip, 0).has_value());  // not learned: overhearing does not fill the cache
  CHECK(r.cache.entries() == 0);

  // Known peer, then its gratuitous ARP with a new MAC (failover): the entry follows.
  CHECK(r.receive(arp_frame({})).size() == 42);
  const MacAddress moved{{0x02, 0, 0, 0, 0, 0x22}};
  CHECK(r.receive(arp_frame({.sender_mac = moved, .target_ip = peer_ip}), seconds(1)).empty());
  CHECK(r.cache.lookup(peer_ip, seconds(1)) == moved);
}

TEST_CASE("a reply addressed to us is learned and releases parked frames", "[arp]") {
  Responder r;
  Bytes parked = roce_v4_frame();
  REQUIRE(r.cache.park(peer_ip, parked, 0) == ParkResult::queued);
  CHECK(r.receive(arp_frame({.op = 2, .target_mac = our_mac}, our_mac), milliseconds(3)).empty());
  CHECK(r.counters.arp_replies_received == 1);
  CHECK(r.counters.arp_replies_sent == 0);
  REQUIRE(r.released.frames.size() == 1);
  std::copy(peer_mac.bytes.begin(), peer_mac.bytes.end(), parked.begin());
  CHECK(r.released.frames[0] == parked);
  CHECK(r.cache.lookup(peer_ip, milliseconds(3)) == peer_mac);
}

TEST_CASE("ARP claiming our own addresses is never learned; another station's claim is a conflict", "[arp]") {
  Responder r;
  Bytes ours(max_arp_frame_size);
  ours.resize(write_gratuitous_arp(ours, our_mac, our_ip, std::nullopt));
  CHECK(r.receive(ours).empty());  // our own announcement, looped back
  CHECK(r.counters.arp_conflicts == 0);

  CHECK(r.receive(arp_frame({.sender_mac = other_mac, .sender_ip = our_ip})).empty());
  CHECK(r.counters.arp_conflicts == 1);
  CHECK(r.conflicts.count == 1);  // noted for the log, with who claimed what
  CHECK(r.conflicts.address == uroce::wire::IpAddress::from_v4(our_ip));
  CHECK(r.conflicts.claimed_by == other_mac);
  CHECK(r.cache.lookup(our_ip, 0) == our_mac);  // our own address still resolves to us
  CHECK(r.cache.entries() == 0);
}

TEST_CASE("an address probe (sender 0.0.0.0) is answered, not learned; bogus sender MACs are ignored", "[arp]") {
  Responder r;
  const Bytes reply = r.receive(arp_frame({.sender_ip = 0}));
  check_arp_frame(reply, peer_mac, std::nullopt, 2, our_mac, our_ip, peer_mac, 0);
  CHECK(r.cache.entries() == 0);

  CHECK(r.receive(arp_frame({.sender_mac = MacAddress::broadcast()})).empty());
  CHECK(r.receive(arp_frame({.sender_mac = MacAddress{}})).empty());
  CHECK(r.receive(arp_frame({.op = 3})).empty());  // RARP request
  CHECK(r.counters.arp_ignored == 3);
  CHECK(r.cache.entries() == 0);
}

TEST_CASE("ARP frame builders lay out every field", "[arp]") {
  Bytes b(max_arp_frame_size);
  b.resize(write_gratuitous_arp(b, our_mac, our_ip2, std::nullopt));
  check_arp_frame(b, MacAddress::broadcast(), std::nullopt, 1, our_mac, our_ip2, MacAddress{}, our_ip2);

  b.assign(max_arp_frame_size, 0xcc);
  b.resize(write_arp_request(b, our_mac, our_ip, peer_ip, 0x2064));
  check_arp_frame(b, MacAddress::broadcast(), 0x2064, 1, our_mac, our_ip, MacAddress{}, peer_ip);

  b.assign(max_arp_frame_size, 0);
  b.resize(write_arp_request(b, our_mac, our_ip, peer_ip, std::nullopt, peer_mac));
  check_arp_frame(b, peer_mac, std::nullopt, 1, our_mac, our_ip, MacAddress{}, peer_ip);

  // Too small a buffer writes nothing.
  std::array<uint8_t, 45> small{};
  CHECK(write_arp_request(small, our_mac, our_ip, peer_ip, 1) == 0);
  CHECK(write_arp_request(small, our_mac, our_ip, peer_ip, std::nullopt) == 42);
  CHECK(arp_frame_size(false) == 42);
  CHECK(max_arp_frame_size == 46);
}

TEST_CASE("our ARP probe's answer from the address's owner is a conflict; our own probe is not answered", "[arp]") {
  Responder r;
  // The probe the engine sends at start (RFC 5227): from 0.0.0.0, for our address.
  Bytes probe(max_arp_frame_size);
  probe.resize(write_arp_request(probe, our_mac, 0, our_ip, std::nullopt));
  check_arp_frame(probe, MacAddress::broadcast(), std::nullopt, 1, our_mac, 0, MacAddress{}, our_ip);
  // Reflected back to us: not answered (a reply to ourselves), not a conflict.
  CHECK(r.receive(probe).empty());
  CHECK(r.counters.arp_replies_sent == 0);
  CHECK(r.counters.arp_conflicts == 0);
  // The owner's answer (as Linux sends it: sender our address at its MAC, target 0.0.0.0 at our MAC).
  CHECK(r.receive(arp_frame({.op = 2, .sender_mac = other_mac, .sender_ip = our_ip, .target_mac = our_mac,
                             .target_ip = 0},
                            our_mac))
            .empty());
  CHECK(r.counters.arp_conflicts == 1);
  CHECK(r.conflicts.count == 1);
  CHECK(r.conflicts.claimed_by == other_mac);
}
