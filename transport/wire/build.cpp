#include "transport/wire/build.hpp"

#include <cstring>

#include "transport/wire/crc32.hpp"
#include "transport/wire/crc32_copy.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::wire {

std::string_view to_string(BuildError e) {
  switch (e) {
    case BuildError::none: return "no error";
    case BuildError::unknown_opcode: return "unknown opcode";
    case BuildError::payload_not_allowed: return "payload on an opcode that carries none";
    case BuildError::unaligned_payload: return "FIRST/MIDDLE payload that is not a multiple of 4";
    case BuildError::too_large: return "packet larger than 65535 bytes";
    case BuildError::buffer_too_small: return "output buffer too small";
  }
  return "unknown error";
}

namespace {

// From this payload size on, the payload is CRC'd while it is copied into the frame (crc32_copy.hpp). Below
// it, a packet of at most about 256 bytes costs less as one masked copy and one CRC call (icrc.cpp).
constexpr size_t min_payload_copied_with_crc = 256;

size_t ip_header_size(IpVersion v) { return v == IpVersion::v4 ? ipv4_min_header_size : ipv6_header_size; }

// Bytes from the UDP header to the end of the ICRC.
size_t udp_length(const FrameSpec& s, const OpcodeInfo& info) {
  return udp_header_size + bth_size + info.headers_length + s.payload.size() + pad_for(s.payload.size()) +
         icrc_size;
}

}  // namespace

size_t frame_size(const FrameSpec& s) {
  const OpcodeInfo& info = opcode_info(s.headers.bth.opcode);
  EthernetHeader eth = s.eth;
  return eth.size() + ip_header_size(s.ip_version) + udp_length(s, info);
}

BuildResult build_frame(const FrameSpec& s, std::span<uint8_t> out) {
  const OpcodeInfo& info = opcode_info(s.headers.bth.opcode);
  if (!info.valid()) return {BuildError::unknown_opcode, 0};
  if (!info.has_payload && !s.payload.empty()) return {BuildError::payload_not_allowed, 0};
  // FIRST and MIDDLE packets carry a whole path MTU: a pad there is malformed (the parser says so too).
  if ((info.position == Position::first || info.position == Position::middle) && pad_for(s.payload.size()) != 0) {
    return {BuildError::unaligned_payload, 0};
  }
  const size_t ip_len = ip_header_size(s.ip_version);
  const size_t udp_len = udp_length(s, info);
  if (udp_len + ip_len > 0xffff) return {BuildError::too_large, 0};
  const size_t total = s.eth.size() + ip_len + udp_len;
  if (out.size() < total) return {BuildError::buffer_too_small, 0};

  uint8_t* p = out.data();
  EthernetHeader eth = s.eth;
  eth.ethertype = s.ip_version == IpVersion::v4 ? ethertype_ipv4 : ethertype_ipv6;
  const size_t l3 = write_ethernet(p, eth);

  if (s.ip_version == IpVersion::v4) {
    Ipv4Header ip = s.ipv4;
    ip.total_length = uint16_t(ipv4_min_header_size + udp_len);
    ip.protocol = ip_proto_udp;
    ip.more_fragments = false;
    ip.fragment_offset = 0;
    write_ipv4(p + l3, ip);
  } else {
    Ipv6Header ip = s.ipv6;
    ip.payload_length = uint16_t(udp_len);
    ip.next_header = ip_proto_udp;
    write_ipv6(p + l3, ip);
  }

  const size_t l4 = l3 + ip_len;
  UdpHeader udp;
  udp.src_port = s.udp_src_port;
  udp.dst_port = roce_v2_udp_port;
  udp.length = uint16_t(udp_len);
  udp.checksum = 0;  // RoCEv2: the ICRC protects the packet; senders put 0 here
  write_udp(p + l4, udp);

  const size_t bth_off = l4 + udp_header_size;
  Bth bth = s.headers.bth;
  const unsigned pad = pad_for(s.payload.size());
  bth.pad_count = uint8_t(pad);
  write_bth(p + bth_off, bth);
  size_t off = bth_off + bth_size;
  off += write_extension_headers(p + off, info.headers, s.headers);
  uint32_t icrc;
  if (s.payload.size() >= min_payload_copied_with_crc) {
    // The headers' ICRC, then the payload CRC'd as it is copied in: one pass over it, not two.
    icrc = compute_icrc(std::span<const uint8_t>(p + l3, off - l3), s.ip_version, ip_len);
    icrc = crc32_copy(icrc, p + off, s.payload.data(), s.payload.size());
    off += s.payload.size();
    std::memset(p + off, 0, pad);
    if (pad != 0) icrc = crc32_update(icrc, p + off, pad);
    off += pad;
  } else {
    // Short packets are CRC'd whole in one call (compute_icrc copies them masked anyway).
    if (!s.payload.empty()) std::memcpy(p + off, s.payload.data(), s.payload.size());
    off += s.payload.size();
    std::memset(p + off, 0, pad);
    off += pad;
    icrc = compute_icrc(std::span<const uint8_t>(p + l3, off - l3), s.ip_version, ip_len);
  }
  store_icrc(p + off, icrc);
  return {BuildError::none, off + icrc_size};
}

FrameSpec spec_from_frame(const Frame& f) {
  FrameSpec s;
  s.eth = f.eth;
  s.ip_version = f.ip_version;
  s.ipv4 = f.ipv4;
  s.ipv6 = f.ipv6;
  s.udp_src_port = f.udp.src_port;
  s.headers = f.roce.headers;
  s.payload = f.roce.payload;
  return s;
}

}  // namespace uroce::wire
