// The frame parser: Ethernet -> [VLAN] -> ARP | IPv4 | IPv6 -> UDP -> BTH -> extension headers -> payload.
//
// Each layer checks that its bytes are present before reading them and records how far it got, so the
// parser is total over arbitrary input (a fuzz target holds it to that).
#include <cstring>

#include "transport/wire/bytes.hpp"
#include "transport/wire/crc32.hpp"
#include "transport/wire/crc32_copy.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::wire {

namespace {

ParseError fail(Frame& f, ParseError e, size_t offset) {
  f.error = e;
  f.error_offset = offset;
  return e;
}

// [bth_off, end) is the UDP payload: BTH, extension headers, payload, pad, ICRC.
ParseError parse_transport(Frame& f, size_t bth_off, size_t end) {
  const uint8_t* b = f.bytes.data();
  f.bth_offset = bth_off;
  if (end - bth_off < bth_size + icrc_size) return fail(f, ParseError::truncated_bth, bth_off);

  RocePacket& r = f.roce;
  read_bth(b + bth_off, r.headers.bth);
  const Bth& bth = r.headers.bth;
  if (bth.tver != 0) return fail(f, ParseError::bad_tver, bth_off + 1);
  const OpcodeInfo& info = opcode_info(bth.opcode);
  f.decoded |= layer_bth;
  if (!info.valid()) return fail(f, ParseError::unknown_opcode, bth_off);
  r.info = &info;

  const size_t icrc_off = end - icrc_size;
  r.icrc = load_icrc(b + icrc_off);
  const size_t ext_off = bth_off + bth_size;
  if (icrc_off - ext_off < info.headers_length) {
    return fail(f, ParseError::truncated_extension_headers, ext_off);
  }
  read_extension_headers(b + ext_off, info.headers, r.headers);

  const size_t payload_off = ext_off + info.headers_length;
  const size_t padded = icrc_off - payload_off;  // payload + pad
  const unsigned pad = bth.pad_count;
  if (pad > padded) return fail(f, ParseError::bad_pad_count, bth_off + 1);
  // FIRST and MIDDLE packets carry a full path MTU of payload: a pad there is malformed.
  if (pad != 0 && (info.position == Position::first || info.position == Position::middle)) {
    return fail(f, ParseError::bad_pad_count, bth_off + 1);
  }
  const size_t payload_len = padded - pad;
  if (!info.has_payload && payload_len != 0) return fail(f, ParseError::unexpected_payload, payload_off);
  if (padded % 4 != 0) return fail(f, ParseError::payload_not_aligned, payload_off);
  r.payload = f.bytes.subspan(payload_off, payload_len);
  f.decoded |= layer_transport;
  return ParseError::none;
}

// [l4, end) is the UDP datagram.
ParseError parse_udp(Frame& f, size_t l4, size_t end) {
  const uint8_t* b = f.bytes.data();
  f.l4_offset = l4;
  if (end - l4 < udp_header_size) return fail(f, ParseError::truncated_udp, l4);
  UdpHeader& u = f.udp;
  u.src_port = load_be16(b + l4);
  u.dst_port = load_be16(b + l4 + 2);
  u.length = load_be16(b + l4 + 4);
  u.checksum = load_be16(b + l4 + 6);
  f.decoded |= layer_udp;
  if (u.length != end - l4) return fail(f, ParseError::udp_length_mismatch, l4 + 4);
  if (u.dst_port != roce_v2_udp_port) {
    f.kind = FrameKind::other_udp;
    return ParseError::none;
  }
  f.kind = FrameKind::roce;
  return parse_transport(f, l4 + udp_header_size, end);
}

ParseError parse_ipv4(Frame& f, size_t l3) {
  const uint8_t* b = f.bytes.data();
  const size_t avail = f.bytes.size() - l3;
  if (avail < ipv4_min_header_size) return fail(f, ParseError::truncated_ipv4, l3);
  const uint8_t* p = b + l3;
  if (p[0] >> 4 != 4) return fail(f, ParseError::bad_ip_version, l3);
  Ipv4Header& h = f.ipv4;
  h.header_length = uint8_t((p[0] & 0x0f) * 4);
  if (h.header_length < ipv4_min_header_size) return fail(f, ParseError::bad_ipv4_header_length, l3);
  if (avail < h.header_length) return fail(f, ParseError::truncated_ipv4, l3);
  h.tos = p[1];
  h.total_length = load_be16(p + 2);
  h.identification = load_be16(p + 4);
  const uint16_t frag = load_be16(p + 6);
  h.dont_fragment = frag & 0x4000;
  h.more_fragments = frag & 0x2000;
  h.fragment_offset = frag & 0x1fff;
  h.ttl = p[8];
  h.protocol = p[9];
  h.checksum = load_be16(p + 10);
  h.checksum_ok = internet_checksum(p, h.header_length) == 0;
  h.src = load_be32(p + 12);
  h.dst = load_be32(p + 16);
  f.ip_version = IpVersion::v4;
  f.kind = FrameKind::other_ip;
  f.decoded |= layer_ip;

  if (h.total_length < h.header_length || h.total_length > avail) {
    return fail(f, ParseError::ip_length_mismatch, l3 + 2);
  }
  f.end_offset = l3 + h.total_length;
  if (h.protocol != ip_proto_udp) return ParseError::none;
  if (h.more_fragments || h.fragment_offset != 0) return fail(f, ParseError::ipv4_fragment, l3 + 6);
  return parse_udp(f, l3 + h.header_length, f.end_offset);
}

ParseError parse_ipv6(Frame& f, size_t l3) {
  const uint8_t* b = f.bytes.data();
  const size_t avail = f.bytes.size() - l3;
  if (avail < ipv6_header_size) return fail(f, ParseError::truncated_ipv6, l3);
  const uint8_t* p = b + l3;
  if (p[0] >> 4 != 6) return fail(f, ParseError::bad_ip_version, l3);
  Ipv6Header& h = f.ipv6;
  const uint32_t word0 = load_be32(p);
  h.traffic_class = uint8_t(word0 >> 20);
  h.flow_label = word0 & 0xfffff;
  h.payload_length = load_be16(p + 4);
  h.next_header = p[6];
  h.hop_limit = p[7];
  h.src = IpAddress::from_v6_bytes(p + 8);
  h.dst = IpAddress::from_v6_bytes(p + 24);
  f.ip_version = IpVersion::v6;
  f.kind = FrameKind::other_ip;
  f.decoded |= layer_ip;

  if (h.payload_length > avail - ipv6_header_size) return fail(f, ParseError::ip_length_mismatch, l3 + 4);
  f.end_offset = l3 + ipv6_header_size + h.payload_length;
  // RoCEv2 never uses IPv6 extension headers: anything but UDP directly is "other IP".
  if (h.next_header != ip_proto_udp) return ParseError::none;
  return parse_udp(f, l3 + ipv6_header_size, f.end_offset);
}

ParseError parse_arp(Frame& f, size_t l3) {
  if (f.bytes.size() - l3 < arp_ipv4_size) return fail(f, ParseError::truncated_arp, l3);
  f.kind = FrameKind::arp;
  if (!read_arp(f.bytes.data() + l3, f.arp)) return fail(f, ParseError::unsupported_arp, l3);
  f.decoded |= layer_arp;
  f.end_offset = l3 + arp_ipv4_size;
  return ParseError::none;
}

ParseError parse_mac_control(Frame& f, size_t l3) {
  f.kind = FrameKind::mac_control;
  if (!read_mac_control(f.bytes.data() + l3, f.bytes.size() - l3, f.mac_control)) {
    return fail(f, ParseError::truncated_mac_control, l3);
  }
  f.decoded |= layer_mac_control;
  f.end_offset = l3 + mac_control_body_size(f.mac_control.opcode);  // the rest is padding to 64 bytes
  return ParseError::none;
}

ParseError dispatch_l3(Frame& f, uint16_t ethertype, size_t l3) {
  f.l3_offset = l3;
  switch (ethertype) {
    case ethertype_ipv4: return parse_ipv4(f, l3);
    case ethertype_ipv6: return parse_ipv6(f, l3);
    case ethertype_arp: return parse_arp(f, l3);
    case ethertype_mac_control: return parse_mac_control(f, l3);
    default:
      f.kind = FrameKind::other_l2;
      f.end_offset = f.bytes.size();
      return ParseError::none;
  }
}

void reset(Frame& f, std::span<const uint8_t> bytes) {
  f.kind = FrameKind::unknown;
  f.error = ParseError::none;
  f.error_offset = 0;
  f.bytes = bytes;
  f.decoded = 0;
  f.roce.info = nullptr;
  f.roce.payload = {};
  f.l3_offset = f.l4_offset = f.bth_offset = f.end_offset = 0;
}

// The VLAN tags from `l3` on, up to two (QinQ; a third is left as the payload's type, which no layer takes),
// with `l3` moved past them; false, `l3` at the tag cut short, if the frame ends inside one. Out of line:
// most frames are untagged.
[[gnu::noinline]] bool read_vlan_tags(std::span<const uint8_t> bytes, EthernetHeader& e, size_t& l3) {
  const uint8_t* b = bytes.data();
  for (int tags = 0; tags < 2 && is_vlan_tpid(e.ethertype); ++tags) {
    if (bytes.size() < l3 + vlan_tag_size) return false;
    if (e.has_vlan) {  // the tag read so far was the outer one
      e.has_outer_vlan = true;
      e.outer_vlan_tci = e.vlan_tci;
      e.outer_vlan_tpid = e.vlan_tpid;
    }
    e.has_vlan = true;
    e.vlan_tpid = e.ethertype;
    e.vlan_tci = load_be16(b + l3);
    e.ethertype = load_be16(b + l3 + 2);
    l3 += vlan_tag_size;
  }
  return true;
}

}  // namespace

ParseError parse_frame(std::span<const uint8_t> bytes, Frame& out) {
  reset(out, bytes);
  if (bytes.size() < ethernet_header_size) return fail(out, ParseError::truncated_ethernet, 0);
  const uint8_t* b = bytes.data();
  EthernetHeader& e = out.eth;
  std::memcpy(e.dst.bytes.data(), b, 6);
  std::memcpy(e.src.bytes.data(), b + 6, 6);
  e.ethertype = load_be16(b + 12);
  e.has_vlan = e.has_outer_vlan = false;
  e.vlan_tci = e.outer_vlan_tci = 0;
  e.vlan_tpid = ethertype_vlan;
  e.outer_vlan_tpid = ethertype_service_vlan;
  size_t l3 = ethernet_header_size;
  if (is_vlan_tpid(e.ethertype)) [[unlikely]] {
    if (!read_vlan_tags(bytes, e, l3)) return fail(out, ParseError::truncated_ethernet, l3 - 2);
  }
  out.decoded |= layer_ethernet;
  return dispatch_l3(out, e.ethertype, l3);
}

ParseError parse_l3(uint16_t ethertype, std::span<const uint8_t> bytes, Frame& out) {
  reset(out, bytes);
  out.eth = EthernetHeader{};
  out.eth.ethertype = ethertype;
  return dispatch_l3(out, ethertype, 0);
}

namespace {

size_t ip_header_length(const Frame& f) {
  return f.ip_version == IpVersion::v4 ? f.ipv4.header_length : ipv6_header_size;
}

}  // namespace

uint32_t compute_icrc(const Frame& f) {
  if (!f.has(layer_transport)) return 0;  // not a RoCE frame that parsed: there is nothing to cover
  const auto packet = f.bytes.subspan(f.l3_offset, f.end_offset - icrc_size - f.l3_offset);
  return compute_icrc(packet, f.ip_version, ip_header_length(f));
}

bool icrc_ok(const Frame& f) { return f.is_roce() && compute_icrc(f) == f.roce.icrc; }

uint32_t compute_icrc_copying_payload(const Frame& f, uint8_t* dst) {
  if (!f.has(layer_transport)) return 0;
  const uint8_t* l3 = f.bytes.data() + f.l3_offset;
  const uint8_t* payload = f.roce.payload.data();
  const uint8_t* icrc_at = f.bytes.data() + f.end_offset - icrc_size;
  // The headers (at least IP, UDP and BTH, as compute_icrc needs), then the payload, then the pad.
  uint32_t crc = compute_icrc(std::span<const uint8_t>(l3, size_t(payload - l3)), f.ip_version, ip_header_length(f));
  crc = crc32_copy(crc, dst, payload, f.roce.payload.size());
  const uint8_t* pad = payload + f.roce.payload.size();
  return crc32_update(crc, pad, size_t(icrc_at - pad));
}

}  // namespace uroce::wire
