#include "pcap_tools/tunnel.hpp"

#include <fmt/format.h>

#include "pcap_tools/capture_reader.hpp"
#include "transport/wire/bytes.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::pcap_tools {

namespace {

using wire::load_be16;
using wire::load_be32;

constexpr size_t gre_base_size = 4;
constexpr size_t erspan_ii_size = 8;
constexpr size_t erspan_iii_size = 12;
constexpr size_t erspan_platform_size = 8;
constexpr size_t vxlan_size = 8;

// The outer IP packet's payload: [begin, end) in the frame's bytes, and its protocol. Nothing for a frame
// that is not IP, or whose IP header was not read whole.
struct IpPayload {
  uint8_t protocol = 0;
  size_t begin = 0;
  size_t end = 0;
};

// IPv6 extension headers before the tunnel's: Linux's ip6gre and ip6erspan put a destination options
// header (RFC 2473's tunnel encapsulation limit) in every packet by default. Hop-by-hop, routing and
// destination options are stepped over; a fragment (or one cut short) leaves nothing to look through.
constexpr uint8_t ipv6_hop_by_hop = 0, ipv6_routing = 43, ipv6_fragment = 44, ipv6_destination = 60;

bool skip_ipv6_extensions(const wire::Frame& f, IpPayload& p) {
  const uint8_t* b = f.bytes.data();
  while (p.protocol == ipv6_hop_by_hop || p.protocol == ipv6_routing || p.protocol == ipv6_destination) {
    if (p.end - p.begin < 8) return false;
    const size_t length = (size_t(b[p.begin + 1]) + 1) * 8;
    if (p.end - p.begin < length) return false;
    p.protocol = b[p.begin];
    p.begin += length;
  }
  return p.protocol != ipv6_fragment;
}

std::optional<IpPayload> ip_payload(const wire::Frame& f, bool cut_by_snaplen) {
  if (!f.has(wire::layer_ip)) return std::nullopt;
  IpPayload p;
  if (f.ip_version == wire::IpVersion::v4) {
    if (f.ipv4.total_length < f.ipv4.header_length) return std::nullopt;
    // A fragment carries a piece of the tunnel packet: nothing to look through (GRE fragments parse as
    // "other IP" without complaint, so this is checked here).
    if (f.ipv4.more_fragments || f.ipv4.fragment_offset != 0) return std::nullopt;
    p.protocol = f.ipv4.protocol;
    p.begin = f.l3_offset + f.ipv4.header_length;
  } else {
    p.protocol = f.ipv6.next_header;
    p.begin = f.l3_offset + wire::ipv6_header_size;
  }
  if (f.ok()) {
    p.end = f.end_offset;
  } else if (f.error == wire::ParseError::ip_length_mismatch && cut_by_snaplen) {
    p.end = f.bytes.size();  // the IP packet runs on past what was captured
  } else {
    return std::nullopt;  // a malformed outer packet (its lengths, a fragment): shown as it is
  }
  if (p.begin > p.end) return std::nullopt;
  if (f.ip_version == wire::IpVersion::v6 && !skip_ipv6_extensions(f, p)) return std::nullopt;
  return p;
}

// The first 4 bytes, alike in types II and III: version, VLAN, COS, a 2-bit field (type II's encapsulation,
// type III's bad/short/oversized), T and the session ID. Returns the 2-bit field.
uint8_t read_erspan_words(const uint8_t* h, Tunnel& t) {
  const uint16_t w1 = load_be16(h + 2);
  t.vlan = load_be16(h) & 0x0fff;
  t.cos = uint8_t(w1 >> 13);
  t.truncated = (w1 >> 10) & 1;
  t.session = w1 & 0x03ff;
  return uint8_t((w1 >> 11) & 3);
}

void read_erspan_ii(const uint8_t* h, Tunnel& t) {
  t.encap = read_erspan_words(h, t);
  t.index = load_be32(h + 4) & 0x000fffff;
}

void read_erspan_iii(const uint8_t* h, Tunnel& t) {
  t.bso = read_erspan_words(h, t);
  t.timestamp = load_be32(h + 4);
  t.sgt = load_be16(h + 8);
  const uint16_t w5 = load_be16(h + 10);
  t.pdu_frame = (w5 >> 15) & 1;
  t.frame_type = uint8_t((w5 >> 10) & 0x1f);
  t.hw_id = uint8_t((w5 >> 4) & 0x3f);
  t.egress = (w5 >> 3) & 1;
  t.granularity = uint8_t((w5 >> 1) & 3);
}

// GRE at [p.begin, p.end): ERSPAN or transparent Ethernet bridging, or nothing.
std::optional<Tunnel> gre_tunnel(const wire::Frame& f, const IpPayload& p) {
  const uint8_t* b = f.bytes.data();
  size_t at = p.begin;
  if (p.end - at < gre_base_size) return std::nullopt;
  const uint16_t flags = load_be16(b + at);
  const uint16_t protocol = load_be16(b + at + 2);
  const bool checksum = flags & 0x8000;
  const bool routing = flags & 0x4000;
  const bool key = flags & 0x2000;
  const bool sequence = flags & 0x1000;
  // Version 1 is PPTP's enhanced GRE; a routing header (RFC 1701) no mirror sends.
  if ((flags & 0x0007) != 0 || routing) return std::nullopt;
  const size_t options = (checksum ? 4 : 0) + (key ? 4 : 0) + (sequence ? 4 : 0);
  if (p.end - at < gre_base_size + options) return std::nullopt;
  Tunnel t;
  at += gre_base_size + (checksum ? 4 : 0);
  if (key) t.gre_key = load_be32(b + at), at += 4;
  if (sequence) t.gre_sequence = load_be32(b + at), at += 4;
  switch (protocol) {
    case gre_transparent_ethernet:
      t.kind = TunnelKind::gre;
      break;
    case wire::ethertype_ipv4:
    case wire::ethertype_ipv6:  // GRE between routers: IP packets, no Ethernet header
      t.kind = TunnelKind::gre;
      t.inner_is_ip = true;
      break;
    case gre_erspan_i_ii:
      // Type I has no sequence number and no ERSPAN header; type II has both.
      if (!sequence) {
        t.kind = TunnelKind::erspan_i;
        break;
      }
      if (p.end - at < erspan_ii_size || (b[at] >> 4) != 1) return std::nullopt;
      t.kind = TunnelKind::erspan_ii;
      read_erspan_ii(b + at, t);
      at += erspan_ii_size;
      break;
    case gre_erspan_iii: {
      if (p.end - at < erspan_iii_size || (b[at] >> 4) != 2) return std::nullopt;
      t.kind = TunnelKind::erspan_iii;
      read_erspan_iii(b + at, t);
      const bool platform = b[at + 11] & 1;
      at += erspan_iii_size;
      if (platform) {
        if (p.end - at < erspan_platform_size) return std::nullopt;
        t.platform_id = uint8_t(b[at] >> 2);
        at += erspan_platform_size;
      }
      // Frame type 0 is an Ethernet frame, 2 an IP packet; the others carry nothing we read.
      if (t.frame_type != 0 && t.frame_type != 2) return std::nullopt;
      t.inner_is_ip = t.frame_type == 2;
      break;
    }
    default:
      return std::nullopt;
  }
  t.inner_offset = at;
  t.inner_end = p.end;
  return t;
}

std::optional<Tunnel> vxlan_tunnel(const wire::Frame& f, const IpPayload& p) {
  const uint8_t* b = f.bytes.data();
  if (p.end - p.begin < wire::udp_header_size + vxlan_size) return std::nullopt;
  if (load_be16(b + p.begin + 2) != vxlan_udp_port) return std::nullopt;
  const size_t at = p.begin + wire::udp_header_size;
  if (!(b[at] & 0x08)) return std::nullopt;  // the I flag: a valid VNI
  Tunnel t;
  t.kind = TunnelKind::vxlan;
  t.vni = load_be32(b + at + 4) >> 8;
  t.inner_offset = at + vxlan_size;
  t.inner_end = p.end;
  return t;
}

}  // namespace

std::optional<Tunnel> find_tunnel(const wire::Frame& outer, bool cut_by_snaplen) {
  const auto p = ip_payload(outer, cut_by_snaplen);
  if (!p) return std::nullopt;
  std::optional<Tunnel> t;
  if (p->protocol == ip_proto_gre) {
    t = gre_tunnel(outer, *p);
  } else if (p->protocol == wire::ip_proto_udp) {
    t = vxlan_tunnel(outer, *p);
  }
  if (t) {
    t->src = outer.src_ip();
    t->dst = outer.dst_ip();
  }
  return t;
}

std::string tunnel_name(TunnelKind kind) {
  switch (kind) {
    case TunnelKind::erspan_i: return "ERSPAN type I";
    case TunnelKind::erspan_ii: return "ERSPAN type II";
    case TunnelKind::erspan_iii: return "ERSPAN type III";
    case TunnelKind::gre: return "GRE";
    case TunnelKind::vxlan: return "VXLAN";
  }
  return "tunnel";
}

std::string tunnel_tag(const Tunnel& t) {
  switch (t.kind) {
    case TunnelKind::erspan_ii:
    case TunnelKind::erspan_iii: return fmt::format("{} session {}", tunnel_name(t.kind), t.session);
    case TunnelKind::vxlan: return fmt::format("VXLAN VNI {}", t.vni);
    case TunnelKind::gre:
      return t.gre_key ? fmt::format("GRE key {}", *t.gre_key) : std::string("GRE");
    case TunnelKind::erspan_i: break;
  }
  return tunnel_name(t.kind);
}

std::string tunnels_tag(const std::vector<Tunnel>& tunnels) {
  std::string tag;
  for (const Tunnel& t : tunnels) tag += (tag.empty() ? "" : " / ") + tunnel_tag(t);
  return tag;
}

void TunnelTally::add(const Record& r) {
  if (r.tunnels.empty()) return;
  std::string key;
  for (const Tunnel& t : r.tunnels) {
    if (!key.empty()) key += ", in it ";
    key += fmt::format("{} from {} to {}", tunnel_tag(t), wire::to_string(t.src), wire::to_string(t.dst));
  }
  Count& c = tunnels_[key];
  if (c.frames++ == 0) order_.push_back(key);
  if (r.copy_of != 0) ++c.copies, ++copies_;
}

std::vector<std::string> TunnelTally::lines() const {
  std::vector<std::string> out;
  for (const std::string& key : order_) {
    const Count& c = tunnels_.at(key);
    std::string line = fmt::format("{} frame{} came through {}", c.frames, c.frames == 1 ? "" : "s", key);
    if (c.copies == c.frames) {
      line += c.frames == 1 ? " (a copy of a frame another tunnel carried first)"
                            : " (all copies of frames another tunnel carried first)";
    } else if (c.copies != 0) {
      line += fmt::format(" ({} of them copies of frames another tunnel carried first)", c.copies);
    }
    out.push_back(line);
  }
  if (copies_ != 0) out.push_back(fmt::format("Each frame is told once: {} mirror copies are left out.", copies_));
  return out;
}

}  // namespace uroce::pcap_tools
