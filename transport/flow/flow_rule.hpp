// Flow steering rules (ibv_create_flow): which received Ethernet frames a raw packet QP takes.
//
// A rule is what struct ibv_flow_attr and its specs say, held as plain fields: an attribute type, a
// priority, flags and a list of specs, each a value and a mask per field. A frame matches a spec when every
// field, masked, equals the value masked, as a NIC's flow table compares them (mlx5's match criteria). Specs
// imply what they stand on, as mlx5 adds it to the match: an IPv4 spec matches only IPv4 frames (EtherType
// 0x0800 after an optional 802.1Q tag), an IPv6 spec only IPv6, a TCP or UDP spec only that IP protocol
// (IPv4 protocol or IPv6 next header; extension headers are not walked). An ETH spec's ether_type is the
// type after the tag; a vlan_tag with a mask matches only tagged frames.
//
// Numbers are in host order here; addresses are the bytes as on the wire. No I/O: the daemon's engine
// (emulator/engine) and the transport (transport/flow/flow_table.hpp) ask, nothing here keeps state.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "transport/wire/address.hpp"

namespace uroce::transport::flow {

// enum ibv_flow_attr_type.
enum class AttrType : uint8_t {
  normal = 0,       // the specs decide
  all_default = 1,  // every frame no other rule (and nothing in the port's own stack) takes
  mc_default = 2,   // the same, multicast frames only
  sniffer = 3,      // a copy of every frame the port receives or sends
};

// enum ibv_flow_flags.
inline constexpr uint32_t flag_dont_trap = 1u << 1;  // deliver, and let the frame go on to others as well
inline constexpr uint32_t flag_egress = 1u << 2;     // a rule on sent frames (not supported)

struct EthSpec {
  wire::MacAddress dst, dst_mask;
  wire::MacAddress src, src_mask;
  uint16_t ether_type = 0, ether_type_mask = 0;
  uint16_t vlan_tag = 0, vlan_tag_mask = 0;  // the whole TCI (PCP, DEI, VID)
};

// IBV_FLOW_SPEC_IPV4 is this with only the addresses' masks set; IBV_FLOW_SPEC_IPV4_EXT sets the rest too.
struct Ipv4Spec {
  uint32_t src = 0, src_mask = 0;  // host order
  uint32_t dst = 0, dst_mask = 0;
  uint8_t proto = 0, proto_mask = 0;
  uint8_t tos = 0, tos_mask = 0;      // the whole TOS byte (DSCP and ECN)
  uint8_t ttl = 0, ttl_mask = 0;
  uint8_t flags = 0, flags_mask = 0;  // the three flag bits (reserved, DF, MF) as a number 0-7
};

struct Ipv6Spec {
  std::array<uint8_t, 16> src{}, src_mask{};
  std::array<uint8_t, 16> dst{}, dst_mask{};
  uint32_t flow_label = 0, flow_label_mask = 0;  // 20 bits
  uint8_t next_hdr = 0, next_hdr_mask = 0;
  uint8_t traffic_class = 0, traffic_class_mask = 0;
  uint8_t hop_limit = 0, hop_limit_mask = 0;
};

// IBV_FLOW_SPEC_TCP and IBV_FLOW_SPEC_UDP.
struct L4Spec {
  uint8_t protocol = 0;  // 6 (TCP) or 17 (UDP)
  uint16_t dst_port = 0, dst_port_mask = 0;
  uint16_t src_port = 0, src_port_mask = 0;
};

struct Spec {
  enum class Kind : uint8_t { eth, ipv4, ipv6, l4 } kind = Kind::eth;
  EthSpec eth;
  Ipv4Spec ipv4;
  Ipv6Spec ipv6;
  L4Spec l4;
};

struct FlowRule {
  AttrType type = AttrType::normal;
  uint16_t priority = 0;  // lower is stronger
  uint32_t flags = 0;     // flag_dont_trap
  bool drop = false;      // IBV_FLOW_SPEC_ACTION_DROP: matching frames are dropped instead of delivered
  std::vector<Spec> specs;
};

// Whether `frame` (a whole Ethernet frame, any length, any bytes) matches every spec of `rule`. Total: never
// reads outside `frame`; a frame too short for a field a spec needs does not match. For a normal rule only:
// the other types match by what they are (the flow table decides).
bool matches(const FlowRule& rule, std::span<const uint8_t> frame);
bool matches(const Spec& spec, std::span<const uint8_t> frame);

}  // namespace uroce::transport::flow
