// Receive side scaling (ibv_create_qp_ex with IBV_QP_INIT_ATTR_RX_HASH): which receive work queue of an
// indirection table a frame goes to. The Toeplitz hash of Microsoft's RSS specification over the fields
// the QP selects (enum ibv_rx_hash_fields), taken from the frame in the specification's order: source
// address, destination address, source port, destination port. A frame that lacks a selected field (an IPv6
// frame for IPv4 fields, a fragment or another protocol for ports) hashes over the fields it has: that is
// what a NIC's hash over a packet of another type comes to. The table entry is hash mod table size.
#pragma once

#include <cstdint>
#include <span>

namespace uroce::transport::flow {

// enum ibv_rx_hash_fields.
inline constexpr uint64_t hash_src_ipv4 = 1u << 0;
inline constexpr uint64_t hash_dst_ipv4 = 1u << 1;
inline constexpr uint64_t hash_src_ipv6 = 1u << 2;
inline constexpr uint64_t hash_dst_ipv6 = 1u << 3;
inline constexpr uint64_t hash_src_port_tcp = 1u << 4;
inline constexpr uint64_t hash_dst_port_tcp = 1u << 5;
inline constexpr uint64_t hash_src_port_udp = 1u << 6;
inline constexpr uint64_t hash_dst_port_udp = 1u << 7;
inline constexpr uint64_t hash_known_fields = 0xff;  // IPSEC_SPI and INNER are not supported

// The Toeplitz hash of `input` under `key` (which must be at least input.size() + 4 bytes; a shorter key is
// treated as padded with zeros).
uint32_t toeplitz_hash(std::span<const uint8_t> key, std::span<const uint8_t> input);

// The hash of a whole Ethernet frame (optional 802.1Q tag) over the fields `fields` selects. Total: any
// bytes, any length; never reads outside `frame`.
uint32_t rss_hash(std::span<const uint8_t> key, uint64_t fields, std::span<const uint8_t> frame);

}  // namespace uroce::transport::flow
