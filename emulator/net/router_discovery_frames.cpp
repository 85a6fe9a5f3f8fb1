#include "emulator/net/router_discovery_frames.hpp"

#include <cstring>

#include "emulator/net/ethernet_out.hpp"
#include "emulator/net/nd_frames.hpp"
#include "transport/wire/bytes.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::emulator::net {

namespace {

constexpr size_t prefix_option_size = 32;
constexpr uint8_t prefix_flag_on_link = 0x80;
constexpr uint8_t prefix_flag_autonomous = 0x40;

// The Prefix Information option at `o` (32 bytes, RFC 4861 §4.6.2); nothing if its prefix length is over
// 128. Bits past the prefix length are cleared: a router may leave garbage there (§4.6.2 says ignore it).
std::optional<AdvertisedPrefix> read_prefix(const uint8_t* o) {
  AdvertisedPrefix p;
  p.length = o[2];
  if (p.length > 128) return std::nullopt;
  p.on_link = o[3] & prefix_flag_on_link;
  p.autonomous = o[3] & prefix_flag_autonomous;
  p.valid_lifetime = wire::load_be32(o + 4);
  p.preferred_lifetime = wire::load_be32(o + 8);
  std::array<uint8_t, 16> bytes{};
  std::memcpy(bytes.data(), o + 16, 16);
  for (unsigned bit = p.length; bit < 128; ++bit) bytes[bit / 8] &= uint8_t(~(0x80u >> (bit % 8)));
  p.prefix = wire::IpAddress::from_v6_bytes(bytes.data());
  return p;
}

}  // namespace

bool is_router_discovery_type(uint8_t type) {
  return type == icmpv6_router_solicitation || type == icmpv6_router_advertisement;
}

wire::IpAddress all_routers_address() {
  const uint8_t a[16] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02};
  return wire::IpAddress::from_v6_bytes(a);
}

std::optional<DropReason> parse_router_advertisement(const wire::IpAddress& src, const wire::IpAddress& dst,
                                                     uint8_t hop_limit, const uint8_t* icmp, size_t length,
                                                     RouterAdvertisement& out) {
  if (length < 8) return DropReason::truncated_icmp;
  // Solicitations are for routers; a host ignores them (RFC 4861 §6.2.6 is a router's behaviour).
  if (icmp[0] != icmpv6_router_advertisement) return DropReason::other_icmpv6_type;
  if (icmpv6_checksum(src, dst, icmp, length) != 0) return DropReason::bad_icmp_checksum;
  if (hop_limit != nd_hop_limit || !is_link_local(src) || icmp[1] != 0 || length < router_advertisement_min_size) {
    return DropReason::bad_router_advertisement;
  }
  RouterAdvertisement ra;
  ra.router = src;
  ra.router_lifetime = wire::load_be16(icmp + 6);
  for (size_t at = router_advertisement_min_size; at < length;) {
    if (length - at < 2) return DropReason::bad_router_advertisement;
    const size_t option_length = size_t(icmp[at + 1]) * 8;
    if (option_length == 0 || option_length > length - at) return DropReason::bad_router_advertisement;
    const uint8_t* o = icmp + at;
    // Options of a length we do not expect (a link-layer option other than Ethernet's 8 bytes, RFC 2464 §6)
    // and options we do not know are skipped (§4.6), the first of each kind is taken.
    if (o[0] == nd_option_source_lladdr && option_length == nd_lladdr_option_size && !ra.router_mac) {
      wire::MacAddress mac;
      std::memcpy(mac.bytes.data(), o + 2, 6);
      ra.router_mac = mac;
    } else if (o[0] == nd_option_mtu && option_length == 8 && !ra.mtu) {
      ra.mtu = wire::load_be32(o + 4);
    } else if (o[0] == nd_option_prefix_information && option_length == prefix_option_size &&
               ra.prefixes.size() < max_advertised_prefixes) {
      if (const auto p = read_prefix(o)) ra.prefixes.push_back(*p);
    }
    at += option_length;
  }
  out = std::move(ra);
  return std::nullopt;
}

size_t write_router_solicitation(std::span<uint8_t> out, const wire::MacAddress& our_mac, const wire::IpAddress& src,
                                 std::optional<uint16_t> vlan_tci) {
  const wire::IpAddress dst = all_routers_address();
  const size_t l3 = wire::ethernet_header_size + (vlan_tci ? wire::vlan_tag_size : 0);
  const size_t size = l3 + wire::ipv6_header_size + router_solicitation_size;
  if (out.size() < size) return 0;
  write_ethernet_out(out.data(), multicast_mac(dst), our_mac, vlan_tci, wire::ethertype_ipv6);
  wire::Ipv6Header ip;
  ip.payload_length = uint16_t(router_solicitation_size);
  ip.next_header = ip_proto_icmpv6;
  ip.hop_limit = nd_hop_limit;
  ip.src = src;
  ip.dst = dst;
  wire::write_ipv6(out.data() + l3, ip);
  uint8_t* icmp = out.data() + l3 + wire::ipv6_header_size;
  std::memset(icmp, 0, router_solicitation_size);
  icmp[0] = icmpv6_router_solicitation;
  icmp[8] = nd_option_source_lladdr;
  icmp[9] = 1;
  std::memcpy(icmp + 10, our_mac.bytes.data(), 6);
  wire::store_be16(icmp + 2, icmpv6_checksum(src, dst, icmp, router_solicitation_size));
  return size;
}

}  // namespace uroce::emulator::net
