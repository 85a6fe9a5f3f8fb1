// A parsed frame: a view over the caller's bytes plus every decoded header.
//
// parse_frame() is total: for any byte string it returns either ParseError::none with a fully decoded
// frame, or a precise error with error_offset and everything decoded before the error (so a dissector can
// still print the addresses of a malformed packet). It never reads outside the given bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "transport/wire/bth.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/icrc.hpp"
#include "transport/wire/ip.hpp"
#include "transport/wire/mac_control.hpp"
#include "transport/wire/parse_error.hpp"

namespace uroce::wire {

// What the frame turned out to be, as far as parsing got.
enum class FrameKind : uint8_t {
  unknown,      // nothing decoded (error in the first header)
  other_l2,     // Ethernet with an ethertype that is none of ARP/IPv4/IPv6/MAC Control
  arp,
  mac_control,  // PAUSE or PFC (or another MAC Control opcode, decoded no further)
  other_ip,     // IP but not UDP (ICMP, TCP, ...)
  other_udp,    // UDP to a port other than 4791
  roce,         // RoCEv2: UDP to 4791
};

struct RocePacket {
  TransportHeaders headers;
  const OpcodeInfo* info = nullptr;    // opcode_info(headers.bth.opcode)
  std::span<const uint8_t> payload;    // excluding pad and ICRC
  uint32_t icrc = 0;                   // as found on the wire

  const Bth& bth() const { return headers.bth; }
};

// Layers the parser decoded completely (Frame::decoded). A dissector shows exactly these, so a malformed
// frame never displays fields that were not read from it.
enum LayerBits : uint8_t {
  layer_ethernet = 1u << 0,
  layer_arp = 1u << 1,
  layer_ip = 1u << 2,
  layer_udp = 1u << 3,
  layer_bth = 1u << 4,
  layer_transport = 1u << 5,  // the extension headers, payload, pad and ICRC
  layer_mac_control = 1u << 6,
};

struct Frame {
  FrameKind kind = FrameKind::unknown;
  uint8_t decoded = 0;  // LayerBits
  ParseError error = ParseError::none;
  size_t error_offset = 0;  // byte offset in `bytes` where the error was detected

  std::span<const uint8_t> bytes;  // the whole input
  EthernetHeader eth;
  ArpPacket arp;
  MacControl mac_control;
  IpVersion ip_version = IpVersion::v4;
  Ipv4Header ipv4;
  Ipv6Header ipv6;
  UdpHeader udp;
  RocePacket roce;

  size_t l3_offset = 0;   // IP (or ARP) header
  size_t l4_offset = 0;   // UDP header
  size_t bth_offset = 0;
  size_t end_offset = 0;  // one past the last byte of the IP packet; Ethernet padding/FCS lie beyond

  bool ok() const { return error == ParseError::none; }
  bool has(LayerBits l) const { return (decoded & l) != 0; }
  bool is_roce() const { return kind == FrameKind::roce && ok(); }
  IpAddress src_ip() const { return ip_version == IpVersion::v4 ? IpAddress::from_v4(ipv4.src) : ipv6.src; }
  IpAddress dst_ip() const { return ip_version == IpVersion::v4 ? IpAddress::from_v4(ipv4.dst) : ipv6.dst; }
  Ecn ecn() const { return ip_version == IpVersion::v4 ? ipv4.ecn() : ipv6.ecn(); }
};

// Parses an Ethernet frame (optionally 802.1Q tagged).
ParseError parse_frame(std::span<const uint8_t> bytes, Frame& out);

// Parses a frame whose link layer has already been removed (raw IP captures, Linux cooked captures):
// `bytes` starts at the L3 header named by `ethertype`.
ParseError parse_l3(uint16_t ethertype, std::span<const uint8_t> bytes, Frame& out);

// ICRC of a parsed RoCEv2 frame, recomputed over its bytes; and whether it matches the one on the wire.
uint32_t compute_icrc(const Frame& f);
bool icrc_ok(const Frame& f);

// compute_icrc(f), while copying the payload (f.roce.payload, without pad) to `dst` in the same pass: a
// receiver that has decided where the payload goes reads it once instead of twice (qp/early_placement).
uint32_t compute_icrc_copying_payload(const Frame& f, uint8_t* dst);

}  // namespace uroce::wire
