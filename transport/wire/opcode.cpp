#include "transport/wire/opcode.hpp"

#include <array>
#include <cstdio>
#include <cctype>
#include <charconv>
#include <string>

namespace uroce::wire {

namespace {

struct Row {
  uint8_t opcode;
  std::string_view name;
  Operation operation;
  Position position;
  uint16_t headers;
  bool has_payload;
  bool is_request;
};

using O = Operation;
using P = Position;

// The RC rows; UC reuses the SEND/WRITE rows at +0x20 and XRC the rows up to SEND_ONLY_INV at +0xa0 (see
// build_table).
constexpr Row rc_rows[] = {
    {0x00, "SEND_FIRST", O::send, P::first, 0, true, true},
    {0x01, "SEND_MIDDLE", O::send, P::middle, 0, true, true},
    {0x02, "SEND_LAST", O::send, P::last, 0, true, true},
    {0x03, "SEND_LAST_IMM", O::send, P::last, hdr_immdt, true, true},
    {0x04, "SEND_ONLY", O::send, P::only, 0, true, true},
    {0x05, "SEND_ONLY_IMM", O::send, P::only, hdr_immdt, true, true},
    {0x06, "RDMA_WRITE_FIRST", O::rdma_write, P::first, hdr_reth, true, true},
    {0x07, "RDMA_WRITE_MIDDLE", O::rdma_write, P::middle, 0, true, true},
    {0x08, "RDMA_WRITE_LAST", O::rdma_write, P::last, 0, true, true},
    {0x09, "RDMA_WRITE_LAST_IMM", O::rdma_write, P::last, hdr_immdt, true, true},
    {0x0a, "RDMA_WRITE_ONLY", O::rdma_write, P::only, hdr_reth, true, true},
    {0x0b, "RDMA_WRITE_ONLY_IMM", O::rdma_write, P::only, hdr_reth | hdr_immdt, true, true},
    {0x0c, "RDMA_READ_REQUEST", O::rdma_read_request, P::only, hdr_reth, false, true},
    {0x0d, "RDMA_READ_RESPONSE_FIRST", O::rdma_read_response, P::first, hdr_aeth, true, false},
    {0x0e, "RDMA_READ_RESPONSE_MIDDLE", O::rdma_read_response, P::middle, 0, true, false},
    {0x0f, "RDMA_READ_RESPONSE_LAST", O::rdma_read_response, P::last, hdr_aeth, true, false},
    {0x10, "RDMA_READ_RESPONSE_ONLY", O::rdma_read_response, P::only, hdr_aeth, true, false},
    {0x11, "ACKNOWLEDGE", O::acknowledge, P::only, hdr_aeth, false, false},
    {0x12, "ATOMIC_ACKNOWLEDGE", O::atomic_acknowledge, P::only, hdr_aeth | hdr_atomic_ack_eth, false,
     false},
    {0x13, "COMPARE_SWAP", O::compare_swap, P::only, hdr_atomic_eth, false, true},
    {0x14, "FETCH_ADD", O::fetch_add, P::only, hdr_atomic_eth, false, true},
    {0x16, "SEND_LAST_INV", O::send, P::last, hdr_ieth, true, true},
    {0x17, "SEND_ONLY_INV", O::send, P::only, hdr_ieth, true, true},
    {0x1c, "FLUSH", O::flush, P::only, hdr_feth | hdr_reth, false, true},
    {0x1d, "ATOMIC_WRITE", O::atomic_write, P::only, hdr_reth, true, true},
};

constexpr std::array<OpcodeInfo, 256> build_table() {
  std::array<OpcodeInfo, 256> t{};
  auto put = [&](uint8_t op, Transport tr, const Row& r, uint16_t extra_headers) {
    OpcodeInfo& i = t[op];
    i.name = r.name;
    i.transport = tr;
    i.operation = r.operation;
    i.position = r.position;
    i.headers = uint16_t(r.headers | extra_headers);
    i.headers_length = uint8_t(headers_length(i.headers));
    i.has_payload = r.has_payload;
    i.is_request = r.is_request;
  };
  for (const Row& r : rc_rows) {
    put(r.opcode, Transport::rc, r, 0);
    // UC has the SEND (without invalidate) and RDMA WRITE opcodes, at the same offsets.
    if (r.opcode <= 0x0b) put(uint8_t(0x20 + r.opcode), Transport::uc, r, 0);
    // XRC has every RC opcode up to SEND_ONLY_INV (not FLUSH or ATOMIC_WRITE); its requests name the
    // target's XRC SRQ in an XRCETH, first after the BTH (IBTA vol. 1 9.2, as rxe's XRC patches lay it out).
    if (r.opcode <= 0x17) put(uint8_t(0xa0 + r.opcode), Transport::xrc, r, r.is_request ? hdr_xrceth : 0);
  }
  // UD: only SEND_ONLY and SEND_ONLY_IMM, both with a DETH before anything else.
  put(0x64, Transport::ud, rc_rows[4], hdr_deth);
  put(0x65, Transport::ud, rc_rows[5], hdr_deth);
  // RoCEv2 CNP: BTH, 16 reserved bytes, ICRC.
  constexpr Row cnp{0x81, "CNP", O::cnp, P::only, hdr_cnp_reserved, false, false};
  put(0x81, Transport::cnp, cnp, 0);
  return t;
}

constexpr std::array<OpcodeInfo, 256> table = build_table();

// Catch table mistakes at compile time.
static_assert(table[0x0b].headers_length == reth_size + immdt_size);
static_assert(table[0x12].headers_length == aeth_size + atomic_ack_eth_size);
static_assert(table[0x65].headers_length == deth_size + immdt_size);
static_assert(table[0x81].headers_length == cnp_reserved_size);
static_assert(table[0xab].headers_length == xrceth_size + reth_size + immdt_size);
static_assert(table[0xb2].headers_length == aeth_size + atomic_ack_eth_size);
static_assert(!table[0x80].valid() && !table[0x15].valid() && !table[0x2c].valid() && !table[0xb5].valid() &&
              !table[0xbc].valid());

std::string upper_underscored(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(c == ' ' || c == '-' ? '_' : char(std::toupper(uint8_t(c))));
  return out;
}

}  // namespace

const OpcodeInfo& opcode_info(uint8_t opcode) { return table[opcode]; }

std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::rc: return "RC";
    case Transport::uc: return "UC";
    case Transport::rd: return "RD";
    case Transport::ud: return "UD";
    case Transport::cnp: return "CNP";
    case Transport::xrc: return "XRC";
  }
  return "?";
}

std::string_view operation_name(Operation op) {
  switch (op) {
    case Operation::send: return "send";
    case Operation::rdma_write: return "rdma_write";
    case Operation::rdma_read_request: return "rdma_read_request";
    case Operation::rdma_read_response: return "rdma_read_response";
    case Operation::acknowledge: return "acknowledge";
    case Operation::atomic_acknowledge: return "atomic_acknowledge";
    case Operation::compare_swap: return "compare_swap";
    case Operation::fetch_add: return "fetch_add";
    case Operation::flush: return "flush";
    case Operation::atomic_write: return "atomic_write";
    case Operation::cnp: return "cnp";
  }
  return "?";
}

std::string opcode_name(uint8_t opcode) {
  const OpcodeInfo& i = table[opcode];
  if (!i.valid()) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "UNKNOWN(0x%02x)", opcode);
    return buf;
  }
  if (i.transport == Transport::cnp) return std::string(i.name);
  return std::string(transport_name(i.transport)) + " " + std::string(i.name);
}

std::optional<OpcodeSet> parse_opcode_names(std::string_view text) {
  OpcodeSet set;
  if (text.empty()) return std::nullopt;
  // A number, decimal or 0x-hex.
  {
    unsigned value = 0;
    std::string_view digits = text;
    int base = 10;
    if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
      digits.remove_prefix(2);
      base = 16;
    }
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
    if (ec == std::errc() && end == digits.data() + digits.size()) {
      if (value > 0xff) return std::nullopt;
      set.add(uint8_t(value));
      return set;
    }
  }
  const std::string wanted = upper_underscored(text);
  for (unsigned op = 0; op < 256; ++op) {
    const OpcodeInfo& i = table[op];
    if (!i.valid()) continue;
    const std::string full = upper_underscored(opcode_name(uint8_t(op)));
    if (wanted == full || wanted == i.name) set.add(uint8_t(op));
  }
  if (set.empty()) return std::nullopt;
  return set;
}

}  // namespace uroce::wire
