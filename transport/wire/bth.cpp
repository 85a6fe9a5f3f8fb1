#include "transport/wire/bth.hpp"

#include <cstring>

#include "transport/wire/bytes.hpp"

namespace uroce::wire {

AethKind Aeth::kind() const {
  switch (syndrome >> 5) {
    case 0: return AethKind::ack;
    case 1: return AethKind::rnr_nak;
    case 3: return AethKind::nak;
    default: return AethKind::reserved;  // 010 and 1xx are reserved
  }
}

Aeth Aeth::ack(uint32_t msn, uint8_t credits) { return {uint8_t(credits & 0x1f), msn & 0xffffff}; }
Aeth Aeth::rnr_nak(uint32_t msn, uint8_t timer_code) {
  return {uint8_t(0x20 | (timer_code & 0x1f)), msn & 0xffffff};
}
Aeth Aeth::nak(uint32_t msn, NakCode code) { return {uint8_t(0x60 | uint8_t(code)), msn & 0xffffff}; }

std::string_view to_string(AethKind k) {
  switch (k) {
    case AethKind::ack: return "ACK";
    case AethKind::rnr_nak: return "RNR NAK";
    case AethKind::nak: return "NAK";
    case AethKind::reserved: return "reserved";
  }
  return "?";
}

std::string_view nak_code_name(uint8_t code) {
  switch (code) {
    case 0: return "PSN sequence error";
    case 1: return "invalid request";
    case 2: return "remote access error";
    case 3: return "remote operational error";
    case 4: return "invalid RD request";
    default: return "reserved NAK code";
  }
}

uint32_t rnr_timer_microseconds(uint8_t code) {
  // IBTA vol. 1 table 45, in microseconds.
  static constexpr uint32_t table[32] = {
      655360, 10,    20,    30,    40,    60,    80,    120,   160,    240,    320,
      480,    640,   960,   1280,  1920,  2560,  3840,  5120,  7680,   10240,  15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return table[code & 0x1f];
}

void read_bth(const uint8_t* p, Bth& b) {
  b.opcode = p[0];
  b.solicited = p[1] & 0x80;
  b.migreq = p[1] & 0x40;
  b.pad_count = (p[1] >> 4) & 3;
  b.tver = p[1] & 0x0f;
  b.pkey = load_be16(p + 2);
  b.fecn = p[4] & 0x80;
  b.becn = p[4] & 0x40;
  b.reserved6 = p[4] & 0x3f;
  b.dest_qp = load_be24(p + 5);
  b.ack_req = p[8] & 0x80;
  b.reserved7 = p[8] & 0x7f;
  b.psn = load_be24(p + 9);
}

void write_bth(uint8_t* out, const Bth& b) {
  out[0] = b.opcode;
  out[1] = uint8_t((b.solicited ? 0x80 : 0) | (b.migreq ? 0x40 : 0) | (b.pad_count & 3) << 4 | (b.tver & 0xf));
  store_be16(out + 2, b.pkey);
  out[4] = uint8_t((b.fecn ? 0x80 : 0) | (b.becn ? 0x40 : 0) | (b.reserved6 & 0x3f));
  store_be24(out + 5, b.dest_qp);
  out[8] = uint8_t((b.ack_req ? 0x80 : 0) | (b.reserved7 & 0x7f));
  store_be24(out + 9, b.psn);
}

unsigned read_extension_headers(const uint8_t* p, uint16_t headers, TransportHeaders& h) {
  const uint8_t* const start = p;
  if (headers & hdr_deth) {
    h.deth.qkey = load_be32(p);
    h.deth.reserved = p[4];
    h.deth.src_qp = load_be24(p + 5);
    p += deth_size;
  }
  if (headers & hdr_xrceth) {
    h.xrceth.reserved = p[0];
    h.xrceth.srq = load_be24(p + 1);
    p += xrceth_size;
  }
  if (headers & hdr_feth) {
    h.feth.raw = load_be32(p);
    p += feth_size;
  }
  if (headers & hdr_reth) {
    h.reth.va = load_be64(p);
    h.reth.rkey = load_be32(p + 8);
    h.reth.dma_length = load_be32(p + 12);
    p += reth_size;
  }
  if (headers & hdr_atomic_eth) {
    h.atomic_eth.va = load_be64(p);
    h.atomic_eth.rkey = load_be32(p + 8);
    h.atomic_eth.swap_add = load_be64(p + 12);
    h.atomic_eth.compare = load_be64(p + 20);
    p += atomic_eth_size;
  }
  if (headers & hdr_aeth) {
    h.aeth.syndrome = p[0];
    h.aeth.msn = load_be24(p + 1);
    p += aeth_size;
  }
  if (headers & hdr_atomic_ack_eth) {
    h.atomic_ack_eth.original = load_be64(p);
    p += atomic_ack_eth_size;
  }
  if (headers & hdr_immdt) {
    h.immdt = load_be32(p);
    p += immdt_size;
  }
  if (headers & hdr_ieth) {
    h.ieth = load_be32(p);
    p += ieth_size;
  }
  if (headers & hdr_cnp_reserved) {
    std::memcpy(h.cnp_reserved, p, cnp_reserved_size);
    p += cnp_reserved_size;
  }
  return unsigned(p - start);
}

unsigned write_extension_headers(uint8_t* out, uint16_t headers, const TransportHeaders& h) {
  uint8_t* const start = out;
  if (headers & hdr_deth) {
    store_be32(out, h.deth.qkey);
    out[4] = h.deth.reserved;
    store_be24(out + 5, h.deth.src_qp);
    out += deth_size;
  }
  if (headers & hdr_xrceth) {
    out[0] = h.xrceth.reserved;
    store_be24(out + 1, h.xrceth.srq);
    out += xrceth_size;
  }
  if (headers & hdr_feth) {
    store_be32(out, h.feth.raw);
    out += feth_size;
  }
  if (headers & hdr_reth) {
    store_be64(out, h.reth.va);
    store_be32(out + 8, h.reth.rkey);
    store_be32(out + 12, h.reth.dma_length);
    out += reth_size;
  }
  if (headers & hdr_atomic_eth) {
    store_be64(out, h.atomic_eth.va);
    store_be32(out + 8, h.atomic_eth.rkey);
    store_be64(out + 12, h.atomic_eth.swap_add);
    store_be64(out + 20, h.atomic_eth.compare);
    out += atomic_eth_size;
  }
  if (headers & hdr_aeth) {
    out[0] = h.aeth.syndrome;
    store_be24(out + 1, h.aeth.msn);
    out += aeth_size;
  }
  if (headers & hdr_atomic_ack_eth) {
    store_be64(out, h.atomic_ack_eth.original);
    out += atomic_ack_eth_size;
  }
  if (headers & hdr_immdt) {
    store_be32(out, h.immdt);
    out += immdt_size;
  }
  if (headers & hdr_ieth) {
    store_be32(out, h.ieth);
    out += ieth_size;
  }
  if (headers & hdr_cnp_reserved) {
    std::memcpy(out, h.cnp_reserved, cnp_reserved_size);
    out += cnp_reserved_size;
  }
  return unsigned(out - start);
}

}  // namespace uroce::wire
