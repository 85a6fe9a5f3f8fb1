// Flow steering rules (transport/flow/flow_rule.hpp): which frames a spec, and a rule of specs, matches.
// Frames are built by hand (tests/unit/support/test_frames.hpp), byte by byte from the header layouts, so that
// the matcher's parsing is checked against something it does not share. Every frame prefix is tried as well: a
// spec that needs bytes the frame does not have must not match, and nothing may read past the end (run under the
// sanitizers).
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tests/unit/support/test_frames.hpp"
#include "transport/flow/flow_rule.hpp"

using namespace uroce::transport::flow;
using namespace uroce::test::frames;
using uroce::wire::MacAddress;

namespace {

Spec spec_of(const EthSpec& e) {
  Spec s;
  s.kind = Spec::Kind::eth;
  s.eth = e;
  return s;
}
Spec spec_of(const Ipv4Spec& e) {
  Spec s;
  s.kind = Spec::Kind::ipv4;
  s.ipv4 = e;
  return s;
}
Spec spec_of(const Ipv6Spec& e) {
  Spec s;
  s.kind = Spec::Kind::ipv6;
  s.ipv6 = e;
  return s;
}
Spec spec_of(const L4Spec& e) {
  Spec s;
  s.kind = Spec::Kind::l4;
  s.l4 = e;
  return s;
}

// The frame in a buffer of exactly its size, so that a read past its end is one the sanitizer sees.
template <typename S>
bool match(const S& spec, const Bytes& frame) {
  const Bytes exact(frame.begin(), frame.end());
  return matches(spec_of(spec), std::span<const uint8_t>(exact.data(), exact.size()));
}
bool match_rule(const FlowRule& rule, const Bytes& frame) {
  const Bytes exact(frame.begin(), frame.end());
  return matches(rule, std::span<const uint8_t>(exact.data(), exact.size()));
}

const MacAddress mac_full{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
Addr6 addr6_full() {
  Addr6 a;
  a.fill(0xff);
  return a;
}

// Specs whose every field, fully masked, is what build(p) writes.
EthSpec eth_exact(const FrameParts& p) {
  EthSpec e;
  e.dst = p.dst;
  e.dst_mask = mac_full;
  e.src = p.src;
  e.src_mask = mac_full;
  e.ether_type = uint16_t(p.ip_version == 4 ? 0x0800 : p.ip_version == 6 ? 0x86dd : p.ether_type);
  e.ether_type_mask = 0xffff;
  if (p.tci) {
    e.vlan_tag = *p.tci;
    e.vlan_tag_mask = 0xffff;
  }
  return e;
}
Ipv4Spec ipv4_exact(const FrameParts& p) {
  Ipv4Spec s;
  s.src = p.src4;
  s.src_mask = 0xffffffff;
  s.dst = p.dst4;
  s.dst_mask = 0xffffffff;
  s.proto = p.protocol;
  s.proto_mask = 0xff;
  s.tos = p.tos;
  s.tos_mask = 0xff;
  s.ttl = p.ttl;
  s.ttl_mask = 0xff;
  s.flags = uint8_t(p.flags_fragment >> 13);
  s.flags_mask = 7;
  return s;
}
Ipv6Spec ipv6_exact(const FrameParts& p) {
  Ipv6Spec s;
  s.src = p.src6;
  s.src_mask = addr6_full();
  s.dst = p.dst6;
  s.dst_mask = addr6_full();
  s.flow_label = p.flow_label;
  s.flow_label_mask = 0xfffff;
  s.next_hdr = p.protocol;
  s.next_hdr_mask = 0xff;
  s.traffic_class = p.traffic_class;
  s.traffic_class_mask = 0xff;
  s.hop_limit = p.hop_limit;
  s.hop_limit_mask = 0xff;
  return s;
}
L4Spec l4_exact(const FrameParts& p) {
  L4Spec s;
  s.protocol = p.protocol;
  s.src_port = p.sport;
  s.src_port_mask = 0xffff;
  s.dst_port = p.dport;
  s.dst_port_mask = 0xffff;
  return s;
}

// This file's frames: the shared defaults but for the TOS and TTL the spec tests below are written against
// (0xb9: DSCP and ECN both nonzero; 61: one bit away from 60) and a payload of its own.
FrameParts parts() {
  FrameParts p;
  p.tos = 0xb9;
  p.ttl = 61;
  p.payload = Bytes{1, 2, 3, 4, 5, 6, 7, 8, 9};
  return p;
}

FrameParts ipv6_parts(uint8_t protocol = udp) {
  FrameParts p = parts();
  p.ip_version = 6;
  p.protocol = protocol;
  return p;
}

}  // namespace

TEST_CASE("flow eth spec: each field with full, partial and zero masks", "[transport][flow]") {
  const FrameParts p = parts();
  const Bytes f = build(p).bytes;
  CHECK(match(eth_exact(p), f));
  CHECK(match(EthSpec{}, f));  // every mask zero: anything with an Ethernet header

  SECTION("destination and source MAC") {
    for (int which = 0; which < 2; ++which) {
      INFO("field " << (which == 0 ? "dst" : "src"));
      for (size_t byte = 0; byte < 6; ++byte) {
        EthSpec s = eth_exact(p);
        MacAddress& value = which == 0 ? s.dst : s.src;
        MacAddress& mask = which == 0 ? s.dst_mask : s.src_mask;
        value.bytes[byte] ^= 0x10;
        CHECK_FALSE(match(s, f));
        mask.bytes[byte] = 0xef;  // the differing bit masked out: the rest still compared
        CHECK(match(s, f));
        mask.bytes[byte] = 0x10;  // only the differing bit
        CHECK_FALSE(match(s, f));
        mask = MacAddress{};
        CHECK(match(s, f));
      }
    }
    // An OUI prefix, and the group bit alone (what a multicast rule asks).
    EthSpec oui;
    oui.dst = MacAddress{{0x02, 0x11, 0x22, 0xde, 0xad, 0x00}};
    oui.dst_mask = MacAddress{{0xff, 0xff, 0xff, 0, 0, 0}};
    CHECK(match(oui, f));
    oui.dst.bytes[2] = 0x23;
    CHECK_FALSE(match(oui, f));
    EthSpec group;
    group.dst = MacAddress{{0x01, 0, 0, 0, 0, 0}};
    group.dst_mask = MacAddress{{0x01, 0, 0, 0, 0, 0}};
    CHECK_FALSE(match(group, f));
    FrameParts m = p;
    m.dst = MacAddress{{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}};
    CHECK(match(group, build(m).bytes));
  }

  SECTION("ether type: the type after the tag") {
    EthSpec s;
    s.ether_type = 0x0800;
    s.ether_type_mask = 0xffff;
    CHECK(match(s, f));
    CHECK_FALSE(match(s, build(ipv6_parts()).bytes));
    FrameParts tagged = p;
    tagged.tci = 0x6005;
    CHECK(match(s, build(tagged).bytes));  // 0x8100 is the tag's, not the frame's type
    s.ether_type = 0x8100;
    CHECK_FALSE(match(s, build(tagged).bytes));
    s.ether_type = 0x86dd;
    CHECK(match(s, build(ipv6_parts()).bytes));
    s.ether_type = 0x86ff;
    s.ether_type_mask = 0xff00;  // the high byte only
    CHECK(match(s, build(ipv6_parts()).bytes));
    CHECK_FALSE(match(s, f));
    FrameParts arp = parts();
    arp.ip_version = 0;
    arp.ether_type = 0x0806;
    s.ether_type = 0x0806;
    s.ether_type_mask = 0xffff;
    CHECK(match(s, build(arp).bytes));
    CHECK_FALSE(match(s, f));
  }

  SECTION("VLAN tag: the whole TCI, and only tagged frames when masked") {
    FrameParts tagged = p;
    tagged.tci = 0xa07b;  // PCP 5, DEI 0, VID 123
    const Bytes t = build(tagged).bytes;
    CHECK(match(eth_exact(tagged), t));
    CHECK(match(EthSpec{}, t));  // zero masks: tagged or not
    EthSpec vid;
    vid.vlan_tag = 123;
    vid.vlan_tag_mask = 0x0fff;
    CHECK(match(vid, t));
    CHECK_FALSE(match(vid, f));  // untagged: no VID to compare, not VID 0
    vid.vlan_tag = 124;
    CHECK_FALSE(match(vid, t));
    EthSpec vid0;  // VID 0 (priority tagged) still asks for a tag
    vid0.vlan_tag = 0;
    vid0.vlan_tag_mask = 0x0fff;
    CHECK_FALSE(match(vid0, f));
    FrameParts priority = p;
    priority.tci = 0x6000;
    CHECK(match(vid0, build(priority).bytes));
    EthSpec pcp;
    pcp.vlan_tag = 5 << 13;
    pcp.vlan_tag_mask = 0xe000;
    CHECK(match(pcp, t));
    pcp.vlan_tag = 4 << 13;
    CHECK_FALSE(match(pcp, t));
    EthSpec full = eth_exact(tagged);
    full.vlan_tag ^= 0x1000;  // the DEI bit
    CHECK_FALSE(match(full, t));
    EthSpec untagged = eth_exact(p);  // vlan_tag_mask 0: the tag does not matter
    untagged.src = tagged.src;
    CHECK(match(untagged, t));
  }
}

TEST_CASE("flow ipv4 spec: each field, the implied EtherType, options and malformed headers", "[transport][flow]") {
  FrameParts p = parts();
  p.tos = 0xb9;
  p.flags_fragment = 0x4000;
  const Bytes f = build(p).bytes;
  CHECK(match(ipv4_exact(p), f));
  CHECK(match(Ipv4Spec{}, f));

  SECTION("implied EtherType: an IPv4 spec matches IPv4 only, tagged or not") {
    CHECK_FALSE(match(Ipv4Spec{}, build(ipv6_parts()).bytes));
    FrameParts arp = parts();
    arp.ip_version = 0;
    arp.payload = Bytes(28, 0x45);  // looks like an IPv4 header start, but the type says ARP
    CHECK_FALSE(match(Ipv4Spec{}, build(arp).bytes));
    FrameParts tagged = p;
    tagged.tci = 0x0064;
    CHECK(match(ipv4_exact(tagged), build(tagged).bytes));
    FrameParts icmp_frame = p;
    icmp_frame.protocol = icmp;
    CHECK(match(ipv4_exact(icmp_frame), build(icmp_frame).bytes));
  }

  SECTION("addresses: full masks, prefixes, zero masks") {
    for (int which = 0; which < 2; ++which) {
      Ipv4Spec s = ipv4_exact(p);
      uint32_t& value = which == 0 ? s.src : s.dst;
      uint32_t& mask = which == 0 ? s.src_mask : s.dst_mask;
      value ^= 0x00000001;
      CHECK_FALSE(match(s, f));
      mask = 0xffffff00;  // a /24 around it
      CHECK(match(s, f));
      value ^= 0x00000100;
      CHECK_FALSE(match(s, f));
      mask = 0;
      CHECK(match(s, f));
    }
    Ipv4Spec subnet;
    subnet.dst = 0xac100000;  // 172.16.0.0/12 holds 172.16.2.3
    subnet.dst_mask = 0xfff00000;
    CHECK(match(subnet, f));
    subnet.dst = 0xac200000;
    CHECK_FALSE(match(subnet, f));
  }

  SECTION("protocol, TOS, TTL") {
    Ipv4Spec s = ipv4_exact(p);
    s.proto = tcp;
    CHECK_FALSE(match(s, f));
    s.proto_mask = 0;
    CHECK(match(s, f));
    s = ipv4_exact(p);
    s.tos = 0xba;  // ECN differs
    CHECK_FALSE(match(s, f));
    s.tos_mask = 0xfc;  // DSCP only
    CHECK(match(s, f));
    s.tos = 0x01;
    CHECK_FALSE(match(s, f));
    s = ipv4_exact(p);
    s.ttl = 60;
    CHECK_FALSE(match(s, f));
    s.ttl_mask = 0xfe;
    CHECK(match(s, f));  // 60 and 61 differ in the low bit only
    s.ttl_mask = 0;
    CHECK(match(s, f));
  }

  SECTION("flags: the three top bits of the fragment field, as 0-7") {
    struct Case {
      uint16_t field;
      uint8_t flags;
    };
    for (const Case c : {Case{0x0000, 0}, Case{0x2000, 1}, Case{0x4000, 2}, Case{0x8000, 4}, Case{0xe000, 7},
                         Case{0x3fff, 1}, Case{0x5abc, 2}}) {
      INFO("fragment field " << c.field);
      FrameParts q = p;
      q.flags_fragment = c.field;
      const Bytes g = build(q).bytes;
      Ipv4Spec s;
      s.flags_mask = 7;
      for (uint8_t v = 0; v < 8; ++v) {
        s.flags = v;
        CHECK(match(s, g) == (v == c.flags));
      }
      s.flags = 2;  // DF alone
      s.flags_mask = 2;
      CHECK(match(s, g) == ((c.flags & 2) != 0));
    }
  }

  SECTION("options: the fields stay where they are, and the header must be whole") {
    for (size_t words : {1, 2, 10}) {
      FrameParts q = p;
      q.options.assign(words * 4, 0x01);  // NOPs
      const Bytes g = build(q).bytes;
      CHECK(match(ipv4_exact(q), g));
    }
    // IHL 15 (60 bytes) with the frame ending inside the options.
    FrameParts q = p;
    q.options.assign(40, 0x01);
    q.payload.clear();
    q.protocol = icmp;
    Bytes g = build(q).bytes;
    CHECK(match(Ipv4Spec{}, g));
    g.resize(14 + 59);
    CHECK_FALSE(match(Ipv4Spec{}, g));
  }

  SECTION("malformed: a version other than 4, IHL below 5") {
    FrameParts q = p;
    q.version_override = 6;
    CHECK_FALSE(match(Ipv4Spec{}, build(q).bytes));
    q.version_override = 5;
    CHECK_FALSE(match(Ipv4Spec{}, build(q).bytes));
    for (uint8_t ihl = 0; ihl < 5; ++ihl) {
      Bytes g = f;
      g[14] = uint8_t(0x40 | ihl);
      CHECK_FALSE(match(Ipv4Spec{}, g));
    }
  }
}

TEST_CASE("flow ipv6 spec: each field, the implied EtherType and malformed headers", "[transport][flow]") {
  const FrameParts p = ipv6_parts();
  const Bytes f = build(p).bytes;
  CHECK(match(ipv6_exact(p), f));
  CHECK(match(Ipv6Spec{}, f));
  CHECK_FALSE(match(Ipv6Spec{}, build(parts()).bytes));  // IPv4
  FrameParts tagged = p;
  tagged.tci = 0x2001;
  CHECK(match(ipv6_exact(tagged), build(tagged).bytes));

  SECTION("addresses: every byte, prefixes, zero masks") {
    for (int which = 0; which < 2; ++which) {
      for (size_t byte = 0; byte < 16; ++byte) {
        Ipv6Spec s = ipv6_exact(p);
        Addr6& value = which == 0 ? s.src : s.dst;
        Addr6& mask = which == 0 ? s.src_mask : s.dst_mask;
        value[byte] ^= 0x80;
        CHECK_FALSE(match(s, f));
        mask[byte] = 0x7f;
        CHECK(match(s, f));
        mask = Addr6{};
        CHECK(match(s, f));
      }
    }
    Ipv6Spec prefix;  // 2001:db8::/32
    prefix.dst = Addr6{0x20, 0x01, 0x0d, 0xb8};
    prefix.dst_mask = Addr6{0xff, 0xff, 0xff, 0xff};
    CHECK(match(prefix, f));
    prefix.dst[3] = 0xb9;
    CHECK_FALSE(match(prefix, f));
    Ipv6Spec link_local;  // fe80::/10
    link_local.src = Addr6{0xfe, 0x80};
    link_local.src_mask = Addr6{0xff, 0xc0};
    CHECK(match(link_local, f));
    FrameParts site_local = p;  // fec0::/10 shares fe80::/10's first byte, not its next two bits
    site_local.src6[1] = 0xc0;
    CHECK_FALSE(match(link_local, build(site_local).bytes));
  }

  SECTION("flow label: 20 bits, full and partial masks") {
    Ipv6Spec s = ipv6_exact(p);
    s.flow_label ^= 0x80000;  // the label's top bit, next to the traffic class
    CHECK_FALSE(match(s, f));
    s.flow_label_mask = 0x7ffff;
    CHECK(match(s, f));
    s = ipv6_exact(p);
    s.flow_label ^= 1;
    CHECK_FALSE(match(s, f));
    s.flow_label_mask = 0xffff0;
    CHECK(match(s, f));
    s.flow_label_mask = 0;
    CHECK(match(s, f));
    FrameParts q = p;
    q.flow_label = 0;
    q.traffic_class = 0xff;  // the traffic class is not part of the label
    Ipv6Spec zero;
    zero.flow_label_mask = 0xfffff;
    CHECK(match(zero, build(q).bytes));
  }

  SECTION("traffic class: the byte across the version and the flow label") {
    for (uint8_t bit = 0; bit < 8; ++bit) {
      Ipv6Spec s = ipv6_exact(p);
      s.traffic_class ^= uint8_t(1 << bit);
      CHECK_FALSE(match(s, f));
      s.traffic_class_mask = uint8_t(~(1 << bit));
      CHECK(match(s, f));
    }
    Ipv6Spec ecn;
    ecn.traffic_class = 0x02;  // ECT(0): 0xa6 & 3
    ecn.traffic_class_mask = 0x03;
    CHECK(match(ecn, f));
    ecn.traffic_class = 0x03;
    CHECK_FALSE(match(ecn, f));
    FrameParts q = p;
    q.traffic_class = 0;
    q.flow_label = 0xfffff;
    Ipv6Spec zero;
    zero.traffic_class_mask = 0xff;
    CHECK(match(zero, build(q).bytes));
  }

  SECTION("next header and hop limit") {
    Ipv6Spec s = ipv6_exact(p);
    s.next_hdr = tcp;
    CHECK_FALSE(match(s, f));
    CHECK(match(ipv6_exact(ipv6_parts(tcp)), build(ipv6_parts(tcp)).bytes));
    s.next_hdr_mask = 0;
    CHECK(match(s, f));
    s = ipv6_exact(p);
    s.hop_limit = 58;
    CHECK_FALSE(match(s, f));
    s.hop_limit_mask = 0xf0;
    CHECK(match(s, f));
  }

  SECTION("malformed: a version other than 6") {
    FrameParts q = p;
    q.version_override = 4;
    CHECK_FALSE(match(Ipv6Spec{}, build(q).bytes));
  }
}

TEST_CASE("flow l4 spec: ports, the implied protocol, options and fragments", "[transport][flow]") {
  for (const FrameParts& p : {parts(), ipv6_parts(udp), ipv6_parts(tcp), [] {
                                FrameParts q = parts();
                                q.protocol = tcp;
                                q.tci = 0x0fff;
                                return q;
                              }()}) {
    INFO("IPv" << p.ip_version << " protocol " << int(p.protocol));
    const Bytes f = build(p).bytes;
    CHECK(match(l4_exact(p), f));
    L4Spec any;
    any.protocol = p.protocol;
    CHECK(match(any, f));
    any.protocol = p.protocol == udp ? tcp : udp;  // every port masked out: still that protocol only
    CHECK_FALSE(match(any, f));

    L4Spec s = l4_exact(p);
    s.src_port ^= 0x0100;
    CHECK_FALSE(match(s, f));
    s.src_port_mask = 0xfeff;
    CHECK(match(s, f));
    s = l4_exact(p);
    s.dst_port ^= 0x0001;
    CHECK_FALSE(match(s, f));
    s.dst_port_mask = 0xfff0;
    CHECK(match(s, f));
    s.dst_port_mask = 0;
    CHECK(match(s, f));
    s = l4_exact(p);
    std::swap(s.src_port, s.dst_port);  // the two ports are not interchangeable
    CHECK_FALSE(match(s, f));
  }

  SECTION("RoCEv2's destination port, any source port") {
    L4Spec roce;
    roce.protocol = udp;
    roce.dst_port = 4791;
    roce.dst_port_mask = 0xffff;
    CHECK(match(roce, build(parts()).bytes));
    FrameParts other = parts();
    other.dport = 4792;
    CHECK_FALSE(match(roce, build(other).bytes));
  }

  SECTION("not IP: no ports") {
    FrameParts arp = parts();
    arp.ip_version = 0;
    arp.payload = Bytes(40, 0);
    L4Spec s;
    s.protocol = 0;  // even the protocol a zeroed payload would show
    CHECK_FALSE(match(s, build(arp).bytes));
  }

  SECTION("IPv4 options: the ports follow them") {
    for (size_t words : {1, 3, 10}) {
      FrameParts q = parts();
      q.options.assign(words * 4, 0);
      q.options[0] = 0x12;  // where the ports would be with IHL 5
      q.options[1] = 0x34;
      const Bytes g = build(q).bytes;
      CHECK(match(l4_exact(q), g));
      L4Spec wrong = l4_exact(q);
      wrong.src_port = 0x1234;
      CHECK_FALSE(match(wrong, g));
    }
  }

  SECTION("fragments: only the first carries the ports") {
    FrameParts q = parts();
    q.flags_fragment = 0x2000;  // MF, offset 0: the first fragment
    CHECK(match(l4_exact(q), build(q).bytes));
    for (uint16_t field : {0x0001, 0x2001, 0x1fff, 0x4100}) {
      INFO("fragment field " << field);
      q.flags_fragment = field;
      const Bytes g = build(q).bytes;
      L4Spec any;
      any.protocol = udp;
      CHECK_FALSE(match(any, g));
      CHECK_FALSE(match(l4_exact(q), g));
      CHECK(match(ipv4_exact(q), g));  // the IP header still matches
    }
  }

  SECTION("IPv6 extension headers are not walked") {
    FrameParts q = ipv6_parts(0);  // hop-by-hop options, then (were it walked) UDP
    L4Spec s;
    s.protocol = udp;
    CHECK_FALSE(match(s, build(q).bytes));
    s.protocol = 0;  // the next header as the spec's protocol: the first bytes after the header are the ports
    s.src_port = 0x0102;  // the payload's first bytes
    s.src_port_mask = 0xffff;
    s.dst_port = 0x0304;
    s.dst_port_mask = 0xffff;
    CHECK(match(s, build(q).bytes));
  }
}

TEST_CASE("flow rule: every spec must match; no specs match every Ethernet frame", "[transport][flow]") {
  const FrameParts p = parts();
  const Bytes f = build(p).bytes;
  FlowRule rule;
  CHECK(match_rule(rule, f));
  FrameParts arp = parts();
  arp.ip_version = 0;
  CHECK(match_rule(rule, build(arp).bytes));
  CHECK(match_rule(rule, Bytes(14, 0)));
  CHECK_FALSE(match_rule(rule, Bytes(13, 0)));
  Bytes short_tagged(16, 0);
  short_tagged[12] = 0x81;  // a tag that does not fit
  CHECK_FALSE(match_rule(rule, short_tagged));
  short_tagged.resize(18);
  CHECK(match_rule(rule, short_tagged));

  rule.specs = {spec_of(eth_exact(p)), spec_of(ipv4_exact(p)), spec_of(l4_exact(p))};
  CHECK(match_rule(rule, f));
  for (size_t i = 0; i < rule.specs.size(); ++i) {
    FlowRule one_off = rule;
    switch (one_off.specs[i].kind) {
      case Spec::Kind::eth: one_off.specs[i].eth.src.bytes[0] ^= 4; break;
      case Spec::Kind::ipv4: one_off.specs[i].ipv4.ttl ^= 4; break;
      case Spec::Kind::l4: one_off.specs[i].l4.dst_port ^= 4; break;
      case Spec::Kind::ipv6: break;
    }
    CHECK_FALSE(match_rule(one_off, f));
  }
  rule.specs.push_back(spec_of(Ipv6Spec{}));  // IPv4 and IPv6 at once: nothing
  CHECK_FALSE(match_rule(rule, f));
  CHECK_FALSE(match_rule(rule, build(ipv6_parts()).bytes));

  // Priority, flags and the drop action decide what the table does with a match, not whether it is one.
  FlowRule dropping;
  dropping.priority = 7;
  dropping.flags = flag_dont_trap;
  dropping.drop = true;
  dropping.specs = {spec_of(ipv4_exact(p))};
  CHECK(match_rule(dropping, f));
}

TEST_CASE("flow specs on every prefix of a frame: no match without the bytes, no reads past the end",
          "[transport][flow]") {
  FrameParts v4_tcp_options = parts();
  v4_tcp_options.protocol = tcp;
  v4_tcp_options.options.assign(8, 1);
  FrameParts v6_tagged = ipv6_parts();
  v6_tagged.tci = 0x3039;
  FrameParts v4_tagged = parts();
  v4_tagged.tci = 0x0002;
  v4_tagged.payload.clear();

  for (const FrameParts& p : {parts(), v4_tcp_options, v4_tagged, ipv6_parts(tcp), v6_tagged}) {
    const Built b = build(p);
    const size_t l2 = b.l3;
    const size_t l4_needed = b.l4 + 4;
    for (size_t len = 0; len <= b.bytes.size(); ++len) {
      INFO("IPv" << p.ip_version << (p.tci ? " tagged" : "") << ", " << len << " of " << b.bytes.size() << " bytes");
      const Bytes f(b.bytes.begin(), b.bytes.begin() + std::ptrdiff_t(len));
      CHECK(match(eth_exact(p), f) == (len >= l2));
      CHECK(match(EthSpec{}, f) == (len >= l2));
      CHECK(match_rule(FlowRule{}, f) == (len >= l2));
      if (p.ip_version == 4) {
        CHECK(match(ipv4_exact(p), f) == (len >= b.l4));
        CHECK(match(Ipv4Spec{}, f) == (len >= b.l4));
        CHECK_FALSE(match(Ipv6Spec{}, f));
      } else {
        CHECK(match(ipv6_exact(p), f) == (len >= b.l4));
        CHECK(match(Ipv6Spec{}, f) == (len >= b.l4));
        CHECK_FALSE(match(Ipv4Spec{}, f));
      }
      CHECK(match(l4_exact(p), f) == (len >= l4_needed));
      L4Spec any_port;  // every port masked out: still needs both ports in the frame
      any_port.protocol = p.protocol;
      CHECK(match(any_port, f) == (len >= l4_needed));
      FlowRule all;
      all.specs = {spec_of(eth_exact(p)), spec_of(l4_exact(p))};
      CHECK(match_rule(all, f) == (len >= l4_needed));
    }
  }
}

TEST_CASE("flow specs on random bytes: total, and consistent with the rule of all", "[transport][flow]") {
  std::mt19937 rng(41);
  auto byte = [&] { return uint8_t(rng()); };
  for (int i = 0; i < 20000; ++i) {
    Bytes f(rng() % 90);
    for (uint8_t& x : f) x = byte();
    // Steer most frames into the interesting parsers: a tag or not, IPv4 or IPv6, plausible first bytes.
    const size_t l3 = (rng() % 2 && f.size() >= 18) ? 18 : 14;
    if (l3 == 18) {
      f[12] = 0x81;
      f[13] = 0x00;
    }
    if (f.size() >= l3) {
      const bool v6 = rng() % 2;
      f[l3 - 2] = v6 ? 0x86 : 0x08;
      f[l3 - 1] = v6 ? 0xdd : 0x00;
      if (f.size() > l3 && rng() % 4) f[l3] = uint8_t((v6 ? 0x60 : 0x40) | (f[l3] & 0x0f));
    }
    Spec specs[4];
    specs[0] = spec_of(EthSpec{});
    specs[1] = spec_of(Ipv4Spec{});
    specs[2] = spec_of(Ipv6Spec{});
    L4Spec l4;
    l4.protocol = rng() % 2 ? tcp : udp;
    l4.src_port = uint16_t(rng());
    l4.src_port_mask = uint16_t(rng() % 2 ? 0 : rng());
    specs[3] = spec_of(l4);
    const Bytes exact = f;
    const std::span<const uint8_t> span(exact.data(), exact.size());
    FlowRule all;
    bool every = true;
    for (const Spec& s : specs) {
      const bool m = matches(s, span);
      every = every && m;
      all.specs.push_back(s);
    }
    REQUIRE(matches(all, span) == every);
    CHECK_FALSE(matches(all, span));  // IPv4 and IPv6 at once
  }
}
