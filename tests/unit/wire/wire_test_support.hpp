// Shared helpers for the wire codec tests.
//
// Everything here that stands for "what the wire must look like" (the opcode expectations, the reference
// encoder, the bitwise CRC-32 and the ICRC recipe) is written from docs (shared/notes/rocev2.md, IBTA)
// and deliberately does not call the code under test, so a test comparing the two is a real check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/wire/build.hpp"
#include "transport/wire/frame.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::wire::test {

using Bytes = std::vector<uint8_t>;

// ---------------------------------------------------------------------------------------------------
// The opcode table as the spec states it (rocev2.md, IBTA vol. 1 ch. 9). Header sizes are literals.

enum ExpectedHeader : uint16_t {
  x_deth = 1 << 0,    // 8
  x_xrc = 1 << 1,     // 4 (XRCETH)
  x_feth = 1 << 2,    // 4
  x_reth = 1 << 3,    // 16
  x_atomic = 1 << 4,  // 28
  x_aeth = 1 << 5,    // 4
  x_atk = 1 << 6,     // 8 (AtomicAckETH)
  x_imm = 1 << 7,     // 4
  x_ieth = 1 << 8,    // 4
  x_cnp = 1 << 9,     // 16 reserved bytes
};

struct ExpectedOpcode {
  uint8_t opcode;
  const char* full_name;  // as opcode_name() prints it
  Transport transport;
  Operation operation;
  Position position;
  uint16_t headers;       // ExpectedHeader bits
  unsigned headers_length;
  bool has_payload;
};

inline const std::vector<ExpectedOpcode>& expected_opcodes() {
  using T = Transport;
  using O = Operation;
  using P = Position;
  static const std::vector<ExpectedOpcode> rows = {
      {0x00, "RC SEND_FIRST", T::rc, O::send, P::first, 0, 0, true},
      {0x01, "RC SEND_MIDDLE", T::rc, O::send, P::middle, 0, 0, true},
      {0x02, "RC SEND_LAST", T::rc, O::send, P::last, 0, 0, true},
      {0x03, "RC SEND_LAST_IMM", T::rc, O::send, P::last, x_imm, 4, true},
      {0x04, "RC SEND_ONLY", T::rc, O::send, P::only, 0, 0, true},
      {0x05, "RC SEND_ONLY_IMM", T::rc, O::send, P::only, x_imm, 4, true},
      {0x06, "RC RDMA_WRITE_FIRST", T::rc, O::rdma_write, P::first, x_reth, 16, true},
      {0x07, "RC RDMA_WRITE_MIDDLE", T::rc, O::rdma_write, P::middle, 0, 0, true},
      {0x08, "RC RDMA_WRITE_LAST", T::rc, O::rdma_write, P::last, 0, 0, true},
      {0x09, "RC RDMA_WRITE_LAST_IMM", T::rc, O::rdma_write, P::last, x_imm, 4, true},
      {0x0a, "RC RDMA_WRITE_ONLY", T::rc, O::rdma_write, P::only, x_reth, 16, true},
      {0x0b, "RC RDMA_WRITE_ONLY_IMM", T::rc, O::rdma_write, P::only, x_reth | x_imm, 20, true},
      {0x0c, "RC RDMA_READ_REQUEST", T::rc, O::rdma_read_request, P::only, x_reth, 16, false},
      {0x0d, "RC RDMA_READ_RESPONSE_FIRST", T::rc, O::rdma_read_response, P::first, x_aeth, 4, true},
      {0x0e, "RC RDMA_READ_RESPONSE_MIDDLE", T::rc, O::rdma_read_response, P::middle, 0, 0, true},
      {0x0f, "RC RDMA_READ_RESPONSE_LAST", T::rc, O::rdma_read_response, P::last, x_aeth, 4, true},
      {0x10, "RC RDMA_READ_RESPONSE_ONLY", T::rc, O::rdma_read_response, P::only, x_aeth, 4, true},
      {0x11, "RC ACKNOWLEDGE", T::rc, O::acknowledge, P::only, x_aeth, 4, false},
      {0x12, "RC ATOMIC_ACKNOWLEDGE", T::rc, O::atomic_acknowledge, P::only, x_aeth | x_atk, 12, false},
      {0x13, "RC COMPARE_SWAP", T::rc, O::compare_swap, P::only, x_atomic, 28, false},
      {0x14, "RC FETCH_ADD", T::rc, O::fetch_add, P::only, x_atomic, 28, false},
      {0x16, "RC SEND_LAST_INV", T::rc, O::send, P::last, x_ieth, 4, true},
      {0x17, "RC SEND_ONLY_INV", T::rc, O::send, P::only, x_ieth, 4, true},
      {0x1c, "RC FLUSH", T::rc, O::flush, P::only, x_feth | x_reth, 20, false},
      {0x1d, "RC ATOMIC_WRITE", T::rc, O::atomic_write, P::only, x_reth, 16, true},
      {0x20, "UC SEND_FIRST", T::uc, O::send, P::first, 0, 0, true},
      {0x21, "UC SEND_MIDDLE", T::uc, O::send, P::middle, 0, 0, true},
      {0x22, "UC SEND_LAST", T::uc, O::send, P::last, 0, 0, true},
      {0x23, "UC SEND_LAST_IMM", T::uc, O::send, P::last, x_imm, 4, true},
      {0x24, "UC SEND_ONLY", T::uc, O::send, P::only, 0, 0, true},
      {0x25, "UC SEND_ONLY_IMM", T::uc, O::send, P::only, x_imm, 4, true},
      {0x26, "UC RDMA_WRITE_FIRST", T::uc, O::rdma_write, P::first, x_reth, 16, true},
      {0x27, "UC RDMA_WRITE_MIDDLE", T::uc, O::rdma_write, P::middle, 0, 0, true},
      {0x28, "UC RDMA_WRITE_LAST", T::uc, O::rdma_write, P::last, 0, 0, true},
      {0x29, "UC RDMA_WRITE_LAST_IMM", T::uc, O::rdma_write, P::last, x_imm, 4, true},
      {0x2a, "UC RDMA_WRITE_ONLY", T::uc, O::rdma_write, P::only, x_reth, 16, true},
      {0x2b, "UC RDMA_WRITE_ONLY_IMM", T::uc, O::rdma_write, P::only, x_reth | x_imm, 20, true},
      {0x64, "UD SEND_ONLY", T::ud, O::send, P::only, x_deth, 8, true},
      {0x65, "UD SEND_ONLY_IMM", T::ud, O::send, P::only, x_deth | x_imm, 12, true},
      {0x81, "CNP", T::cnp, O::cnp, P::only, x_cnp, 16, false},
      {0xa0, "XRC SEND_FIRST", T::xrc, O::send, P::first, x_xrc, 4, true},
      {0xa1, "XRC SEND_MIDDLE", T::xrc, O::send, P::middle, x_xrc, 4, true},
      {0xa2, "XRC SEND_LAST", T::xrc, O::send, P::last, x_xrc, 4, true},
      {0xa3, "XRC SEND_LAST_IMM", T::xrc, O::send, P::last, x_xrc | x_imm, 8, true},
      {0xa4, "XRC SEND_ONLY", T::xrc, O::send, P::only, x_xrc, 4, true},
      {0xa5, "XRC SEND_ONLY_IMM", T::xrc, O::send, P::only, x_xrc | x_imm, 8, true},
      {0xa6, "XRC RDMA_WRITE_FIRST", T::xrc, O::rdma_write, P::first, x_xrc | x_reth, 20, true},
      {0xa7, "XRC RDMA_WRITE_MIDDLE", T::xrc, O::rdma_write, P::middle, x_xrc, 4, true},
      {0xa8, "XRC RDMA_WRITE_LAST", T::xrc, O::rdma_write, P::last, x_xrc, 4, true},
      {0xa9, "XRC RDMA_WRITE_LAST_IMM", T::xrc, O::rdma_write, P::last, x_xrc | x_imm, 8, true},
      {0xaa, "XRC RDMA_WRITE_ONLY", T::xrc, O::rdma_write, P::only, x_xrc | x_reth, 20, true},
      {0xab, "XRC RDMA_WRITE_ONLY_IMM", T::xrc, O::rdma_write, P::only, x_xrc | x_reth | x_imm, 24, true},
      {0xac, "XRC RDMA_READ_REQUEST", T::xrc, O::rdma_read_request, P::only, x_xrc | x_reth, 20, false},
      {0xad, "XRC RDMA_READ_RESPONSE_FIRST", T::xrc, O::rdma_read_response, P::first, x_aeth, 4, true},
      {0xae, "XRC RDMA_READ_RESPONSE_MIDDLE", T::xrc, O::rdma_read_response, P::middle, 0, 0, true},
      {0xaf, "XRC RDMA_READ_RESPONSE_LAST", T::xrc, O::rdma_read_response, P::last, x_aeth, 4, true},
      {0xb0, "XRC RDMA_READ_RESPONSE_ONLY", T::xrc, O::rdma_read_response, P::only, x_aeth, 4, true},
      {0xb1, "XRC ACKNOWLEDGE", T::xrc, O::acknowledge, P::only, x_aeth, 4, false},
      {0xb2, "XRC ATOMIC_ACKNOWLEDGE", T::xrc, O::atomic_acknowledge, P::only, x_aeth | x_atk, 12, false},
      {0xb3, "XRC COMPARE_SWAP", T::xrc, O::compare_swap, P::only, x_xrc | x_atomic, 32, false},
      {0xb4, "XRC FETCH_ADD", T::xrc, O::fetch_add, P::only, x_xrc | x_atomic, 32, false},
      {0xb6, "XRC SEND_LAST_INV", T::xrc, O::send, P::last, x_xrc | x_ieth, 8, true},
      {0xb7, "XRC SEND_ONLY_INV", T::xrc, O::send, P::only, x_xrc | x_ieth, 8, true},
  };
  return rows;
}

inline const ExpectedOpcode* find_expected(uint8_t op) {
  for (const ExpectedOpcode& e : expected_opcodes()) {
    if (e.opcode == op) return &e;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------
// Byte helpers written independently of transport/wire/bytes.hpp.

inline void put8(Bytes& b, uint64_t v) { b.push_back(uint8_t(v)); }
inline void put16(Bytes& b, uint64_t v) {
  put8(b, v >> 8);
  put8(b, v);
}
inline void put24(Bytes& b, uint64_t v) {
  put8(b, v >> 16);
  put16(b, v);
}
inline void put32(Bytes& b, uint64_t v) {
  put16(b, v >> 16);
  put16(b, v);
}
inline void put64(Bytes& b, uint64_t v) {
  put32(b, v >> 32);
  put32(b, v);
}
inline uint32_t get16(const uint8_t* p) { return uint32_t(p[0]) * 256 + p[1]; }
inline void set16(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}

// RFC 1071, written out longhand (the oracle for internet_checksum and for patched IPv4 headers).
inline uint16_t ref_ip_checksum(const uint8_t* p, size_t len) {
  uint64_t sum = 0;
  for (size_t i = 0; i < len; ++i) sum += (i % 2 == 0) ? uint64_t(p[i]) << 8 : p[i];
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum & 0xffff);
}

// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

inline Bytes random_bytes(size_t n, uint64_t seed) {
  Rng r(seed);
  Bytes b(n);
  for (auto& x : b) x = uint8_t(r.next() >> 24);
  return b;
}

// ---------------------------------------------------------------------------------------------------
// Oracle: bitwise CRC-32 (reflected 0xEDB88320, init and final xor 0xFFFFFFFF) and the ICRC recipe of
// rocev2.md followed literally: 8 x 0xFF, the masked IP/UDP/BTH headers, the rest through the pad.

inline uint32_t ref_crc32(std::span<const uint8_t> data) {
  uint32_t crc = 0xffffffff;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
  }
  return crc ^ 0xffffffff;
}

// `packet` runs from the first byte of the IP header to just before the ICRC.
inline uint32_t ref_icrc(std::span<const uint8_t> packet, bool ipv6) {
  Bytes m(8 + packet.size(), 0xff);
  std::copy(packet.begin(), packet.end(), m.begin() + 8);
  uint8_t* ip = m.data() + 8;
  size_t ihl;
  if (!ipv6) {
    ihl = size_t(ip[0] & 0x0f) * 4;
    ip[1] = 0xff;               // TOS
    ip[8] = 0xff;               // TTL
    ip[10] = ip[11] = 0xff;     // header checksum
  } else {
    ihl = 40;
    // Version (4 bits) | traffic class (8) | flow label (20): all but the version become ones.
    uint32_t w = uint32_t(ip[0]) << 24 | uint32_t(ip[1]) << 16 | uint32_t(ip[2]) << 8 | ip[3];
    w |= 0x0fffffffu;
    ip[0] = uint8_t(w >> 24), ip[1] = uint8_t(w >> 16), ip[2] = uint8_t(w >> 8), ip[3] = uint8_t(w);
    ip[7] = 0xff;               // hop limit
  }
  ip[ihl + 6] = ip[ihl + 7] = 0xff;  // UDP checksum
  ip[ihl + 8 + 4] = 0xff;            // BTH byte 4: FECN, BECN, reserved
  return ref_crc32(m);
}

// What the ICRC of a parsed frame covers: from the IP header to just before the ICRC.
inline std::span<const uint8_t> icrc_span(const Bytes& b, const Frame& f) {
  return std::span<const uint8_t>(b.data() + f.l3_offset, f.end_offset - 4 - f.l3_offset);
}

// ---------------------------------------------------------------------------------------------------
// Frame specs with values chosen so that any mis-shifted, swapped or truncated field shows up.

enum class Fill { maxima, pattern_a, pattern_b };

inline IpAddress ip6(std::initializer_list<uint8_t> b) {
  IpAddress a;
  size_t i = 0;
  for (uint8_t x : b) a.bytes[i++] = x;
  return a;
}

inline FrameSpec make_spec(uint8_t opcode, IpVersion v, bool vlan, std::span<const uint8_t> payload,
                           Fill fill = Fill::pattern_a) {
  FrameSpec s;
  s.eth.dst = {{0x02, 0x00, 0x00, 0x00, 0x00, 0x12}};
  s.eth.src = {{0x02, 0x00, 0x00, 0x00, 0x00, 0x11}};
  s.eth.has_vlan = vlan;
  s.ip_version = v;
  s.payload = payload;
  TransportHeaders& h = s.headers;
  h.bth.opcode = opcode;
  switch (fill) {
    case Fill::maxima:
      s.eth.vlan_tci = 0xffff;
      s.ipv4.src = 0xffffffff, s.ipv4.dst = 0xfffffffe;
      s.ipv4.tos = 0xff, s.ipv4.ttl = 255, s.ipv4.identification = 0xffff;
      s.ipv6.src = ip6({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                        0xff, 0xff});
      s.ipv6.dst = ip6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
      s.ipv6.traffic_class = 0xff, s.ipv6.flow_label = 0xfffff, s.ipv6.hop_limit = 255;
      s.udp_src_port = 0xffff;
      h.bth.solicited = h.bth.migreq = h.bth.fecn = h.bth.becn = h.bth.ack_req = true;
      h.bth.pkey = 0xffff, h.bth.dest_qp = 0xffffff, h.bth.psn = 0xffffff;
      h.bth.reserved6 = 0x3f, h.bth.reserved7 = 0x7f;
      h.reth = {0xffffffffffffffffull, 0xffffffff, 0xffffffff};
      h.aeth = {0xff, 0xffffff};
      h.atomic_eth = {0xffffffffffffffffull, 0xffffffff, 0xffffffffffffffffull, 0xffffffffffffffffull};
      h.atomic_ack_eth.original = 0xffffffffffffffffull;
      h.immdt = 0xffffffff, h.ieth = 0xffffffff;
      h.deth = {0xffffffff, 0xff, 0xffffff};
      h.xrceth = {0xff, 0xffffff};
      h.feth.raw = 0xffffffff;
      std::memset(h.cnp_reserved, 0xff, sizeof h.cnp_reserved);
      break;
    case Fill::pattern_a:
      s.eth.vlan_tci = 0x6123;  // PCP 3, VID 0x123
      s.ipv4.src = 0x0a4d000b, s.ipv4.dst = 0x0a4d000c;  // 10.77.0.11 -> 10.77.0.12
      s.ipv4.tos = 0x02, s.ipv4.ttl = 64, s.ipv4.identification = 0x1234;
      s.ipv6.src = ip6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b});
      s.ipv6.dst = ip6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0c});
      s.ipv6.traffic_class = 0x6a, s.ipv6.flow_label = 0x12345, s.ipv6.hop_limit = 64;
      s.udp_src_port = 0xc123;
      h.bth.solicited = true, h.bth.migreq = false, h.bth.fecn = true, h.bth.becn = false;
      h.bth.ack_req = true;
      h.bth.pkey = 0x8001, h.bth.dest_qp = 0x123456, h.bth.psn = 0xabcdef;
      h.reth = {0x0123456789abcdefull, 0x89abcdef, 0x00010203};
      h.aeth = {0x1f, 0x00a1b2};
      h.atomic_eth = {0x8000000000000001ull, 0x11223344, 0x0102030405060708ull, 0xf0e0d0c0b0a09080ull};
      h.atomic_ack_eth.original = 0x1122334455667788ull;
      h.immdt = 0xdeadbeef, h.ieth = 0x00c0ffee;
      h.deth = {0x80010000, 0, 0x000001};
      h.xrceth = {0, 0x00abcd};
      h.feth.raw = 0x00000021;
      for (unsigned i = 0; i < cnp_reserved_size; ++i) h.cnp_reserved[i] = 0;
      break;
    case Fill::pattern_b:
      s.eth.vlan_tci = 0x1fff;  // DEI set, VID 0xfff, PCP 0
      s.ipv4.src = 0xc0a80101, s.ipv4.dst = 0x01020304;
      s.ipv4.tos = 0xc1, s.ipv4.ttl = 1, s.ipv4.identification = 0;
      s.ipv6.src = ip6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55});
      s.ipv6.dst = ip6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
      s.ipv6.traffic_class = 0x01, s.ipv6.flow_label = 0x80001, s.ipv6.hop_limit = 1;
      s.udp_src_port = 0xc000;
      h.bth.solicited = false, h.bth.migreq = true, h.bth.fecn = false, h.bth.becn = true;
      h.bth.ack_req = false;
      h.bth.pkey = 0x7ffe, h.bth.dest_qp = 0, h.bth.psn = 0;
      h.reth = {0, 0, 0x80000000};
      h.aeth = {0x60, 0xffffff};
      h.atomic_eth = {1, 0, 0x8000000000000000ull, 1};
      h.atomic_ack_eth.original = 0;
      h.immdt = 1, h.ieth = 0x80000000;
      h.deth = {0x00000001, 0, 0x800001};
      h.feth.raw = 0x00000010;
      for (unsigned i = 0; i < cnp_reserved_size; ++i) h.cnp_reserved[i] = uint8_t(i + 1);
      break;
  }
  return s;
}

// Builds, or throws (Catch reports the exception with its message).
inline Bytes build_bytes(const FrameSpec& s) {
  Bytes out(frame_size(s));
  BuildResult r = build_frame(s, out);
  if (!r.ok()) throw std::runtime_error("build_frame failed: " + std::string(to_string(r.error)));
  if (r.size != out.size()) throw std::runtime_error("build_frame size differs from frame_size");
  return out;
}

inline Bytes build_simple(uint8_t opcode, size_t payload_len = 0, IpVersion v = IpVersion::v4,
                          bool vlan = false, Fill fill = Fill::pattern_a) {
  const Bytes payload = random_bytes(payload_len, opcode * 7919u + payload_len);
  return build_bytes(make_spec(opcode, v, vlan, payload, fill));
}

// ---------------------------------------------------------------------------------------------------
// Surgery on built frames (Ethernet II, optional VLAN, IPv4 without options or IPv6).

struct Layout {
  size_t l3, ihl, l4, bth;
  bool ipv6;
};

// Offsets computed from the bytes alone, not from the parser.
inline Layout layout_of(const Bytes& f) {
  Layout l{};
  l.l3 = get16(&f[12]) == 0x8100 ? 18 : 14;
  l.ipv6 = (f[l.l3] >> 4) == 6;
  l.ihl = l.ipv6 ? 40 : size_t(f[l.l3] & 0x0f) * 4;
  l.l4 = l.l3 + l.ihl;
  l.bth = l.l4 + 8;
  return l;
}

// Re-stamps the IPv4 header checksum after a test changed the header.
inline void fix_ipv4_checksum(Bytes& f) {
  const Layout l = layout_of(f);
  if (l.ipv6) return;
  set16(&f[l.l3 + 10], 0);
  set16(&f[l.l3 + 10], ref_ip_checksum(&f[l.l3], l.ihl));
}

// Recomputes the ICRC in the last four bytes of the IP packet with the oracle.
inline void fix_icrc(Bytes& f) {
  const Layout l = layout_of(f);
  const size_t end = l.ipv6 ? l.l3 + 40 + get16(&f[l.l3 + 4]) : l.l3 + get16(&f[l.l3 + 2]);
  const uint32_t c = ref_icrc(std::span<const uint8_t>(f.data() + l.l3, end - 4 - l.l3), l.ipv6);
  for (int i = 0; i < 4; ++i) f[end - 4 + size_t(i)] = uint8_t(c >> (8 * i));
}

// The frame with its UDP payload replaced, and the IP and UDP lengths (and IPv4 checksum) made consistent.
inline Bytes with_udp_payload(const Bytes& f, std::span<const uint8_t> udp_payload) {
  const Layout l = layout_of(f);
  Bytes out(f.begin(), f.begin() + std::ptrdiff_t(l.bth));
  out.insert(out.end(), udp_payload.begin(), udp_payload.end());
  const size_t udp_len = 8 + udp_payload.size();
  set16(&out[l.l4 + 4], uint32_t(udp_len));
  if (l.ipv6) {
    set16(&out[l.l3 + 4], uint32_t(udp_len));
  } else {
    set16(&out[l.l3 + 2], uint32_t(l.ihl + udp_len));
    fix_ipv4_checksum(out);
  }
  return out;
}

inline Frame parse(const Bytes& b) {
  Frame f;
  parse_frame(b, f);
  return f;
}

}  // namespace uroce::wire::test
