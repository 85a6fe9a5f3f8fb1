#include "transport/wire/checksum_offload.hpp"

#include <cstddef>
#include <cstring>
#include <optional>

#include "transport/wire/bytes.hpp"
#include "transport/wire/ethernet.hpp"
#include "transport/wire/ip.hpp"

namespace uroce::wire {

namespace {

constexpr uint8_t ip_proto_tcp = 6;
constexpr size_t tcp_min_header_size = 20;
constexpr size_t tcp_checksum_offset = 16;
constexpr size_t udp_checksum_offset = 6;

// A frame's IP packet as the offload sees it: where the IP header and the L4 segment are, and the
// pseudo-header that the L4 checksum covers, already built. Found only when the IP header is whole and its
// length fits the frame (Ethernet padding may follow the packet: it is not part of the segment).
struct IpPacket {
  bool v4 = false;
  size_t l3 = 0;                // IP header offset
  size_t ip_header_length = 0;  // bytes
  bool fragment = false;        // IPv4 MF set or offset != 0: the segment is not whole
  uint8_t protocol = 0;         // IPv4 protocol, IPv6 next header
  size_t l4 = 0;                // L4 segment offset
  size_t l4_length = 0;         // from the IP header
  uint8_t pseudo[40] = {};      // IPv4: 12 bytes, IPv6: 40 bytes
  size_t pseudo_length = 0;
};

// Ethernet (optional 802.1Q tag), then an IPv4 or IPv6 header whose lengths are consistent with the frame.
std::optional<IpPacket> find_ip_packet(std::span<const uint8_t> f) {
  if (f.size() < ethernet_header_size) return std::nullopt;
  size_t l3 = ethernet_header_size;
  uint16_t type = load_be16(f.data() + 12);
  if (type == ethertype_vlan) {
    if (f.size() < ethernet_header_size + vlan_tag_size) return std::nullopt;
    type = load_be16(f.data() + 16);
    l3 += vlan_tag_size;
  }
  const size_t available = f.size() - l3;
  const uint8_t* ip = f.data() + l3;
  IpPacket p;
  p.l3 = l3;
  if (type == ethertype_ipv4) {
    if (available < ipv4_min_header_size || ip[0] >> 4 != 4) return std::nullopt;
    const size_t header = size_t(ip[0] & 0x0f) * 4;
    const size_t total = load_be16(ip + 2);
    if (header < ipv4_min_header_size || total < header || total > available) return std::nullopt;
    p.v4 = true;
    p.ip_header_length = header;
    p.fragment = (load_be16(ip + 6) & 0x3fff) != 0;  // MF, or a fragment offset
    p.protocol = ip[9];
    p.l4_length = total - header;
    std::memcpy(p.pseudo, ip + 12, 8);  // source, destination
    p.pseudo[9] = p.protocol;           // after a zero byte
    store_be16(p.pseudo + 10, uint16_t(p.l4_length));
    p.pseudo_length = 12;
  } else if (type == ethertype_ipv6) {
    if (available < ipv6_header_size || ip[0] >> 4 != 6) return std::nullopt;
    const size_t payload = load_be16(ip + 4);  // 0 (a jumbogram) leaves no segment: nothing is computed
    if (payload > available - ipv6_header_size) return std::nullopt;
    p.ip_header_length = ipv6_header_size;
    p.protocol = ip[6];  // extension headers are not walked: only TCP or UDP directly after the header
    p.l4_length = payload;
    std::memcpy(p.pseudo, ip + 8, 32);  // source, destination
    store_be32(p.pseudo + 32, uint32_t(p.l4_length));
    p.pseudo[39] = p.protocol;  // after three zero bytes
    p.pseudo_length = 40;
  } else {
    return std::nullopt;
  }
  p.l4 = l3 + p.ip_header_length;
  return p;
}

// Where the segment's checksum field is, relative to its start; 0 when the segment is not TCP or UDP or is
// too short to be one (no field to fill in, or a header the IP length cuts short).
size_t l4_checksum_offset(const IpPacket& p) {
  if (p.protocol == ip_proto_tcp && p.l4_length >= tcp_min_header_size) return tcp_checksum_offset;
  if (p.protocol == ip_proto_udp && p.l4_length >= udp_header_size) return udp_checksum_offset;
  return 0;
}

// The one's-complement sum (folded to 16 bits) of the bytes: internet_checksum() returns its complement.
uint32_t ones_sum(const uint8_t* p, size_t len) { return uint16_t(~internet_checksum(p, len)); }

// The checksum over the pseudo-header and the segment as it is (checksum field included). The pseudo-header
// is an even number of bytes, so the segment's words line up as if the two were one buffer.
uint16_t l4_checksum(const IpPacket& p, const uint8_t* segment) {
  uint32_t sum = ones_sum(p.pseudo, p.pseudo_length) + ones_sum(segment, p.l4_length);
  sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

}  // namespace

void offload_checksums(std::span<uint8_t> frame) {
  const std::optional<IpPacket> p = find_ip_packet(frame);
  if (!p) return;
  if (p->v4) {
    uint8_t* ip = frame.data() + p->l3;
    store_be16(ip + 10, 0);
    store_be16(ip + 10, internet_checksum(ip, p->ip_header_length));
    // A fragment's L4 checksum covers the whole reassembled segment, which this frame does not hold.
    if (p->fragment) return;
  }
  const size_t offset = l4_checksum_offset(*p);
  if (offset == 0) return;
  uint8_t* segment = frame.data() + p->l4;
  store_be16(segment + offset, 0);
  uint16_t checksum = l4_checksum(*p, segment);
  // UDP's 0 means "no checksum"; a computed 0 goes out as 0xFFFF, the same value in one's complement.
  if (checksum == 0 && p->protocol == ip_proto_udp) checksum = 0xffff;
  store_be16(segment + offset, checksum);
}

bool ipv4_checksums_ok(std::span<const uint8_t> frame) {
  const std::optional<IpPacket> p = find_ip_packet(frame);
  if (!p || !p->v4 || p->fragment) return false;
  // A header or segment with its checksum in place sums to 0xFFFF, whose complement is 0.
  if (internet_checksum(frame.data() + p->l3, p->ip_header_length) != 0) return false;
  const size_t offset = l4_checksum_offset(*p);
  if (offset == 0) return false;
  const uint8_t* segment = frame.data() + p->l4;
  if (p->protocol == ip_proto_udp && load_be16(segment + offset) == 0) return true;  // sent without one
  return l4_checksum(*p, segment) == 0;
}

}  // namespace uroce::wire
