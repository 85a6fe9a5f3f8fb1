// `uroce check`'s rules (pcap_tools/conformance.hpp), each broken on purpose in frames built here, and kept
// by sequences that look odd but are legal: retransmissions, gaps, a READ's PSN span.
#include <catch2/catch.hpp>

#include "pcap_tools/conformance.hpp"
#include "tests/unit/support/capture_file.hpp"
#include "tests/unit/wire/wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;
using uroce::pcap_tools::ConformanceChecker;
using uroce::pcap_tools::Violation;

namespace {

constexpr uint32_t requester_qp = 0x11, responder_qp = 0x12;

// Frames of one RC connection, 10.77.0.11 (requester) <-> 10.77.0.12, fed to a checker as they are made.
struct Flow {
  ConformanceChecker checker;
  uint64_t frame = 0;
  std::vector<uint8_t> payload = std::vector<uint8_t>(4096, 0x5a);

  void feed(const Bytes& bytes) {
    Frame f;
    parse_frame(bytes, f);
    checker.add(++frame, f);
  }
  // Addresses are 8-byte aligned unless `va` says otherwise.
  Bytes make(Opcode op, uint32_t psn, size_t len, bool response = false, uint32_t dma_length = 0,
             uint64_t va = 0x10000) {
    FrameSpec s = make_spec(uint8_t(op), IpVersion::v4, false, std::span<const uint8_t>(payload.data(), len));
    if (response) std::swap(s.ipv4.src, s.ipv4.dst);
    s.headers.bth.dest_qp = response ? requester_qp : responder_qp;
    s.headers.bth.psn = psn & psn_mask;
    s.headers.reth.dma_length = dma_length;
    s.headers.reth.va = s.headers.atomic_eth.va = va;
    return build_bytes(s);
  }
  void request(Opcode op, uint32_t psn, size_t len, uint32_t dma_length = 0, uint64_t va = 0x10000) {
    feed(make(op, psn, len, false, dma_length, va));
  }
  void response(Opcode op, uint32_t psn, size_t len) { feed(make(op, psn, len, true)); }

  std::vector<std::string> rules() const {
    std::vector<std::string> out;
    for (const Violation& v : checker.violations()) out.push_back(v.rule);
    return out;
  }
};

using Rules = std::vector<std::string>;

}  // namespace

TEST_CASE("check: messages in sequence keep every rule", "[pcap][check]") {
  Flow f;
  f.request(Opcode::rc_send_first, 100, 1024);
  f.request(Opcode::rc_send_middle, 101, 1024);
  f.request(Opcode::rc_send_last, 102, 100);
  f.request(Opcode::rc_rdma_write_first, 103, 1024, 2048 + 7);
  f.request(Opcode::rc_rdma_write_middle, 104, 1024);
  f.request(Opcode::rc_rdma_write_last, 105, 7);
  f.request(Opcode::rc_rdma_write_only, 106, 64, 64);
  f.request(Opcode::rc_rdma_read_request, 107, 0, 2500);  // three response packets: PSNs 107-109
  f.response(Opcode::rc_rdma_read_response_first, 107, 1024);
  f.response(Opcode::rc_rdma_read_response_middle, 108, 1024);
  f.response(Opcode::rc_rdma_read_response_last, 109, 452);
  f.request(Opcode::rc_send_only, 110, 0);
  f.response(Opcode::rc_acknowledge, 110, 0);
  f.request(Opcode::rc_fetch_add, 111, 0);
  f.response(Opcode::rc_atomic_acknowledge, 111, 0);
  f.request(Opcode::rc_atomic_write, 112, 8, 8);
  f.response(Opcode::rc_rdma_read_response_only, 112, 0);  // an ATOMIC WRITE's answer
  CHECK(f.rules() == Rules{});
  CHECK(f.checker.flows() == 1);
}

TEST_CASE("check: opcode sequence", "[pcap][check]") {
  SECTION("a FIRST while a message is open") {
    Flow f;
    f.request(Opcode::rc_send_first, 1, 1024);
    f.request(Opcode::rc_send_first, 2, 1024);
    CHECK(f.rules() == Rules{"opcode_sequence"});
    CHECK(f.checker.violations()[0].frame == 2);
    CHECK_THAT(f.checker.violations()[0].text, Catch::Contains("SEND_FIRST while the send message of frame 1"));
  }
  SECTION("a MIDDLE with no message open") {
    Flow f;
    f.request(Opcode::rc_send_only, 1, 10);
    f.request(Opcode::rc_send_middle, 2, 1024);
    CHECK(f.rules() == Rules{"opcode_sequence"});
  }
  SECTION("a LAST of another operation") {
    Flow f;
    f.request(Opcode::rc_rdma_write_first, 1, 1024, 2000);
    f.request(Opcode::rc_send_last, 2, 976);
    CHECK(f.rules() == Rules{"opcode_sequence"});
  }
}

TEST_CASE("check: retransmissions and gaps are not violations", "[pcap][check]") {
  Flow f;
  f.request(Opcode::rc_send_first, 10, 1024);
  f.request(Opcode::rc_send_middle, 11, 1024);
  f.request(Opcode::rc_send_middle, 11, 1024);  // go-back-N resumes at a MIDDLE
  f.request(Opcode::rc_send_last, 12, 5);
  f.request(Opcode::rc_send_first, 13, 1024);
  f.request(Opcode::rc_send_last, 17, 5);       // PSNs 14-16 lost before the capture point
  f.request(Opcode::rc_send_middle, 20, 1024);  // the capture starts mid-message for this one, in effect
  f.request(Opcode::rc_send_last, 21, 5);
  CHECK(f.rules() == Rules{});
}

TEST_CASE("check: payload sizes", "[pcap][check]") {
  SECTION("a FIRST that is not a path MTU") {
    Flow f;
    f.request(Opcode::rc_send_first, 1, 1000);
    CHECK(f.rules() == Rules{"payload_size"});
  }
  SECTION("a MIDDLE of another MTU than the flow's") {
    Flow f;
    f.request(Opcode::rc_send_first, 1, 1024);
    f.request(Opcode::rc_send_middle, 2, 2048);
    CHECK(f.rules() == Rules{"payload_size"});
  }
  SECTION("a LAST larger than the MTU") {
    Flow f;
    f.request(Opcode::rc_send_first, 1, 1024);
    f.request(Opcode::rc_send_last, 2, 1025);
    CHECK(f.rules() == Rules{"payload_size"});
  }
  SECTION("an ONLY larger than any MTU") {
    Flow f;
    f.request(Opcode::rc_send_only, 1, 4096);
    CHECK(f.rules() == Rules{});
    f.payload.resize(5000);
    f.request(Opcode::rc_send_only, 2, 5000);
    CHECK(f.rules() == Rules{"payload_size"});
  }
}

TEST_CASE("check: an RDMA WRITE against its RETH", "[pcap][check]") {
  SECTION("FIRST ... LAST") {
    Flow f;
    f.request(Opcode::rc_rdma_write_first, 1, 1024, 3000);
    f.request(Opcode::rc_rdma_write_middle, 2, 1024);
    f.request(Opcode::rc_rdma_write_last, 3, 500);
    CHECK(f.rules() == Rules{"write_length"});
    CHECK_THAT(f.checker.violations()[0].text, Catch::Contains("carried 2548 bytes, its RETH says 3000"));
  }
  SECTION("ONLY") {
    Flow f;
    f.request(Opcode::rc_rdma_write_only, 1, 64, 100);
    CHECK(f.rules() == Rules{"write_length"});
  }
}

TEST_CASE("check: READ responses against the request", "[pcap][check]") {
  SECTION("short") {
    Flow f;
    f.request(Opcode::rc_rdma_read_request, 50, 0, 2048);
    f.response(Opcode::rc_rdma_read_response_first, 50, 1024);
    f.response(Opcode::rc_rdma_read_response_last, 51, 512);
    CHECK(f.rules() == Rules{"read_response_length"});
  }
  SECTION("ONLY") {
    Flow f;
    f.request(Opcode::rc_rdma_read_request, 50, 0, 64);
    f.response(Opcode::rc_rdma_read_response_only, 50, 32);
    CHECK(f.rules() == Rules{"read_response_length"});
  }
}

TEST_CASE("check: atomic operands", "[pcap][check]") {
  SECTION("an unaligned CMP_SWAP or FETCH_ADD") {
    Flow f;
    f.request(Opcode::rc_compare_swap, 1, 0, 0, 0x10004);
    f.request(Opcode::rc_fetch_add, 2, 0, 0, 0x10001);
    CHECK(f.rules() == Rules{"atomic_operand", "atomic_operand"});
  }
  SECTION("an ATOMIC WRITE of other than 8 bytes, or unaligned") {
    Flow f;
    f.request(Opcode::rc_atomic_write, 1, 4, 8);
    f.request(Opcode::rc_atomic_write, 2, 8, 16);
    f.request(Opcode::rc_atomic_write, 3, 8, 8, 0x10004);
    CHECK(f.rules() == Rules{"atomic_operand", "atomic_operand", "atomic_operand"});
    CHECK_THAT(f.checker.violations()[0].text, Catch::Contains("ATOMIC WRITE of 4 bytes (RETH DMA length 8)"));
  }
  SECTION("an ATOMIC WRITE answered with data") {
    Flow f;
    f.request(Opcode::rc_atomic_write, 7, 8, 8);
    f.response(Opcode::rc_rdma_read_response_only, 7, 8);
    CHECK(f.rules() == Rules{"read_response_length"});
  }
}

TEST_CASE("check: bad ICRCs and malformed RoCE frames", "[pcap][check]") {
  Flow f;
  Bytes bad = f.make(Opcode::rc_send_only, 1, 16);
  bad[bad.size() - 5] ^= 1;  // a payload byte
  f.feed(bad);
  Bytes cut = f.make(Opcode::rc_send_only, 2, 16);
  cut.resize(14 + 20 + 8 + 6);  // the BTH cut short
  f.feed(cut);
  CHECK(f.rules() == Rules{"bad_icrc", "malformed"});
}

TEST_CASE("check: rxe's captures keep every rule", "[pcap][check]") {
  for (const auto& c : uroce::test::captures()) {
    ConformanceChecker checker;
    uint64_t n = 0;
    for (const auto& bytes : c.frames) {
      Frame f;
      parse_frame(bytes, f);
      checker.add(++n, f);
    }
    INFO(c.name);
    for (const Violation& v : checker.violations()) UNSCOPED_INFO(v.rule << " frame " << v.frame << ": " << v.text);
    CHECK(checker.violations().empty());
    CHECK(checker.roce_frames() > 0);
  }
}
