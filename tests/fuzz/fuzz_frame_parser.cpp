// libFuzzer target: arbitrary bytes through the frame parser, the tunnel finder (ERSPAN, GRE, VXLAN: the
// carried frame is parsed too), the mirror copy finder, the ICRC, the dissector and its three renderings.
// Beyond "no crash, no UB, no leak" (the sanitizers), it checks two properties: a RoCEv2 frame that parses
// with valid checksums is rebuilt byte for byte by the builder from its parsed fields (and a PAUSE or PFC
// frame by write_mac_control), and a frame seen twice through one tunnel is never a mirror copy.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "pcap_tools/dissection.hpp"
#include "pcap_tools/mirror_copies.hpp"
#include "pcap_tools/render.hpp"
#include "transport/wire/build.hpp"
#include "transport/wire/frame.hpp"

using namespace uroce;

namespace {

// The dissector over the frame and, when it carries one in a tunnel (ERSPAN, GRE, VXLAN), the frame inside.
void exercise_dissector(std::span<const uint8_t> bytes, wire::Frame f) {
  pcap_tools::Record record;
  record.number = 1;
  record.wire_length = uint32_t(bytes.size());
  record.bytes = bytes;
  pcap_tools::look_through_tunnel(record, f);
  // The same frame twice through the same tunnel: sent again, not a mirror copy.
  pcap_tools::MirrorCopies copies;
  if (copies.copy_of(record, f) != 0) std::abort();
  record.number = 2;
  if (copies.copy_of(record, f) != 0) std::abort();
  const pcap_tools::Dissection d = pcap_tools::dissect(record, f, 0);
  volatile size_t sink = pcap_tools::summary_line(d).size() + pcap_tools::field_tree(d).size() + pcap_tools::to_json(d).dump().size();
  (void)sink;
}

void check_rebuild(const wire::Frame& f) {
  if (!f.is_roce() || !wire::icrc_ok(f) || f.udp.checksum != 0) return;
  if (f.ip_version == wire::IpVersion::v4) {
    const uint8_t* ip = f.bytes.data() + f.l3_offset;
    if (!f.ipv4.checksum_ok || f.ipv4.header_length != 20 || (ip[6] & 0x80) != 0) return;
  }
  const wire::FrameSpec spec = wire::spec_from_frame(f);
  std::vector<uint8_t> out(f.end_offset + 64);
  const wire::BuildResult r = wire::build_frame(spec, out);
  if (!r.ok() || r.size != f.end_offset || std::memcmp(out.data(), f.bytes.data(), r.size) != 0) {
    std::abort();  // the builder disagrees with the parser on a valid frame
  }
}

// A PAUSE or PFC frame that parses is written back to the same body bytes.
void check_mac_control_rebuild(const wire::Frame& f) {
  if (!f.ok() || f.kind != wire::FrameKind::mac_control) return;
  uint8_t body[wire::pfc_body_size];
  const size_t n = wire::write_mac_control(body, f.mac_control);
  if (n != wire::mac_control_body_size(f.mac_control.opcode) || f.l3_offset + n != f.end_offset ||
      std::memcmp(body, f.bytes.data() + f.l3_offset, n) != 0) {
    std::abort();  // the writer disagrees with the parser
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  wire::Frame f;
  wire::parse_frame(bytes, f);
  exercise_dissector(bytes, f);
  check_rebuild(f);
  check_mac_control_rebuild(f);
  // The same bytes as a frame without link layer (raw IP and cooked captures take this path).
  wire::parse_l3(wire::ethertype_ipv4, bytes, f);
  exercise_dissector(bytes, f);
  wire::parse_l3(wire::ethertype_ipv6, bytes, f);
  exercise_dissector(bytes, f);
  return 0;
}
