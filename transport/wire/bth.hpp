// The InfiniBand transport headers carried by RoCEv2: the BTH and every extension header.
//
// Each struct holds decoded values in host order; read_* decode from and write_* encode to raw bytes
// (the caller has checked that the bytes are there: the frame parser does it once per packet).
#pragma once

#include <cstdint>

#include "transport/wire/opcode.hpp"

namespace uroce::wire {

inline constexpr uint16_t default_pkey = 0xffff;
inline constexpr uint32_t psn_mask = 0xffffff;
inline constexpr uint32_t qpn_mask = 0xffffff;
// The destination QP of a multicast datagram: every QP attached to the group (the destination IP) gets it.
inline constexpr uint32_t multicast_qpn = 0xffffff;

struct Bth {
  uint8_t opcode = 0;
  bool solicited = false;    // SE
  bool migreq = false;       // M
  uint8_t pad_count = 0;     // 0-3
  uint8_t tver = 0;          // transport header version, must be 0
  uint16_t pkey = default_pkey;
  bool fecn = false;
  bool becn = false;
  uint8_t reserved6 = 0;     // the 6 reserved bits of byte 4
  uint32_t dest_qp = 0;      // 24 bits
  bool ack_req = false;      // A
  uint8_t reserved7 = 0;     // the 7 reserved bits of byte 8
  uint32_t psn = 0;          // 24 bits
};

struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_length = 0;
};

// AETH syndrome classes (bits 7:5 of the syndrome byte).
enum class AethKind : uint8_t { ack, rnr_nak, reserved, nak };

enum class NakCode : uint8_t {
  psn_sequence_error = 0,
  invalid_request = 1,
  remote_access_error = 2,
  remote_operational_error = 3,
  invalid_rd_request = 4,
};

inline constexpr uint8_t aeth_credit_invalid = 0x1f;  // "no end-to-end flow control"

struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits

  AethKind kind() const;
  uint8_t low_bits() const { return syndrome & 0x1f; }  // credit count, RNR timer or NAK code

  static Aeth ack(uint32_t msn, uint8_t credits = aeth_credit_invalid);
  static Aeth rnr_nak(uint32_t msn, uint8_t timer_code);
  static Aeth nak(uint32_t msn, NakCode code);
};

std::string_view to_string(AethKind k);
std::string_view nak_code_name(uint8_t code);  // "PSN sequence error", ...

// RNR NAK timer code (0-31) to microseconds, IBTA table 45; code 0 is 655.36 ms.
uint32_t rnr_timer_microseconds(uint8_t code);

struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;
};

struct AtomicAckEth {
  uint64_t original = 0;
};

struct Deth {
  uint32_t qkey = 0;
  uint8_t reserved = 0;
  uint32_t src_qp = 0;  // 24 bits
};

// XRC extended transport header: which XRC SRQ at the target takes the request.
struct Xrceth {
  uint8_t reserved = 0;
  uint32_t srq = 0;  // 24 bits
};

// FLUSH extended transport header (IBTA 1.5): selectivity level and placement type.
struct Feth {
  uint32_t raw = 0;
  uint8_t selectivity_level() const { return uint8_t((raw >> 4) & 0x3); }
  uint8_t placement_type() const { return uint8_t(raw & 0xf); }
};

// All the transport headers of one packet. Which of the extension headers are meaningful is given by
// opcode_info(bth.opcode).headers.
struct TransportHeaders {
  Bth bth;
  Deth deth;
  Xrceth xrceth;
  Feth feth;
  Reth reth;
  AtomicEth atomic_eth;
  Aeth aeth;
  AtomicAckEth atomic_ack_eth;
  uint32_t immdt = 0;  // immediate data, as the 32-bit big-endian value on the wire
  uint32_t ieth = 0;   // R_Key to invalidate
  uint8_t cnp_reserved[cnp_reserved_size] = {};
};

void read_bth(const uint8_t* p, Bth& b);
void write_bth(uint8_t* out, const Bth& b);

// Decode / encode the extension headers named by `headers` (HeaderBits), in wire order, starting at p.
// Returns the number of bytes read / written, which is headers_length(headers).
unsigned read_extension_headers(const uint8_t* p, uint16_t headers, TransportHeaders& h);
unsigned write_extension_headers(uint8_t* out, uint16_t headers, const TransportHeaders& h);

// Signed distance a - b between two 24-bit PSNs, in -2^23 .. 2^23-1.
inline int32_t psn_diff(uint32_t a, uint32_t b) { return int32_t((a - b) << 8) >> 8; }

}  // namespace uroce::wire
