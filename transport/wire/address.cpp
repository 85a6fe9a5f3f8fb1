#include "transport/wire/address.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <cstdio>
#include <cstring>

#include "transport/wire/bytes.hpp"

namespace uroce::wire {

IpAddress IpAddress::from_v4(uint32_t host_order) {
  IpAddress a;
  std::memcpy(a.bytes.data(), v4_mapped_prefix, 12);
  store_be32(a.bytes.data() + 12, host_order);
  return a;
}

IpAddress IpAddress::from_v4_bytes(const uint8_t* p) { return from_v4(load_be32(p)); }

IpAddress IpAddress::from_v6_bytes(const uint8_t* p) {
  IpAddress a;
  std::memcpy(a.bytes.data(), p, 16);
  return a;
}

bool IpAddress::is_multicast() const {
  if (bytes[0] == 0xff) return true;
  return is_v4() && (bytes[12] & 0xf0) == 0xe0;
}

std::string to_string(const MacAddress& mac) {
  char buf[18];
  std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", mac.bytes[0], mac.bytes[1],
                mac.bytes[2], mac.bytes[3], mac.bytes[4], mac.bytes[5]);
  return buf;
}

std::string to_string(const IpAddress& ip) {
  char buf[INET6_ADDRSTRLEN];
  if (ip.is_v4()) {
    inet_ntop(AF_INET, ip.bytes.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, ip.bytes.data(), buf, sizeof buf);
  }
  return buf;
}

std::string gid_string(const IpAddress& ip) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, ip.bytes.data(), buf, sizeof buf);
  return buf;
}

std::optional<MacAddress> parse_mac(std::string_view text) {
  // sscanf's %x would also accept a sign, a "0x" prefix and leading spaces ("-1:..." gave ff:...).
  for (char c : text) {
    if (c != ':' && !std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  MacAddress mac;
  unsigned v[6];
  char tail;
  std::string s(text);
  if (std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                  &tail) != 6) {
    return std::nullopt;
  }
  for (int i = 0; i < 6; ++i) mac.bytes[size_t(i)] = uint8_t(v[i]);
  return mac;
}

std::optional<IpAddress> parse_ip(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return std::nullopt;  // c_str() would cut the text there
  std::string s(text);
  uint8_t buf[16];
  if (inet_pton(AF_INET, s.c_str(), buf) == 1) return IpAddress::from_v4_bytes(buf);
  if (inet_pton(AF_INET6, s.c_str(), buf) == 1) return IpAddress::from_v6_bytes(buf);
  return std::nullopt;
}

}  // namespace uroce::wire
