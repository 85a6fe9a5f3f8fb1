#include "verbs_shim/rsocket/protocol.hpp"

#include <endian.h>

#include <cstring>

namespace uroce::rsocket {

namespace {

void put_be(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = uint8_t(v >> (8 * (n - 1 - i)));
}

uint64_t get_be(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

void put_sge(uint8_t* p, const Sge& s) {
  put_be(p, s.addr, 8);
  put_be(p + 8, s.key, 4);
  put_be(p + 12, s.length, 4);
}

Sge get_sge(const uint8_t* p) { return {get_be(p, 8), uint32_t(get_be(p + 8, 4)), uint32_t(get_be(p + 12, 4))}; }

}  // namespace

std::array<uint8_t, kConnDataSize> encode(const ConnData& c) {
  std::array<uint8_t, kConnDataSize> out{};
  out[0] = c.version;
  out[1] = c.flags;
  put_be(&out[2], c.credits, 2);
  // out[4..6]: reserved, zero
  out[7] = c.target_iomap_size;
  put_sge(&out[8], c.target_sgl);
  put_sge(&out[24], c.data_buf);
  return out;
}

std::optional<ConnData> decode(const void* data, size_t length) {
  if (data == nullptr || length < kConnDataSize) return std::nullopt;
  const auto* p = static_cast<const uint8_t*>(data);
  ConnData c;
  c.version = p[0];
  c.flags = p[1];
  c.credits = uint16_t(get_be(p + 2, 2));
  c.target_iomap_size = p[7];
  c.target_sgl = get_sge(p + 8);
  c.data_buf = get_sge(p + 24);
  return c;
}

void encode(const DatagramHeader& h, uint8_t* out) {
  out[0] = h.version;
  out[1] = uint8_t(h.size());
  put_be(out + 2, h.port, 2);
  if (h.version == 6) {
    put_be(out + 4, h.flowinfo, 4);
    std::memcpy(out + 8, h.address.data(), 16);
  } else {
    std::memcpy(out + 4, h.address.data(), 4);
  }
}

std::optional<DatagramHeader> decode_datagram_header(const void* data, size_t length) {
  if (data == nullptr || length < kDatagramHeaderV4) return std::nullopt;
  const auto* p = static_cast<const uint8_t*>(data);
  DatagramHeader h;
  h.version = p[0];
  const bool v4 = h.version == 4 && p[1] == kDatagramHeaderV4;
  const bool v6 = h.version == 6 && p[1] == kDatagramHeaderV6 && length >= kDatagramHeaderV6;
  if (!v4 && !v6) return std::nullopt;
  h.port = uint16_t(get_be(p + 2, 2));
  if (v6) {
    h.flowinfo = uint32_t(get_be(p + 4, 4));
    std::memcpy(h.address.data(), p + 8, 16);
  } else {
    std::memcpy(h.address.data(), p + 4, 4);
  }
  return h;
}

uint32_t to_scale(uint32_t value, int bits) {
  const uint32_t half = 1u << (bits - 1);
  return value <= half ? value : half | (value >> bits);
}

uint32_t from_scale(uint32_t scaled, int bits) {
  const uint32_t half = 1u << (bits - 1);
  return scaled <= half ? scaled : (scaled & ~half) << bits;
}

}  // namespace uroce::rsocket
