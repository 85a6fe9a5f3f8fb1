#include "transport/cm/rdma_cm_header.hpp"

#include <cstring>

#include "transport/wire/bytes.hpp"

namespace uroce::cm {

// Layout: version (1 byte), IP version in the high nibble of the next byte, port (2 bytes), then the
// source and destination as 16 bytes each: an IPv4 address sits in the last 4 of them after 12 zero bytes
// (not the v4-mapped form), an IPv6 address takes all 16.
namespace {

wire::IpAddress read_address(const uint8_t* p, bool v4) {
  return v4 ? wire::IpAddress::from_v4_bytes(p + 12) : wire::IpAddress::from_v6_bytes(p);
}

void write_address(uint8_t* p, const wire::IpAddress& a) {
  std::memset(p, 0, 16);
  if (a.is_v4()) {
    wire::store_be32(p + 12, a.v4());
  } else {
    std::memcpy(p, a.bytes.data(), 16);
  }
}

}  // namespace

std::optional<IpHeader> read_ip_header(std::span<const uint8_t> data) {
  if (data.size() < ip_header_size || data[0] != ip_header_version) return std::nullopt;
  const unsigned ip_version = data[1] >> 4;
  if (ip_version != 4 && ip_version != 6) return std::nullopt;
  IpHeader h;
  h.source_port = wire::load_be16(data.data() + 2);
  h.source = read_address(data.data() + 4, ip_version == 4);
  h.destination = read_address(data.data() + 20, ip_version == 4);
  return h;
}

void write_ip_header(uint8_t* out, const IpHeader& h) {
  out[0] = ip_header_version;
  out[1] = uint8_t((h.source.is_v4() ? 4 : 6) << 4);
  wire::store_be16(out + 2, h.source_port);
  write_address(out + 4, h.source);
  write_address(out + 20, h.destination);
}

}  // namespace uroce::cm
