// The ARP frames the NIC sends, built into a caller's buffer (an mbuf's data room, typically) so that
// sending one costs no allocation.
//
// Frames are not padded to the 60-byte Ethernet minimum: the port pads short frames on transmit (NIC
// hardware does; af_packet and memif need none), as Linux also hands 42-byte ARP frames to its drivers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "transport/wire/address.hpp"
#include "transport/wire/ethernet.hpp"

namespace uroce::emulator::net {

// Ethernet header (with the tag when there is one) + the 28-byte IPv4 ARP body.
constexpr size_t arp_frame_size(bool vlan) {
  return wire::ethernet_header_size + (vlan ? wire::vlan_tag_size : 0) + wire::arp_ipv4_size;
}
inline constexpr size_t max_arp_frame_size = arp_frame_size(true);

// Writes an Ethernet frame carrying `arp`; returns its size, or 0 if `out` is too small.
size_t write_arp_frame(std::span<uint8_t> out, const wire::MacAddress& eth_dst, const wire::MacAddress& eth_src,
                       std::optional<uint16_t> vlan_tci, const wire::ArpPacket& arp);

// "Who has target_ip? Tell sender_ip": broadcast to resolve, or unicast to `eth_dst` to re-check a known
// entry before it expires (as Linux's probes do).
size_t write_arp_request(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t sender_ip,
                         uint32_t target_ip, std::optional<uint16_t> vlan_tci,
                         const wire::MacAddress& eth_dst = wire::MacAddress::broadcast());

// The answer to `request` (which asked for one of our addresses): sent to the requester's hardware address
// from the ARP body, carrying the request frame's VLAN tag.
size_t write_arp_reply(std::span<uint8_t> out, const wire::ArpPacket& request, const wire::MacAddress& our_mac,
                       std::optional<uint16_t> vlan_tci);

// Announces that `ip` is at `our_mac`, at start-up or after a MAC change: a broadcast request with sender and
// target both `ip` (RFC 5227 ARP announcement), which every neighbour uses to update an entry it holds.
size_t write_gratuitous_arp(std::span<uint8_t> out, const wire::MacAddress& our_mac, uint32_t ip,
                            std::optional<uint16_t> vlan_tci);

}  // namespace uroce::emulator::net
