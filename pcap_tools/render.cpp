#include "pcap_tools/render.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "pcap_tools/pause_story.hpp"
#include "transport/wire/mad.hpp"

namespace uroce::pcap_tools {

namespace {

using namespace uroce::wire;

// The key fields of a RoCE packet's extension headers, for the summary line.
std::string key_fields(const Frame& f) {
  const RocePacket& r = f.roce;
  const TransportHeaders& h = r.headers;
  const OpcodeInfo& info = *r.info;
  std::string s;
  auto add = [&s](const std::string& part) {
    if (!s.empty()) s += ' ';
    s += part;
  };
  if (h.bth.solicited) add("SE");
  if (h.bth.ack_req) add("A");
  if (h.bth.fecn) add("FECN");
  if (h.bth.becn) add("BECN");
  if (f.ecn() == Ecn::ce) add("ECN-CE");
  if (info.has(hdr_deth)) add(fmt::format("qkey 0x{:08x} srcqp 0x{:06x}", h.deth.qkey, h.deth.src_qp));
  if (info.has(hdr_xrceth)) add(fmt::format("xrcsrq 0x{:06x}", h.xrceth.srq));
  if (info.has(hdr_feth)) add(fmt::format("sel {} plt {}", h.feth.selectivity_level(), h.feth.placement_type()));
  if (info.has(hdr_reth)) add(fmt::format("va 0x{:x} rkey 0x{:x} dmalen {}", h.reth.va, h.reth.rkey, h.reth.dma_length));
  if (info.has(hdr_atomic_eth)) {
    if (info.operation == Operation::compare_swap) {
      add(fmt::format("va 0x{:x} rkey 0x{:x} swap {} compare {}", h.atomic_eth.va, h.atomic_eth.rkey,
                      h.atomic_eth.swap_add, h.atomic_eth.compare));
    } else {
      add(fmt::format("va 0x{:x} rkey 0x{:x} add {}", h.atomic_eth.va, h.atomic_eth.rkey, h.atomic_eth.swap_add));
    }
  }
  if (info.has(hdr_aeth)) {
    const Aeth& a = h.aeth;
    switch (a.kind()) {
      case AethKind::ack: add(fmt::format("ACK msn {}", a.msn)); break;
      case AethKind::rnr_nak: add(fmt::format("RNR-NAK timer {} msn {}", a.low_bits(), a.msn)); break;
      case AethKind::nak: add(fmt::format("NAK({}) msn {}", nak_code_name(a.low_bits()), a.msn)); break;
      case AethKind::reserved: add(fmt::format("AETH reserved syndrome 0x{:02x}", a.syndrome)); break;
    }
  }
  if (info.has(hdr_atomic_ack_eth)) add(fmt::format("orig {}", h.atomic_ack_eth.original));
  if (info.has(hdr_immdt)) add(fmt::format("imm 0x{:08x}", h.immdt));
  if (info.has(hdr_ieth)) add(fmt::format("inv-rkey 0x{:08x}", h.ieth));
  if (info.has_payload) add(fmt::format("len {}", r.payload.size()));
  if (info.transport == Transport::ud && h.bth.dest_qp == gsi_qpn) {
    if (auto m = read_mad_header(r.payload)) {
      const std::string_view cls = mgmt_class_name(m->mgmt_class);
      const std::string_view attr = m->mgmt_class == mgmt_class_cm ? cm_attribute_name(m->attribute_id) : "";
      add(fmt::format("MAD {} {}", cls.empty() ? fmt::format("class 0x{:02x}", m->mgmt_class) : std::string(cls),
                      attr.empty() ? fmt::format("attr 0x{:04x}", m->attribute_id) : std::string(attr)));
    }
  }
  return s;
}

std::string addresses(const Frame& f) {
  if (f.has(layer_ip)) return fmt::format("{} → {}", to_string(f.src_ip()), to_string(f.dst_ip()));
  if (f.has(layer_ethernet)) return fmt::format("{} → {}", to_string(f.eth.src), to_string(f.eth.dst));
  return "?";
}

// "PFC: pause priority 3 for 65535 quanta: 3.36 ms at 10 Gb/s, ...; resume priority 4", "PAUSE: ...".
std::string mac_control_line(const MacControl& m) {
  return fmt::format("{}: {}", m.is_pfc() ? "PFC" : m.is_pause() ? "PAUSE" : "MAC Control", describe_pause(m));
}

std::string description(const Dissection& d) {
  const Frame& f = *d.frame;
  if (!f.ok()) {
    std::string what = fmt::format("MALFORMED: {} at byte {}", to_string(f.error), f.error_offset);
    if (f.has(layer_bth)) what = fmt::format("{} {}", opcode_name(f.roce.bth().opcode), what);
    if (d.record->truncated_by_snaplen()) what += " (frame cut by the capture's snaplen)";
    const auto& tunnels = d.record->tunnels;
    if (std::any_of(tunnels.begin(), tunnels.end(), [](const Tunnel& t) { return t.truncated; })) {
      what += " (frame cut by the mirror)";
    }
    return what;
  }
  switch (f.kind) {
    case FrameKind::arp:
      if (f.arp.operation == arp_op_request) {
        return fmt::format("ARP who-has {} tell {}", to_string(IpAddress::from_v4(f.arp.target_ip)),
                           to_string(IpAddress::from_v4(f.arp.sender_ip)));
      }
      if (f.arp.operation == arp_op_reply) {
        return fmt::format("ARP {} is-at {}", to_string(IpAddress::from_v4(f.arp.sender_ip)), to_string(f.arp.sender_mac));
      }
      return fmt::format("ARP operation {}", f.arp.operation);
    case FrameKind::mac_control: return mac_control_line(f.mac_control);
    case FrameKind::other_l2: return fmt::format("ethertype 0x{:04x} (not RoCE)", f.eth.ethertype);
    case FrameKind::other_ip:
      return fmt::format("IP protocol {} (not RoCE)",
                         f.ip_version == IpVersion::v4 ? f.ipv4.protocol : f.ipv6.next_header);
    case FrameKind::other_udp: return fmt::format("UDP {} → {} (not RoCE)", f.udp.src_port, f.udp.dst_port);
    case FrameKind::roce: {
      const Bth& b = f.roce.bth();
      std::string line = fmt::format("{:<30} qp 0x{:06x} psn {:<8}", opcode_name(b.opcode), b.dest_qp, b.psn);
      const std::string keys = key_fields(f);
      if (!keys.empty()) line += " " + keys;
      line += (d.icrc_ok && *d.icrc_ok) ? "  ICRC ok" : "  ICRC BAD";
      return line;
    }
    case FrameKind::unknown: break;
  }
  return "unknown frame";
}

void render_tree(const Field& field, int depth, std::string& out) {
  out.append(size_t(depth) * 4, ' ');
  out += field.label;
  if (field.children.empty()) {
    out += ": ";
    out += field.display;
  }
  out += '\n';
  for (const Field& c : field.children) render_tree(c, depth + 1, out);
}

nlohmann::ordered_json field_json(const Field& field) {
  if (field.children.empty()) return field.value;
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  for (const Field& c : field.children) obj[c.key] = field_json(c);
  return obj;
}

}  // namespace

// A mirrored or tunnelled frame's line is the carried frame's, with how it came at the end.
std::string summary_line(const Dissection& d) {
  std::string line =
      fmt::format("{:>6} {:>11.6f}  {}  {}", d.record->number, d.time, addresses(*d.frame), description(d));
  if (!d.record->tunnels.empty()) {
    const std::string copy = d.record->copy_of ? fmt::format(", a copy of #{}", d.record->copy_of) : "";
    line += fmt::format("  [{}{}]", tunnels_tag(d.record->tunnels), copy);
  }
  return line;
}

std::string field_tree(const Dissection& d) {
  std::string out;
  for (const Field& l : d.layers) render_tree(l, 0, out);
  return out;
}

nlohmann::ordered_json to_json(const Dissection& d) {
  nlohmann::ordered_json obj = nlohmann::ordered_json::object();
  for (const Field& l : d.layers) obj[l.key] = field_json(l);
  return obj;
}

}  // namespace uroce::pcap_tools
