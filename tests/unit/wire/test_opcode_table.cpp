// The opcode table against the spec (rocev2.md / IBTA), row by row, plus opcode names and their parser.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "transport/wire/opcode.hpp"
#include "wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;

namespace {

// The codec's header bit for each of the test's independent header bits.
struct HeaderPair {
  uint16_t expected;
  HeaderBits actual;
  const char* name;
};
constexpr HeaderPair header_pairs[] = {
    {x_deth, hdr_deth, "DETH"},     {x_xrc, hdr_xrceth, "XRCETH"}, {x_feth, hdr_feth, "FETH"},   {x_reth, hdr_reth, "RETH"},
    {x_atomic, hdr_atomic_eth, "AtomicETH"}, {x_aeth, hdr_aeth, "AETH"},
    {x_atk, hdr_atomic_ack_eth, "AtomicAckETH"}, {x_imm, hdr_immdt, "ImmDt"}, {x_ieth, hdr_ieth, "IETH"},
    {x_cnp, hdr_cnp_reserved, "CNP reserved"},
};

bool expected_is_request(Operation op) {
  switch (op) {
    case Operation::send:
    case Operation::rdma_write:
    case Operation::rdma_read_request:
    case Operation::compare_swap:
    case Operation::fetch_add:
    case Operation::flush:
    case Operation::atomic_write: return true;
    default: return false;
  }
}

std::string unknown_name(unsigned op) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "UNKNOWN(0x%02x)", op);
  return buf;
}

}  // namespace

TEST_CASE("opcode table: every defined opcode carries exactly the spec's headers", "[wire][opcode]") {
  REQUIRE(expected_opcodes().size() == 63);  // 25 RC + 12 UC + 2 UD + CNP + 23 XRC
  for (const ExpectedOpcode& e : expected_opcodes()) {
    INFO("opcode 0x" << std::hex << unsigned(e.opcode) << " " << e.full_name);
    const OpcodeInfo& i = opcode_info(e.opcode);
    REQUIRE(i.valid());
    CHECK(opcode_info(Opcode(e.opcode)).name == i.name);  // the enum overload is the same row
    CHECK(opcode_name(e.opcode) == e.full_name);
    CHECK(i.transport == e.transport);
    CHECK(i.operation == e.operation);
    CHECK(i.position == e.position);
    CHECK(i.headers_length == e.headers_length);
    CHECK(i.has_payload == e.has_payload);
    CHECK(i.is_request == expected_is_request(e.operation));
    for (const HeaderPair& h : header_pairs) {
      INFO("header " << h.name);
      CHECK(i.has(h.actual) == ((e.headers & h.expected) != 0));
    }
    // No header bit outside the known set.
    CHECK((i.headers & ~uint16_t(0x3ff)) == 0);
    // headers_length() agrees with the row.
    CHECK(headers_length(i.headers) == e.headers_length);
    // The transport is the top three bits of the opcode (RC 000, UC 001, UD 011, CNP 100, XRC 101).
    const unsigned top = e.opcode >> 5;
    CHECK(top == (e.transport == Transport::rc ? 0u : e.transport == Transport::uc ? 1u
                  : e.transport == Transport::ud ? 3u : e.transport == Transport::xrc ? 5u : 4u));
  }
}

TEST_CASE("opcode table: spot checks straight from rocev2.md", "[wire][opcode]") {
  // RETH on WRITE_FIRST/WRITE_ONLY(_IMM)/READ_REQUEST, not on WRITE_MIDDLE/LAST.
  CHECK(opcode_info(0x06).has(hdr_reth));
  CHECK(opcode_info(0x0a).has(hdr_reth));
  CHECK(opcode_info(0x0b).has(hdr_reth));
  CHECK(opcode_info(0x0c).has(hdr_reth));
  CHECK_FALSE(opcode_info(0x07).has(hdr_reth));
  CHECK_FALSE(opcode_info(0x08).has(hdr_reth));
  CHECK_FALSE(opcode_info(0x09).has(hdr_reth));
  // AETH on READ_RESPONSE FIRST/LAST/ONLY but not MIDDLE.
  CHECK(opcode_info(0x0d).has(hdr_aeth));
  CHECK_FALSE(opcode_info(0x0e).has(hdr_aeth));
  CHECK(opcode_info(0x0f).has(hdr_aeth));
  CHECK(opcode_info(0x10).has(hdr_aeth));
  // CNP is 0x81; 0x80 (the InfiniBand value) is not an opcode here.
  CHECK(opcode_info(0x81).valid());
  CHECK(opcode_info(0x81).headers_length == 16);
  CHECK_FALSE(opcode_info(0x80).valid());
  CHECK(opcode_info(Opcode::cnp).transport == Transport::cnp);
  CHECK(opcode_info(Opcode::ud_send_only_imm).headers_length == 12);
  CHECK(opcode_info(Opcode::rc_atomic_acknowledge).headers_length == 12);
  CHECK(opcode_info(Opcode::rc_flush).headers_length == 20);
  CHECK(opcode_info(Opcode::rc_compare_swap).headers_length == 28);
  // XRC: the XRCETH comes first on requests, and responses are RC's.
  CHECK(opcode_info(Opcode::xrc_send_only).headers_length == 4);
  CHECK(opcode_info(Opcode::xrc_compare_swap).headers_length == 32);
  CHECK(opcode_info(Opcode::xrc_rdma_read_response_middle).headers_length == 0);
  CHECK(opcode_info(Opcode::xrc_acknowledge).headers == opcode_info(Opcode::rc_acknowledge).headers);
  CHECK_FALSE(opcode_info(0xb5).valid());
  CHECK_FALSE(opcode_info(0xbc).valid());  // no XRC FLUSH
}

TEST_CASE("opcode table: every undefined opcode is invalid", "[wire][opcode]") {
  // The undefined ranges, spelled out as in the brief.
  const std::pair<unsigned, unsigned> undefined[] = {
      {0x15, 0x15}, {0x18, 0x1b}, {0x1e, 0x1f}, {0x2c, 0x63}, {0x66, 0x80}, {0x82, 0x9f}, {0xb5, 0xb5},
      {0xb8, 0xff}};
  unsigned n_undefined = 0;
  for (auto [lo, hi] : undefined) {
    for (unsigned op = lo; op <= hi; ++op) {
      INFO("opcode 0x" << std::hex << op);
      const OpcodeInfo& i = opcode_info(uint8_t(op));
      CHECK_FALSE(i.valid());
      CHECK(i.name.empty());
      CHECK(opcode_name(uint8_t(op)) == unknown_name(op));
      CHECK(find_expected(uint8_t(op)) == nullptr);  // the two lists do not overlap
      ++n_undefined;
    }
  }
  // Defined + undefined covers all 256 values exactly once.
  CHECK(n_undefined + expected_opcodes().size() == 256);
  unsigned n_valid = 0;
  for (unsigned op = 0; op < 256; ++op) n_valid += opcode_info(uint8_t(op)).valid();
  CHECK(n_valid == 63);
  CHECK(opcode_name(0x80) == "UNKNOWN(0x80)");
  CHECK(opcode_name(0xff) == "UNKNOWN(0xff)");
}

TEST_CASE("opcode table: header sizes", "[wire][opcode]") {
  CHECK(headers_length(0) == 0);
  CHECK(headers_length(hdr_deth) == 8);
  CHECK(headers_length(hdr_feth) == 4);
  CHECK(headers_length(hdr_reth) == 16);
  CHECK(headers_length(hdr_atomic_eth) == 28);
  CHECK(headers_length(hdr_aeth) == 4);
  CHECK(headers_length(hdr_atomic_ack_eth) == 8);
  CHECK(headers_length(hdr_immdt) == 4);
  CHECK(headers_length(hdr_ieth) == 4);
  CHECK(headers_length(hdr_cnp_reserved) == 16);
  CHECK(headers_length(hdr_xrceth) == 4);
  CHECK(headers_length(0x3ff) == 8 + 4 + 4 + 16 + 28 + 4 + 8 + 4 + 4 + 16);
  CHECK(bth_size == 12);
  CHECK(icrc_size == 4);
}

TEST_CASE("transport and operation names", "[wire][opcode]") {
  CHECK(transport_name(Transport::rc) == "RC");
  CHECK(transport_name(Transport::uc) == "UC");
  CHECK(transport_name(Transport::rd) == "RD");
  CHECK(transport_name(Transport::ud) == "UD");
  CHECK(transport_name(Transport::cnp) == "CNP");
  CHECK(transport_name(Transport::xrc) == "XRC");
  CHECK(operation_name(Operation::send) == "send");
  CHECK(operation_name(Operation::rdma_write) == "rdma_write");
  CHECK(operation_name(Operation::rdma_read_request) == "rdma_read_request");
  CHECK(operation_name(Operation::rdma_read_response) == "rdma_read_response");
  CHECK(operation_name(Operation::acknowledge) == "acknowledge");
  CHECK(operation_name(Operation::atomic_acknowledge) == "atomic_acknowledge");
  CHECK(operation_name(Operation::compare_swap) == "compare_swap");
  CHECK(operation_name(Operation::fetch_add) == "fetch_add");
  CHECK(operation_name(Operation::flush) == "flush");
  CHECK(operation_name(Operation::atomic_write) == "atomic_write");
  CHECK(operation_name(Operation::cnp) == "cnp");
}

namespace {

// The set as a sorted list of opcodes, for readable failures.
std::vector<unsigned> members(const OpcodeSet& s) {
  std::vector<unsigned> v;
  for (unsigned op = 0; op < 256; ++op) {
    if (s.contains(uint8_t(op))) v.push_back(op);
  }
  return v;
}

std::vector<unsigned> parsed(std::string_view text) {
  auto s = parse_opcode_names(text);
  if (!s) return {999};  // marks "nullopt"
  return members(*s);
}

}  // namespace

TEST_CASE("parse_opcode_names", "[wire][opcode]") {
  using V = std::vector<unsigned>;
  // Full names, in any case, with '_', ' ' or '-' between transport and operation.
  CHECK(parsed("RC_SEND_FIRST") == V{0x00});
  CHECK(parsed("rc send_first") == V{0x00});
  CHECK(parsed("Rc-Send-First") == V{0x00});
  CHECK(parsed("UC_SEND_FIRST") == V{0x20});
  CHECK(parsed("UD_SEND_ONLY_IMM") == V{0x65});
  CHECK(parsed("RC_ATOMIC_ACKNOWLEDGE") == V{0x12});
  CHECK(parsed("CNP") == V{0x81});
  CHECK(parsed("cnp") == V{0x81});
  // A bare operation name selects every transport that has it.
  CHECK(parsed("XRC_SEND_ONLY") == V{0xa4});
  CHECK(parsed("xrc acknowledge") == V{0xb1});
  CHECK(parsed("SEND_FIRST") == V{0x00, 0x20, 0xa0});
  CHECK(parsed("send_only") == V{0x04, 0x24, 0x64, 0xa4});
  CHECK(parsed("RDMA_WRITE_ONLY_IMM") == V{0x0b, 0x2b, 0xab});
  CHECK(parsed("ACKNOWLEDGE") == V{0x11, 0xb1});
  CHECK(parsed("SEND_ONLY_INV") == V{0x17, 0xb7});
  CHECK(parsed("FLUSH") == V{0x1c});  // RC only: XRC has no FLUSH
  // Numbers: hex and decimal, up to 255.
  CHECK(parsed("0x04") == V{0x04});
  CHECK(parsed("0X81") == V{0x81});
  CHECK(parsed("4") == V{0x04});
  CHECK(parsed("129") == V{0x81});
  CHECK(parsed("0") == V{0x00});
  CHECK(parsed("255") == V{0xff});
  CHECK(parsed("0xff") == V{0xff});
  // Garbage and out of range.
  CHECK_FALSE(parse_opcode_names("256").has_value());
  CHECK_FALSE(parse_opcode_names("0x100").has_value());
  CHECK_FALSE(parse_opcode_names("").has_value());
  CHECK_FALSE(parse_opcode_names("garbage").has_value());
  CHECK_FALSE(parse_opcode_names("SEND").has_value());
  CHECK_FALSE(parse_opcode_names("RD_SEND_ONLY").has_value());
  CHECK_FALSE(parse_opcode_names("UD_SEND_FIRST").has_value());
  CHECK_FALSE(parse_opcode_names("4x").has_value());
  CHECK_FALSE(parse_opcode_names("-1").has_value());
  CHECK_FALSE(parse_opcode_names("0x").has_value());
  CHECK_FALSE(parse_opcode_names("RC_SEND_FIRSTX").has_value());
  // Every defined opcode's printed name parses back to exactly that opcode.
  for (const ExpectedOpcode& e : expected_opcodes()) {
    INFO(e.full_name);
    CHECK(parsed(e.full_name) == V{e.opcode});
  }
}

TEST_CASE("OpcodeSet", "[wire][opcode]") {
  OpcodeSet s;
  CHECK(s.empty());
  s.add(0);
  s.add(63);
  s.add(64);
  s.add(0x81);
  s.add(255);
  CHECK_FALSE(s.empty());
  CHECK(members(s) == std::vector<unsigned>{0, 63, 64, 0x81, 255});
}
