// IPv6 router discovery (RFC 4861 §4.1, §4.2, §6) on the wire: the Router Solicitation a host sends when
// its interface comes up, and the Router Advertisement it learns its default routers and on-link prefixes
// from, with the validity checks of §6.1.2. What router_discovery.hpp does with them is kept apart, as
// nd_frames.hpp is from nd_cache.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "emulator/net/drop_reason.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

inline constexpr uint8_t icmpv6_router_solicitation = 133;
inline constexpr uint8_t icmpv6_router_advertisement = 134;
inline constexpr uint8_t nd_option_prefix_information = 3;
inline constexpr uint8_t nd_option_mtu = 5;
inline constexpr size_t router_advertisement_min_size = 16;  // type .. retrans timer
inline constexpr size_t router_solicitation_size = 8 + 8;     // header, source link-layer option
// An advertisement names at most this many prefixes that we keep (more are ignored, not an error: the
// message stays valid). Routers advertise one or two.
inline constexpr size_t max_advertised_prefixes = 8;

struct AdvertisedPrefix {
  wire::IpAddress prefix;      // the prefix's bits, the rest zero
  uint8_t length = 0;          // 0..128
  bool on_link = false;        // the L flag: addresses under it are reached directly, not through a router
  bool autonomous = false;     // the A flag: hosts may form an address under it (SLAAC, RFC 4862)
  uint32_t valid_lifetime = 0; // seconds; 0xffffffff = forever
  uint32_t preferred_lifetime = 0;  // seconds an address formed under it stays preferred; 0xffffffff = forever
};

struct RouterAdvertisement {
  wire::IpAddress router;                        // the IP source: the router's link-local address
  uint16_t router_lifetime = 0;                  // seconds as a default router; 0: not a default router
  std::optional<wire::MacAddress> router_mac;    // its source link-layer address option
  std::optional<uint32_t> mtu;                   // the MTU option
  std::vector<AdvertisedPrefix> prefixes;        // Prefix Information options (at most max_advertised_prefixes)
};

bool is_router_discovery_type(uint8_t icmpv6_type);

// Parses and validates the ICMPv6 message [icmp, icmp + length) of an IPv6 packet from `src` to `dst` with
// `hop_limit`, as RFC 4861 §6.1.2 says for an advertisement: source link-local, hop limit 255, checksum,
// code 0, at least 16 bytes, every option of nonzero length and within the message; a Prefix Information
// option must be 32 bytes with a prefix length of at most 128 (else it is skipped, as §6.3.4 says of
// options that do not make sense). A Router Solicitation is dropped as not for a host (§6.2.6 is a router's
// job). Never reads outside the message.
std::optional<DropReason> parse_router_advertisement(const wire::IpAddress& src, const wire::IpAddress& dst,
                                                     uint8_t hop_limit, const uint8_t* icmp, size_t length,
                                                     RouterAdvertisement& out);

// A Router Solicitation from `src` (our link-local address) to all-routers (ff02::2), with our MAC as its
// source link-layer option (§4.1). Returns its size, or 0 if `out` is too small.
size_t write_router_solicitation(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src,
                                 std::optional<uint16_t> vlan_tci);

wire::IpAddress all_routers_address();  // ff02::2

}  // namespace uroce::emulator::net
