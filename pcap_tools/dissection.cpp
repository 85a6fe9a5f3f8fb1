#include "pcap_tools/dissection.hpp"

#include <fmt/format.h>

#include "transport/wire/mad.hpp"

namespace uroce::pcap_tools {

namespace {

using json = nlohmann::ordered_json;
using namespace uroce::wire;

Field leaf(std::string key, std::string label, json value, std::string display) {
  return Field{std::move(key), std::move(label), std::move(value), std::move(display), {}};
}
Field number(std::string key, std::string label, uint64_t v) {
  return leaf(std::move(key), std::move(label), v, std::to_string(v));
}
Field hex(std::string key, std::string label, uint64_t v, int digits) {
  return leaf(std::move(key), std::move(label), v, fmt::format("0x{:0{}x}", v, digits));
}
Field flag(std::string key, std::string label, bool v) {
  return leaf(std::move(key), std::move(label), v, v ? "True" : "False");
}
Field text(std::string key, std::string label, std::string v) {
  std::string shown = v;
  return leaf(std::move(key), std::move(label), std::move(v), std::move(shown));
}
Field layer(std::string key, std::string label, std::vector<Field> children) {
  return Field{std::move(key), std::move(label), json(), {}, std::move(children)};
}

std::string_view ecn_name(Ecn e) {
  switch (e) {
    case Ecn::not_ect: return "Not-ECT";
    case Ecn::ect1: return "ECT(1)";
    case Ecn::ect0: return "ECT(0)";
    case Ecn::ce: return "CE";
  }
  return "?";
}

Field frame_layer(const Record& r, const Frame& f, double rel) {
  std::vector<Field> c;
  c.push_back(number("number", "Number", r.number));
  c.push_back(leaf("time", "Time since first frame", rel, fmt::format("{:.9f} s", rel)));
  c.push_back(number("length", "Length on the wire", r.wire_length));
  c.push_back(number("captured", "Captured length", r.bytes.size()));
  const char* kind = "unknown";
  switch (f.kind) {
    case FrameKind::unknown: kind = "unknown"; break;
    case FrameKind::other_l2: kind = "other_l2"; break;
    case FrameKind::arp: kind = "arp"; break;
    case FrameKind::mac_control: kind = "mac_control"; break;
    case FrameKind::other_ip: kind = "other_ip"; break;
    case FrameKind::other_udp: kind = "other_udp"; break;
    case FrameKind::roce: kind = "roce"; break;
  }
  c.push_back(text("kind", "Kind", kind));
  return layer("frame", "Frame", std::move(c));
}

// How a mirrored or tunnelled frame came (tunnel.hpp): the outer addresses and the tunnel's header. The
// ERSPAN names follow Wireshark's erspan fields.
Field tunnel_layer(const Tunnel& t, uint64_t copy_of, size_t depth) {
  std::vector<Field> c;
  c.push_back(text("kind", "Kind", tunnel_name(t.kind)));
  c.push_back(text("src", "Source", to_string(t.src)));
  c.push_back(text("dst", "Destination", to_string(t.dst)));
  if (t.gre_key) c.push_back(hex("gre_key", "GRE key", *t.gre_key, 8));
  if (t.gre_sequence) c.push_back(number("gre_sequence", "GRE sequence number", *t.gre_sequence));
  if (t.kind == TunnelKind::erspan_ii || t.kind == TunnelKind::erspan_iii) {
    c.push_back(number("session", "Session ID", t.session));
    c.push_back(number("vlan", "Original VLAN", t.vlan));
    c.push_back(number("cos", "Class of service", t.cos));
    c.push_back(flag("truncated", "Truncated by the mirror", t.truncated));
  }
  if (t.kind == TunnelKind::erspan_ii) {
    c.push_back(number("encap", "Original encapsulation", t.encap));
    c.push_back(number("index", "Index", t.index));
  }
  if (t.kind == TunnelKind::erspan_iii) {
    c.push_back(number("bso", "Bad/short/oversized", t.bso));
    c.push_back(number("timestamp", "Timestamp", t.timestamp));
    c.push_back(number("granularity", "Timestamp granularity", t.granularity));
    c.push_back(number("sgt", "Security group tag", t.sgt));
    c.push_back(flag("pdu_frame", "Ethernet PDU", t.pdu_frame));
    c.push_back(number("frame_type", "Frame type", t.frame_type));
    c.push_back(number("hw_id", "Hardware ID", t.hw_id));
    c.push_back(text("direction", "Direction", t.egress ? "egress" : "ingress"));
    if (t.platform_id) c.push_back(number("platform_id", "Platform ID", *t.platform_id));
  }
  if (t.kind == TunnelKind::vxlan) c.push_back(number("vni", "VXLAN network identifier", t.vni));
  c.push_back(number("inner_offset", "Carried frame at byte", t.inner_offset));
  if (copy_of != 0) c.push_back(number("copy_of", "A mirror copy of frame", copy_of));
  if (depth == 1) return layer("tunnel", "Tunnel", std::move(c));
  return layer(fmt::format("tunnel_{}", depth), fmt::format("Tunnel inside ({})", depth), std::move(c));
}

Field eth_layer(const Frame& f) {
  std::vector<Field> c;
  c.push_back(text("dst", "Destination", to_string(f.eth.dst)));
  c.push_back(text("src", "Source", to_string(f.eth.src)));
  if (f.eth.has_outer_vlan) {  // QinQ: the provider's service tag, then the customer's tag
    c.push_back(hex("outer_vlan_tpid", "Service tag type", f.eth.outer_vlan_tpid, 4));
    c.push_back(number("outer_vlan_id", "Service VLAN ID", f.eth.outer_vlan_id()));
    c.push_back(number("outer_vlan_pcp", "Service VLAN priority", f.eth.outer_vlan_pcp()));
  }
  if (f.eth.has_vlan) {
    if (f.eth.vlan_tpid != ethertype_vlan) c.push_back(hex("vlan_tpid", "Tag type", f.eth.vlan_tpid, 4));
    c.push_back(number("vlan_id", "VLAN ID", f.eth.vlan_id()));
    c.push_back(number("vlan_pcp", "VLAN priority", f.eth.vlan_pcp()));
  }
  c.push_back(hex("ethertype", "Type", f.eth.ethertype, 4));
  return layer("eth", "Ethernet II", std::move(c));
}

Field arp_layer(const Frame& f) {
  const ArpPacket& a = f.arp;
  std::vector<Field> c;
  c.push_back(leaf("operation", "Operation", a.operation,
                   a.operation == arp_op_request ? "request (1)" : a.operation == arp_op_reply ? "reply (2)"
                                                                                                : std::to_string(a.operation)));
  c.push_back(text("sender_mac", "Sender MAC", to_string(a.sender_mac)));
  c.push_back(text("sender_ip", "Sender IP", to_string(IpAddress::from_v4(a.sender_ip))));
  c.push_back(text("target_mac", "Target MAC", to_string(a.target_mac)));
  c.push_back(text("target_ip", "Target IP", to_string(IpAddress::from_v4(a.target_ip))));
  return layer("arp", "ARP", std::move(c));
}

std::string priority_list(uint8_t bits) {
  std::string s;
  for (unsigned i = 0; i < 8; ++i) {
    if ((bits >> i & 1) != 0) s += fmt::format("{}{}", s.empty() ? "" : " ", i);
  }
  return s.empty() ? "none" : s;
}

// PAUSE and PFC (Wireshark's "MAC Control" and "PFC" trees): times in quanta of 512 bit times, as on the
// wire; a capture does not say the link's speed.
Field mac_control_layer(const Frame& f) {
  const MacControl& m = f.mac_control;
  std::vector<Field> c;
  const char* name = m.is_pfc() ? "PFC" : m.is_pause() ? "PAUSE" : "other";
  c.push_back(leaf("opcode", "Opcode", m.opcode, fmt::format("{} (0x{:04x})", name, m.opcode)));
  if (m.is_pause()) {
    c.push_back(leaf("pause_quanta", "Pause time", m.pause_quanta, fmt::format("{} quanta", m.pause_quanta)));
  } else if (m.is_pfc()) {
    c.push_back(leaf("class_enable", "Class-enable vector", m.reserved_enable_bits << 8 | m.enabled,
                     fmt::format("0x{:04x} (priorities: {})", m.reserved_enable_bits << 8 | m.enabled,
                                 priority_list(m.enabled))));
    for (unsigned i = 0; i < 8; ++i) {
      const bool on = (m.enabled >> i & 1) != 0;
      c.push_back(leaf(fmt::format("priority{}_quanta", i), fmt::format("Priority {} time", i), m.quanta[i],
                       fmt::format("{} quanta{}", m.quanta[i], on ? "" : " (not enabled)")));
    }
  }
  return layer("mac_control", "MAC Control", std::move(c));
}

Field ip_layer(const Frame& f) {
  std::vector<Field> c;
  if (f.ip_version == IpVersion::v4) {
    const Ipv4Header& h = f.ipv4;
    c.push_back(number("version", "Version", 4));
    c.push_back(number("header_length", "Header length", h.header_length));
    c.push_back(number("dscp", "DSCP", h.dscp()));
    c.push_back(leaf("ecn", "ECN", uint8_t(h.ecn()), fmt::format("{} ({})", ecn_name(h.ecn()), uint8_t(h.ecn()))));
    c.push_back(number("total_length", "Total length", h.total_length));
    c.push_back(hex("id", "Identification", h.identification, 4));
    c.push_back(flag("df", "Don't fragment", h.dont_fragment));
    c.push_back(number("ttl", "Time to live", h.ttl));
    c.push_back(number("protocol", "Protocol", h.protocol));
    c.push_back(hex("checksum", "Header checksum", h.checksum, 4));
    c.push_back(flag("checksum_ok", "Header checksum valid", h.checksum_ok));
    c.push_back(text("src", "Source", to_string(IpAddress::from_v4(h.src))));
    c.push_back(text("dst", "Destination", to_string(IpAddress::from_v4(h.dst))));
    return layer("ip", "Internet Protocol Version 4", std::move(c));
  }
  const Ipv6Header& h = f.ipv6;
  c.push_back(number("version", "Version", 6));
  c.push_back(hex("traffic_class", "Traffic class", h.traffic_class, 2));
  c.push_back(leaf("ecn", "ECN", uint8_t(h.ecn()), fmt::format("{} ({})", ecn_name(h.ecn()), uint8_t(h.ecn()))));
  c.push_back(hex("flow_label", "Flow label", h.flow_label, 5));
  c.push_back(number("payload_length", "Payload length", h.payload_length));
  c.push_back(number("next_header", "Next header", h.next_header));
  c.push_back(number("hop_limit", "Hop limit", h.hop_limit));
  c.push_back(text("src", "Source", to_string(h.src)));
  c.push_back(text("dst", "Destination", to_string(h.dst)));
  return layer("ip", "Internet Protocol Version 6", std::move(c));
}

Field udp_layer(const Frame& f) {
  std::vector<Field> c;
  c.push_back(number("src_port", "Source port", f.udp.src_port));
  c.push_back(number("dst_port", "Destination port", f.udp.dst_port));
  c.push_back(number("length", "Length", f.udp.length));
  c.push_back(hex("checksum", "Checksum", f.udp.checksum, 4));
  return layer("udp", "User Datagram Protocol", std::move(c));
}

Field bth_layer(const Bth& b) {
  std::vector<Field> c;
  c.push_back(leaf("opcode", "Opcode", b.opcode, fmt::format("{} ({})", opcode_name(b.opcode), b.opcode)));
  c.push_back(text("opcode_name", "Opcode name", opcode_name(b.opcode)));
  c.push_back(flag("se", "Solicited event", b.solicited));
  c.push_back(flag("migreq", "MigReq", b.migreq));
  c.push_back(number("pad_count", "Pad count", b.pad_count));
  c.push_back(number("tver", "Header version", b.tver));
  c.push_back(hex("pkey", "Partition key", b.pkey, 4));
  c.push_back(flag("fecn", "FECN", b.fecn));
  c.push_back(flag("becn", "BECN", b.becn));
  c.push_back(hex("dest_qp", "Destination QP", b.dest_qp, 6));
  c.push_back(flag("ack_req", "Acknowledge request", b.ack_req));
  c.push_back(number("psn", "Packet sequence number", b.psn));
  return layer("bth", "Base Transport Header", std::move(c));
}

void extension_layers(const RocePacket& r, std::vector<Field>& out) {
  const TransportHeaders& h = r.headers;
  const OpcodeInfo& info = *r.info;
  if (info.has(hdr_deth)) {
    out.push_back(layer("deth", "Datagram Extended Transport Header",
                        {hex("qkey", "Queue key", h.deth.qkey, 8), hex("src_qp", "Source QP", h.deth.src_qp, 6)}));
  }
  if (info.has(hdr_xrceth)) {
    out.push_back(layer("xrceth", "XRC Extended Transport Header", {hex("xrc_srq", "XRC SRQ", h.xrceth.srq, 6)}));
  }
  if (info.has(hdr_feth)) {
    out.push_back(layer("feth", "Flush Extended Transport Header",
                        {number("selectivity_level", "Selectivity level", h.feth.selectivity_level()),
                         number("placement_type", "Placement type", h.feth.placement_type())}));
  }
  if (info.has(hdr_reth)) {
    out.push_back(layer("reth", "RDMA Extended Transport Header",
                        {hex("va", "Virtual address", h.reth.va, 16), hex("rkey", "Remote key", h.reth.rkey, 8),
                         number("dma_length", "DMA length", h.reth.dma_length)}));
  }
  if (info.has(hdr_atomic_eth)) {
    out.push_back(layer("atomic_eth", "Atomic Extended Transport Header",
                        {hex("va", "Virtual address", h.atomic_eth.va, 16),
                         hex("rkey", "Remote key", h.atomic_eth.rkey, 8),
                         number("swap_add", "Swap (or add) data", h.atomic_eth.swap_add),
                         number("compare", "Compare data", h.atomic_eth.compare)}));
  }
  if (info.has(hdr_aeth)) {
    const Aeth& a = h.aeth;
    std::vector<Field> c;
    c.push_back(hex("syndrome", "Syndrome", a.syndrome, 2));
    c.push_back(text("kind", "Kind", std::string(to_string(a.kind()))));
    switch (a.kind()) {
      case AethKind::ack:
        c.push_back(leaf("credits", "Credit count", a.low_bits(),
                         a.low_bits() == aeth_credit_invalid ? "31 (no flow control)" : std::to_string(a.low_bits())));
        break;
      case AethKind::rnr_nak:
        c.push_back(leaf("rnr_timer", "RNR timer", a.low_bits(),
                         fmt::format("{} ({} us)", a.low_bits(), rnr_timer_microseconds(a.low_bits()))));
        break;
      case AethKind::nak:
        c.push_back(leaf("nak_code", "NAK code", a.low_bits(),
                         fmt::format("{} ({})", a.low_bits(), nak_code_name(a.low_bits()))));
        break;
      case AethKind::reserved:
        break;
    }
    c.push_back(number("msn", "Message sequence number", a.msn));
    out.push_back(layer("aeth", "ACK Extended Transport Header", std::move(c)));
  }
  if (info.has(hdr_atomic_ack_eth)) {
    out.push_back(layer("atomic_ack_eth", "Atomic Acknowledge Extended Transport Header",
                        {number("original", "Original remote data", h.atomic_ack_eth.original)}));
  }
  if (info.has(hdr_immdt)) out.push_back(hex("immdt", "Immediate data", h.immdt, 8));
  if (info.has(hdr_ieth)) out.push_back(hex("ieth", "Invalidate R_Key", h.ieth, 8));
}

std::optional<Field> mad_layer(const RocePacket& r) {
  // MADs travel as UD SENDs to QP1 (the GSI); tshark decodes them the same way.
  if (r.info->transport != Transport::ud || r.bth().dest_qp != gsi_qpn) return std::nullopt;
  const auto m = read_mad_header(r.payload);
  if (!m) return std::nullopt;
  std::vector<Field> c;
  c.push_back(number("base_version", "Base version", m->base_version));
  c.push_back(leaf("mgmt_class", "Management class", m->mgmt_class,
                   fmt::format("0x{:02x} {}", m->mgmt_class, mgmt_class_name(m->mgmt_class))));
  c.push_back(number("class_version", "Class version", m->class_version));
  c.push_back(hex("method", "Method", m->method, 2));
  c.push_back(hex("status", "Status", m->status, 4));
  c.push_back(hex("transaction_id", "Transaction ID", m->transaction_id, 16));
  const std::string_view attr = m->mgmt_class == mgmt_class_cm ? cm_attribute_name(m->attribute_id) : "";
  c.push_back(leaf("attribute_id", "Attribute ID", m->attribute_id, fmt::format("0x{:04x} {}", m->attribute_id, attr)));
  if (!attr.empty()) c.push_back(text("attribute_name", "Attribute", std::string(attr)));
  c.push_back(hex("attribute_modifier", "Attribute modifier", m->attribute_modifier, 8));
  return layer("mad", "Management Datagram", std::move(c));
}

}  // namespace

Dissection dissect(const Record& record, const Frame& f, int64_t first_time_ns) {
  Dissection d;
  d.record = &record;
  d.frame = &f;
  d.time = double(record.time_ns - first_time_ns) / 1e9;
  d.layers.push_back(frame_layer(record, f, d.time));
  // The outermost tunnel is "tunnel" (a mirror copy is its doing); one inside it "tunnel_2", and so on.
  for (size_t i = 0; i < record.tunnels.size(); ++i) {
    d.layers.push_back(tunnel_layer(record.tunnels[i], i == 0 ? record.copy_of : 0, i + 1));
  }
  if (f.has(layer_ethernet)) d.layers.push_back(eth_layer(f));
  if (f.has(layer_arp)) d.layers.push_back(arp_layer(f));
  if (f.has(layer_mac_control)) d.layers.push_back(mac_control_layer(f));
  if (f.has(layer_ip)) d.layers.push_back(ip_layer(f));
  if (f.has(layer_udp)) d.layers.push_back(udp_layer(f));
  if (f.has(layer_transport)) {
    d.layers.push_back(bth_layer(f.roce.bth()));
    extension_layers(f.roce, d.layers);
    d.layers.push_back(number("payload_length", "Payload length", f.roce.payload.size()));
    if (auto m = mad_layer(f.roce)) d.layers.push_back(std::move(*m));
    d.icrc_computed = compute_icrc(f);
    d.icrc_ok = d.icrc_computed == f.roce.icrc;
    d.layers.push_back(layer("icrc", "Invariant CRC",
                             {hex("wire", "On the wire", f.roce.icrc, 8), hex("computed", "Computed", d.icrc_computed, 8),
                              flag("ok", "Valid", *d.icrc_ok)}));
  } else if (f.has(layer_bth)) {
    // The BTH was read before the error: show it, it usually explains the error.
    d.layers.push_back(bth_layer(f.roce.bth()));
  }
  if (!f.ok()) {
    d.layers.push_back(layer("error", "Malformed",
                             {text("code", "Code", std::string(error_name(f.error))),
                              text("message", "Message", std::string(to_string(f.error))),
                              number("offset", "At byte", f.error_offset)}));
  }
  return d;
}

}  // namespace uroce::pcap_tools
