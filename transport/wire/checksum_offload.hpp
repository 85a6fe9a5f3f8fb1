// Checksum offload for raw Ethernet frames (IBV_SEND_IP_CSUM on a raw packet QP), as a NIC does it on the
// way out: the IPv4 header checksum, and the TCP or UDP checksum over its pseudo-header (IPv4 or IPv6),
// written into the frame. Also the receive side's check (IBV_WC_IP_CSUM_OK).
#pragma once

#include <cstdint>
#include <span>

namespace uroce::wire {

// Fills in the checksums of an Ethernet frame (optional 802.1Q tag) in place: an IPv4 header's, and a TCP
// or UDP header's directly after the IP header (IPv4, or IPv6 without extension headers), computed over
// the L4 length the IP header gives. A UDP checksum that computes to 0 is sent as 0xFFFF (RFC 768).
// Anything else (ARP, fragments after the first, a truncated or inconsistent header) is left as it is:
// a NIC sends such frames unchanged. Total: any bytes, any length; never writes outside `frame`.
void offload_checksums(std::span<uint8_t> frame);

// Whether the frame is IPv4 with a valid header checksum and a TCP or UDP segment whose checksum is valid
// (a UDP checksum of 0, "none", counts as valid): what a NIC reports as IBV_WC_IP_CSUM_OK. False for
// anything else, IPv6 included (ConnectX reports the flag for IPv4 only). Total, as above.
bool ipv4_checksums_ok(std::span<const uint8_t> frame);

}  // namespace uroce::wire
