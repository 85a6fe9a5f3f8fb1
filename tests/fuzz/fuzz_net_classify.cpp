// libFuzzer target: arbitrary bytes through emulator/net's receive path, the way the engine runs it:
// classify(), then the ARP responder (feeding an ArpCache), the ND responder (feeding an NdCache) or the
// ICMP echo responder, or IGMP and MLD queries into an IgmpMembership and an MldMembership. Beyond "no
// crash, no UB, no leak" (the sanitizers), it checks properties that must hold for every input:
//   - what classify() accepts as RoCEv2, the wire parser decodes as RoCEv2 up to the same UDP header;
//   - every ARP reply, Neighbor Advertisement and ICMP echo reply we build is itself well-formed: classified
//     by its receiver as ARP, as a valid NA (RFC 4861 §7.1.2), or as an ICMP message (not an echo
//     request) that passed every header and checksum check;
//   - every IGMP report and leave we send is well-formed: a member of the group hears a valid IGMP message
//     that is not a query;
//   - a Router Advertisement that classify() accepts comes from a link-local address and names at most
//     max_advertised_prefixes prefixes; RouterDiscovery learns from it within its bounds, and SLAAC
//     (AddressAutoconf) forms only unicast /64 addresses with our identifier, within its bound;
//   - likewise every MLD report and done: a listener of the group hears, behind a valid Hop-by-Hop header,
//     an MLD message with a good checksum that is not a query, sent with hop limit 1.
#include <cstdint>
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstdio>
#include <initializer_list>
#include <span>

#include "emulator/net/address_autoconf.hpp"
#include "emulator/net/arp_cache.hpp"
#include "emulator/net/arp_responder.hpp"
#include "emulator/net/classify.hpp"
#include "emulator/net/icmp.hpp"
#include "emulator/net/igmp.hpp"
#include "emulator/net/link_pause.hpp"
#include "emulator/net/mld.hpp"
#include "emulator/net/nd_frames.hpp"
#include "emulator/net/nd_cache.hpp"
#include "emulator/net/nd_responder.hpp"
#include "emulator/net/router_discovery.hpp"
#include "transport/wire/frame.hpp"

using namespace uroce;
using namespace uroce::emulator::net;

namespace {

// Short addresses the fuzzer finds by comparison tracing: MAC 02:00:00:00:00:01, 10.0.0.1, fd00::1, and
// members for the groups 224.0.0.5 and ff0e::5 (RoCE to them is accepted, IGMP and MLD queries reach the
// memberships; MLD queries also do at all-nodes and fd00::1's solicited-node group ff02::1:ff00:1).
PortAddresses make_port() {
  PortAddresses p;
  p.mac = {{0x02, 0, 0, 0, 0, 0x01}};
  p.ips.push_back(wire::IpAddress::from_v4(0x0a000001));
  const uint8_t v6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  p.ips.push_back(wire::IpAddress::from_v6_bytes(v6));
  p.groups.push_back(wire::IpAddress::from_v4(0xe0000005));
  const uint8_t group6[16] = {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5};
  p.groups.push_back(wire::IpAddress::from_v6_bytes(group6));
  return p;
}

// A failed check names its line before aborting (the fuzzer then keeps the input), so that a crash file
// says which property broke without a debugger. (A macro: clang 14 has no std::source_location.)
void check_at(bool ok, int line) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_net_classify: check failed at line %d\n", line);
  std::abort();
}
#define check(ok) check_at((ok), __LINE__)

wire::IpAddress v6(std::initializer_list<uint8_t> bytes) {
  wire::IpAddress a;
  std::copy(bytes.begin(), bytes.end(), a.bytes.begin());
  return a;
}

const wire::IpAddress mld_group = v6({0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5});
const wire::IpAddress solicited_group = v6({0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 1});
const wire::IpAddress all_routers = v6({0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2});

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const PortAddresses port = make_port();
  static NetCounters counters;
  static ArpCache cache(port, counters, ArpCacheConfig{.max_entries = 64});
  static AddressConflicts conflicts;
  static ArpResponder arp(port, cache, counters, &conflicts);
  static NdCache nd_cache(port, counters, NdCacheConfig{.max_entries = 64});
  static NdResponder nd(port, nd_cache, counters, &conflicts);
  static IcmpEchoResponder icmp(port.mac, counters, 9018);
  static IgmpMembership igmp = [] {
    IgmpMembership m(port, counters);
    m.join(0xe0000005, 0);
    return m;
  }();
  static MldMembership mld = [] {
    MldMembership m(port, counters);
    m.join(mld_group, 0);
    m.join(solicited_group, 0);
    return m;
  }();
  static RouterDiscovery router_discovery(port, counters, RouterDiscoveryConfig{.max_routers = 2, .max_prefixes = 4});
  static AddressAutoconf autoconf(port.mac, counters, true, 3);
  static Nanos now = 0;
  now += milliseconds(100);  // the cache sees time pass, so entries expire and resolutions fail

  // The same port on VLAN 7 (the fuzzer finds the constant): classify() takes a tagged frame only on its
  // VLAN's port, and through it tagged frames reach the responders, which copy the tag into their replies.
  static const PortAddresses port_on_vlan = [] {
    PortAddresses p = make_port();
    p.vlan_tci = 7;
    return p;
  }();
  const int vid = size >= 16 && data[12] == 0x81 && data[13] == 0x00 ? (data[14] & 0x0f) << 8 | data[15] : -1;

  const std::span<const uint8_t> bytes(data, size);
  const PortAddresses& receiving = vid == 7 ? port_on_vlan : port;
  const Classification c = classify(bytes, receiving);
  // Dropped as off the port's VLAN only when tagged with a VLAN that is not the port's (VID 0: untagged).
  check(c.kind != FrameClass::drop || c.reason != DropReason::other_vlan || (vid > 0 && vid != 7));
  count(counters, c);
  // Any frame's priority for PFC (the engine asks it of every frame it sends): a priority, read within the
  // frame, a tagged frame's PCP when DSCP is not trusted.
  const unsigned by_pcp = frame_priority(bytes, false), by_dscp = frame_priority(bytes, true);
  check(by_pcp < 8 && by_dscp < 8);
  if (size >= 18 && vid != -1) check(by_pcp == unsigned(data[14] >> 5));

  static uint8_t out[9100];
  ArpOutput released;
  NdOutput nd_released;
  switch (c.kind) {
    case FrameClass::roce: {
      wire::Frame f;
      wire::parse_frame(bytes, f);
      check(f.kind == wire::FrameKind::roce && f.has(wire::layer_udp) && f.l4_offset == c.l4_offset &&
            f.end_offset == c.l3_end);
      // A packet to that peer, parked or sent: exercises park/poll with fuzzer-chosen timing.
      const uint32_t peer = f.ip_version == wire::IpVersion::v4 ? f.ipv4.src : 0;
      if (!cache.lookup(peer, now)) cache.park(peer, std::vector<uint8_t>(bytes.begin(), bytes.end()), now);
      break;
    }
    case FrameClass::arp: {
      const uint64_t conflicts_before = conflicts.count;
      const size_t n = arp.on_frame(c, now, out, released);
      // A conflict is noted exactly when the sender claims one of our addresses with another MAC, and names
      // both; we never answer a request of our own.
      const bool claims_ours = port.owns_v4(c.arp.sender_ip) && c.arp.sender_mac != port.mac;
      check(conflicts.count == conflicts_before + (claims_ours ? 1 : 0));
      if (claims_ours) {
        check(conflicts.address == wire::IpAddress::from_v4(c.arp.sender_ip) &&
              conflicts.claimed_by == c.arp.sender_mac);
      }
      check(n == 0 || c.arp.sender_mac != port.mac);
      if (n != 0) {
        PortAddresses requester;
        requester.mac = c.arp.sender_mac;
        requester.vlan_tci = receiving.vlan_tci;  // on the request's VLAN, as the reply
        const Classification r = classify(std::span<const uint8_t>(out, n), requester);
        check(r.kind == FrameClass::arp && r.arp.operation == wire::arp_op_reply && r.arp.sender_mac == port.mac &&
              r.arp.target_mac == c.arp.sender_mac && r.arp.target_ip == c.arp.sender_ip);
      }
      break;
    }
    case FrameClass::nd: {
      const uint64_t conflicts_before = conflicts.count;
      const size_t n = nd.on_frame(c, now, out, nd_released);
      // At most one conflict per message, always about one of our addresses, and never answered.
      check(conflicts.count - conflicts_before <= 1);
      if (conflicts.count != conflicts_before) {
        check(port.owns_v6(conflicts.address.bytes.data()) && n == 0);
      }
      if (n != 0) {
        PortAddresses soliciting;
        soliciting.mac = wire::MacAddress{{out[0], out[1], out[2], out[3], out[4], out[5]}};
        soliciting.ips.push_back(c.nd.ip_src);
        soliciting.vlan_tci = receiving.vlan_tci;
        const Classification r = classify(std::span<const uint8_t>(out, n), soliciting);
        check(r.kind == FrameClass::nd && !r.nd.is_solicitation() && r.nd.target == c.nd.target &&
              r.nd.lladdr == port.mac);
      }
      if (!nd_cache.lookup(c.nd.target, now)) {
        nd_cache.park(c.nd.target, std::vector<uint8_t>(bytes.begin(), bytes.end()), now);
      }
      break;
    }
    case FrameClass::icmp_echo_request: {
      const size_t n = icmp.on_frame(bytes, c, out);
      if (n != 0) {
        // The requester: the Ethernet source and IP source of the request (IPv4's at 12, IPv6's at 8).
        PortAddresses requester;
        requester.mac = c.eth.src;
        const uint8_t* ip = bytes.data() + c.l3_offset;
        requester.ips.push_back(ip[0] >> 4 == 6 ? wire::IpAddress::from_v6_bytes(ip + 8)
                                                : wire::IpAddress::from_v4_bytes(ip + 12));
        requester.vlan_tci = receiving.vlan_tci;
        const Classification r = classify(std::span<const uint8_t>(out, n), requester);
        // The echo reply, which the requester's classify drops as an ICMP type it does not take.
        const DropReason not_a_request = ip[0] >> 4 == 6 ? DropReason::other_icmpv6_type : DropReason::other_icmp_type;
        check(r.kind == FrameClass::drop && r.reason == not_a_request);
      }
      break;
    }
    case FrameClass::igmp:
      igmp.on_query(c.igmp, now);
      // Leave and join again now and then, so that leaves are sent too.
      if (c.igmp.max_response % 3 == 0) {
        igmp.leave(0xe0000005, now);
        igmp.join(0xe0000005, now);
      }
      break;
    case FrameClass::mld:
      mld.on_query(c.mld, now);
      if (c.mld.max_response % 3 == 0) {
        mld.leave(mld_group, now);
        mld.join(mld_group, now);
      }
      break;
    case FrameClass::router_advertisement:
      check(is_link_local(c.ra.router) && c.ra.prefixes.size() <= max_advertised_prefixes);
      router_discovery.on_advertisement(c.ra, now);
      check(router_discovery.routers(now) <= 2 && router_discovery.prefixes(now) <= 4);
      if (c.ra.router_lifetime != 0) check(router_discovery.default_router(now).has_value());
      for (const AdvertisedPrefix& p : c.ra.prefixes) autoconf.on_prefix(p, now);
      // SLAAC: at most its bound; every address is a unicast IPv6 one under a /64 it was advertised, with
      // our MAC's identifier, valid now and preferred no longer than valid.
      for (const AutoconfAddress& a : autoconf.addresses(now)) {
        const wire::IpAddress& ip = a.subnet.address;
        check(a.subnet.prefix_length == 64 && !ip.is_v4() && !ip.is_multicast() && !is_link_local(ip) &&
              std::equal(ip.bytes.begin() + 8, ip.bytes.end(), link_local_from_mac(port.mac).bytes.begin() + 8) &&
              a.valid_until > now && a.preferred_until <= a.valid_until);
      }
      check(autoconf.addresses(now).size() <= 3);
      break;
    case FrameClass::pause: {
      // Untagged, and what the wire parser reads; then each priority the frame names is held exactly its
      // quanta (a time of 0 holds nothing), the others as before.
      static LinkPause link_pause(10'000'000'000);
      wire::Frame f;
      wire::parse_frame(bytes, f);
      check(vid == -1 && f.kind == wire::FrameKind::mac_control && f.ok() && f.mac_control.opcode == c.mac_control.opcode &&
            f.mac_control.quanta == c.mac_control.quanta && f.mac_control.pause_quanta == c.mac_control.pause_quanta);
      std::array<bool, 8> before{};
      for (unsigned i = 0; i < 8; ++i) before[i] = link_pause.paused(i, now);
      link_pause.on_frame(c.mac_control, now, counters);
      const wire::MacControl& m = c.mac_control;
      for (unsigned i = 0; i < 8; ++i) {
        const bool named = m.is_pause() || (m.enabled >> i & 1) != 0;
        const uint16_t q = m.is_pause() ? m.pause_quanta : m.quanta[i];
        if (!named) {
          check(link_pause.paused(i, now) == before[i]);
        } else {
          check(link_pause.paused(i, now) == (q != 0));
          check(!link_pause.paused(i, now + wire::pause_nanoseconds(q, 10'000'000'000)));
        }
      }
      break;
    }
    case FrameClass::drop:
      break;
  }
  if (igmp.next_deadline() <= now) {
    IgmpOutput sent;
    igmp.poll(now, sent);
    // Another member of the group, which also hears all-routers (224.0.0.2), where leaves go.
    PortAddresses member;
    member.mac = {{0x02, 0, 0, 0, 0, 0x02}};
    member.groups = {wire::IpAddress::from_v4(0xe0000005), wire::IpAddress::from_v4(0xe0000002)};
    for (const auto& frame : sent.frames) {
      const Classification r = classify(frame, member);
      check(r.kind == FrameClass::drop && r.reason == DropReason::igmp_not_a_query);
    }
  }
  if (mld.next_deadline() <= now) {
    MldOutput sent;
    mld.poll(now, sent);
    // Another listener of both groups, which also hears all-routers (ff02::2), where dones go.
    PortAddresses listener;
    listener.mac = {{0x02, 0, 0, 0, 0, 0x02}};
    listener.groups = {mld_group, solicited_group, all_routers};
    for (const auto& frame : sent.frames) {
      const Classification r = classify(frame, listener);
      check(r.kind == FrameClass::drop && r.reason == DropReason::mld_not_a_query && frame[r.l3_offset + 7] == 1);
    }
  }
  if (cache.next_deadline() <= now) cache.poll(now, released);
  if (nd_cache.next_deadline() <= now) nd_cache.poll(now, nd_released);
  return 0;
}
