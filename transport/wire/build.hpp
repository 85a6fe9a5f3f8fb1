// Building RoCEv2 frames: the builder owns every derived field (ethertype, IP and UDP lengths, IPv4
// header checksum, BTH pad count, pad bytes, ICRC) so callers only say what the packet means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/wire/bth.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/icrc.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::wire {

struct FrameSpec {
  EthernetHeader eth;  // dst, src, optional VLAN; the ethertype follows ip_version
  IpVersion ip_version = IpVersion::v4;
  Ipv4Header ipv4;     // src, dst, tos, ttl, identification, dont_fragment are used
  Ipv6Header ipv6;     // src, dst, traffic_class, flow_label, hop_limit are used
  uint16_t udp_src_port = 0xc000;
  TransportHeaders headers;  // bth.pad_count is computed from the payload
  std::span<const uint8_t> payload;
};

enum class BuildError : uint8_t {
  none,
  unknown_opcode,       // bth.opcode is not in the opcode table
  payload_not_allowed,  // a payload on an opcode that carries none
  unaligned_payload,    // a FIRST or MIDDLE packet whose payload is not a multiple of 4 (it would need a pad)
  too_large,            // the IP packet would exceed 65535 bytes
  buffer_too_small,
};

std::string_view to_string(BuildError e);

struct BuildResult {
  BuildError error = BuildError::none;
  size_t size = 0;  // bytes written (the frame, without FCS and without Ethernet minimum-size padding)
  bool ok() const { return error == BuildError::none; }
};

// Pad bytes that round a payload of `len` bytes up to a multiple of 4.
constexpr unsigned pad_for(size_t len) { return unsigned(-len & 3); }

// Size of the frame build_frame() would write for `spec`.
size_t frame_size(const FrameSpec& spec);

BuildResult build_frame(const FrameSpec& spec, std::span<uint8_t> out);

struct Frame;
// The spec that rebuilds a parsed RoCEv2 frame (frame.is_roce()): building it gives back the same bytes
// whenever the original had a valid IPv4 header checksum and ICRC, no IPv4 options, a UDP checksum of 0
// and the reserved IPv4 flag clear. `uroce replay` edits such specs; the fuzz target checks the promise.
FrameSpec spec_from_frame(const Frame& frame);

}  // namespace uroce::wire
