// BTH opcodes and the one table that says what each of them carries.
//
// Modelled on rxe's rxe_opcode[] and Wireshark's opcode tables: everything that depends on the opcode
// (which extension headers follow the BTH and in which order, whether a payload is allowed, where the
// packet sits in a message) is looked up here, never re-derived with switch statements elsewhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace uroce::wire {

enum class Opcode : uint8_t {
  // Reliable Connection
  rc_send_first = 0x00,
  rc_send_middle = 0x01,
  rc_send_last = 0x02,
  rc_send_last_imm = 0x03,
  rc_send_only = 0x04,
  rc_send_only_imm = 0x05,
  rc_rdma_write_first = 0x06,
  rc_rdma_write_middle = 0x07,
  rc_rdma_write_last = 0x08,
  rc_rdma_write_last_imm = 0x09,
  rc_rdma_write_only = 0x0a,
  rc_rdma_write_only_imm = 0x0b,
  rc_rdma_read_request = 0x0c,
  rc_rdma_read_response_first = 0x0d,
  rc_rdma_read_response_middle = 0x0e,
  rc_rdma_read_response_last = 0x0f,
  rc_rdma_read_response_only = 0x10,
  rc_acknowledge = 0x11,
  rc_atomic_acknowledge = 0x12,
  rc_compare_swap = 0x13,
  rc_fetch_add = 0x14,
  rc_send_last_inv = 0x16,
  rc_send_only_inv = 0x17,
  rc_flush = 0x1c,
  rc_atomic_write = 0x1d,
  // Unreliable Connection: the SEND and RDMA WRITE subset, at 0x20 + the RC value
  uc_send_first = 0x20,
  uc_send_middle = 0x21,
  uc_send_last = 0x22,
  uc_send_last_imm = 0x23,
  uc_send_only = 0x24,
  uc_send_only_imm = 0x25,
  uc_rdma_write_first = 0x26,
  uc_rdma_write_middle = 0x27,
  uc_rdma_write_last = 0x28,
  uc_rdma_write_last_imm = 0x29,
  uc_rdma_write_only = 0x2a,
  uc_rdma_write_only_imm = 0x2b,
  // Unreliable Datagram
  ud_send_only = 0x64,
  ud_send_only_imm = 0x65,
  // Extended Reliable Connection: RC's opcodes up to SEND_ONLY_INV at 0xa0 + the RC value. Requests carry
  // an XRCETH (the target's XRC SRQ) before any other extension header; responses are as RC's.
  xrc_send_first = 0xa0,
  xrc_send_middle = 0xa1,
  xrc_send_last = 0xa2,
  xrc_send_last_imm = 0xa3,
  xrc_send_only = 0xa4,
  xrc_send_only_imm = 0xa5,
  xrc_rdma_write_first = 0xa6,
  xrc_rdma_write_middle = 0xa7,
  xrc_rdma_write_last = 0xa8,
  xrc_rdma_write_last_imm = 0xa9,
  xrc_rdma_write_only = 0xaa,
  xrc_rdma_write_only_imm = 0xab,
  xrc_rdma_read_request = 0xac,
  xrc_rdma_read_response_first = 0xad,
  xrc_rdma_read_response_middle = 0xae,
  xrc_rdma_read_response_last = 0xaf,
  xrc_rdma_read_response_only = 0xb0,
  xrc_acknowledge = 0xb1,
  xrc_atomic_acknowledge = 0xb2,
  xrc_compare_swap = 0xb3,
  xrc_fetch_add = 0xb4,
  xrc_send_last_inv = 0xb6,
  xrc_send_only_inv = 0xb7,
  // Congestion Notification Packet. 0x81 on RoCEv2; 0x80 is the InfiniBand/OPA value and is rejected.
  cnp = 0x81,
};

enum class Transport : uint8_t { rc, uc, rd, ud, cnp, xrc };

// What the packet does, independent of transport and position.
enum class Operation : uint8_t {
  send,
  rdma_write,
  rdma_read_request,
  rdma_read_response,
  acknowledge,
  atomic_acknowledge,
  compare_swap,
  fetch_add,
  flush,
  atomic_write,
  cnp,
};

// Where a packet sits in a (possibly multi-packet) message.
enum class Position : uint8_t { first, middle, last, only };

// Extension headers, as bits. The enum order is the order they appear on the wire when several are present.
enum HeaderBits : uint16_t {
  hdr_deth = 1u << 0,           // 8 B, UD
  hdr_xrceth = 1u << 1,         // 4 B, XRC requests: the XRC SRQ at the target
  hdr_feth = 1u << 2,           // 4 B, FLUSH
  hdr_reth = 1u << 3,           // 16 B
  hdr_atomic_eth = 1u << 4,     // 28 B
  hdr_aeth = 1u << 5,           // 4 B
  hdr_atomic_ack_eth = 1u << 6, // 8 B
  hdr_immdt = 1u << 7,          // 4 B
  hdr_ieth = 1u << 8,           // 4 B
  hdr_cnp_reserved = 1u << 9,   // 16 reserved bytes of a RoCEv2 CNP
};

struct OpcodeInfo {
  std::string_view name;  // e.g. "SEND_FIRST"; empty for an opcode that is not defined
  Transport transport = Transport::rc;
  Operation operation = Operation::send;
  Position position = Position::only;
  uint16_t headers = 0;       // HeaderBits
  uint8_t headers_length = 0; // total bytes of the extension headers after the BTH
  bool has_payload = false;   // a payload may follow the extension headers
  bool is_request = false;    // sent by a requester (as opposed to a response or an ACK)

  constexpr bool valid() const { return !name.empty(); }
  constexpr bool has(HeaderBits h) const { return (headers & h) != 0; }
};

// Sizes of the headers, in bytes.
inline constexpr unsigned bth_size = 12;
inline constexpr unsigned deth_size = 8;
inline constexpr unsigned xrceth_size = 4;
inline constexpr unsigned feth_size = 4;
inline constexpr unsigned reth_size = 16;
inline constexpr unsigned atomic_eth_size = 28;
inline constexpr unsigned aeth_size = 4;
inline constexpr unsigned atomic_ack_eth_size = 8;
inline constexpr unsigned immdt_size = 4;
inline constexpr unsigned ieth_size = 4;
inline constexpr unsigned cnp_reserved_size = 16;
inline constexpr unsigned icrc_size = 4;

// Total size of the extension headers named by `headers`.
constexpr unsigned headers_length(uint16_t headers) {
  unsigned n = 0;
  if (headers & hdr_deth) n += deth_size;
  if (headers & hdr_xrceth) n += xrceth_size;
  if (headers & hdr_feth) n += feth_size;
  if (headers & hdr_reth) n += reth_size;
  if (headers & hdr_atomic_eth) n += atomic_eth_size;
  if (headers & hdr_aeth) n += aeth_size;
  if (headers & hdr_atomic_ack_eth) n += atomic_ack_eth_size;
  if (headers & hdr_immdt) n += immdt_size;
  if (headers & hdr_ieth) n += ieth_size;
  if (headers & hdr_cnp_reserved) n += cnp_reserved_size;
  return n;
}

const OpcodeInfo& opcode_info(uint8_t opcode);
inline const OpcodeInfo& opcode_info(Opcode op) { return opcode_info(uint8_t(op)); }

std::string_view transport_name(Transport t);     // "RC", "UC", "RD", "UD", "CNP", "XRC"
std::string_view operation_name(Operation op);    // "send", "rdma_write", ...

// Full opcode name as printed by uroce: "RC SEND_FIRST", "UD SEND_ONLY_IMM", "CNP".
std::string opcode_name(uint8_t opcode);

// Parses "RC_SEND_FIRST", "rc send_first", "SEND_FIRST" (any transport), "0x04" or "4". With a bare
// operation name every matching opcode is accepted, which is why the result is a 256-bit set.
struct OpcodeSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  void add(uint8_t op) { bits[op >> 6] |= uint64_t(1) << (op & 63); }
  bool contains(uint8_t op) const { return (bits[op >> 6] >> (op & 63)) & 1; }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
};
std::optional<OpcodeSet> parse_opcode_names(std::string_view text);

}  // namespace uroce::wire
