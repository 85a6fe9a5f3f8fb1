#include "transport/wire/ip.hpp"

#include <cstring>

#include "transport/wire/bytes.hpp"

namespace uroce::wire {

uint16_t internet_checksum(const uint8_t* p, size_t len) {
  // The one's-complement sum of 16-bit words, taken four bytes at a time: 2^16 = 1 modulo 0xFFFF, so a
  // 32-bit word adds the same as its two halves, and a 64-bit accumulator keeps every carry until the
  // end-around fold. (An IPv4 header is five 32-bit loads.)
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 4 <= len; i += 4) sum += load_be32(p + i);
  if (i + 2 <= len) {
    sum += load_be16(p + i);
    i += 2;
  }
  if (i < len) sum += uint32_t(p[i]) << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

unsigned write_ipv4(uint8_t* out, const Ipv4Header& h) {
  out[0] = uint8_t(0x40 | (ipv4_min_header_size / 4));
  out[1] = h.tos;
  store_be16(out + 2, h.total_length);
  store_be16(out + 4, h.identification);
  uint16_t frag = uint16_t((h.dont_fragment ? 0x4000 : 0) | (h.more_fragments ? 0x2000 : 0) |
                           (h.fragment_offset & 0x1fff));
  store_be16(out + 6, frag);
  out[8] = h.ttl;
  out[9] = h.protocol;
  store_be32(out + 12, h.src);
  store_be32(out + 16, h.dst);
  // The checksum from the values rather than from the bytes just written: reading those back at once
  // would wait for the stores to reach the cache. The same one's-complement sum as internet_checksum().
  uint64_t sum = uint32_t(out[0]) << 8 | h.tos;
  sum += h.total_length + h.identification + frag + (uint32_t(h.ttl) << 8 | h.protocol);
  sum += uint64_t(h.src) + h.dst;  // 32-bit words add as their two halves (2^16 = 1 mod 0xFFFF)
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  store_be16(out + 10, uint16_t(~sum));
  return ipv4_min_header_size;
}

unsigned write_ipv6(uint8_t* out, const Ipv6Header& h) {
  store_be32(out, 0x60000000u | uint32_t(h.traffic_class) << 20 | (h.flow_label & 0xfffff));
  store_be16(out + 4, h.payload_length);
  out[6] = h.next_header;
  out[7] = h.hop_limit;
  std::memcpy(out + 8, h.src.bytes.data(), 16);
  std::memcpy(out + 24, h.dst.bytes.data(), 16);
  return ipv6_header_size;
}

unsigned write_udp(uint8_t* out, const UdpHeader& h) {
  store_be16(out, h.src_port);
  store_be16(out + 2, h.dst_port);
  store_be16(out + 4, h.length);
  store_be16(out + 6, h.checksum);
  return udp_header_size;
}

uint16_t udp_source_port_from_flow_label(uint32_t fl) {
  fl &= 0xfffff;
  return uint16_t(((fl & 0x3fff) ^ ((fl & 0xfc000) >> 14)) | 0xc000);
}

uint32_t flow_label_from_qpns(uint32_t local_qpn, uint32_t remote_qpn) {
  // As rdma_calc_flow_label(): fold the 64-bit product of the two QP numbers into 20 bits.
  uint64_t v = uint64_t(local_qpn) * remote_qpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return uint32_t(v & 0xfffff);
}

}  // namespace uroce::wire
