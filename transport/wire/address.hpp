// Link and network addresses as they appear on the wire, plus their usual text forms.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "transport/wire/bytes.hpp"

namespace uroce::wire {

// The first 12 bytes of a v4-mapped IPv6 address, ::ffff:a.b.c.d.
inline constexpr uint8_t v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

struct MacAddress {
  std::array<uint8_t, 6> bytes{};
  friend bool operator==(const MacAddress&, const MacAddress&) = default;
  static constexpr MacAddress broadcast() { return {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}; }
};

// An IP address of either family. IPv4 addresses are held as v4-mapped IPv6 (::ffff:a.b.c.d), which is
// exactly the RoCEv2 GID of that address, so a GID and an IP address are the same type.
struct IpAddress {
  std::array<uint8_t, 16> bytes{};

  static IpAddress from_v4(uint32_t host_order);
  static IpAddress from_v4_bytes(const uint8_t* p);
  static IpAddress from_v6_bytes(const uint8_t* p);
  // Inline: every transmitted packet asks both (frame_spec_for picks IPv4 or IPv6 per packet).
  bool is_v4() const { return std::memcmp(bytes.data(), v4_mapped_prefix, 12) == 0; }  // v4-mapped
  uint32_t v4() const { return load_be32(bytes.data() + 12); }  // host order; only meaningful when is_v4()
  // A group address: ff00::/8, or v4-mapped 224.0.0.0/4 (the kernel's rdma_is_multicast_addr).
  bool is_multicast() const;
  // The all-zero address (::): what an empty GID table entry reads as.
  bool is_zero() const { return *this == IpAddress{}; }
  friend bool operator==(const IpAddress&, const IpAddress&) = default;
};

std::string to_string(const MacAddress& mac);
std::string to_string(const IpAddress& ip);  // dotted quad for v4-mapped, RFC 5952 text otherwise
std::string gid_string(const IpAddress& ip);  // always the IPv6 form, as GIDs are printed
std::optional<MacAddress> parse_mac(std::string_view text);
std::optional<IpAddress> parse_ip(std::string_view text);  // accepts "10.0.0.1" and IPv6 text

}  // namespace uroce::wire
