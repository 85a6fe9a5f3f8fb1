// crc32_copy: the copy must be exact and the CRC must equal the bitwise oracle's, at every length (the
// folding loop's whole blocks, its tail, the short path), alignment and starting CRC; and frames built
// with it carry the ICRC of the recipe.
#include <catch2/catch.hpp>

#include "transport/wire/build.hpp"
#include "transport/wire/crc32.hpp"
#include "transport/wire/crc32_copy.hpp"
#include "transport/wire/frame.hpp"
#include "transport/wire/opcode.hpp"
#include "wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;

namespace {

// The bitwise oracle continued from a zlib-convention CRC (its register holds the inverse).
uint32_t ref_crc32_from(uint32_t crc, std::span<const uint8_t> data) {
  uint32_t reg = ~crc;
  for (uint8_t byte : data) {
    reg ^= byte;
    for (int k = 0; k < 8; ++k) reg = (reg & 1) ? (reg >> 1) ^ 0xedb88320u : reg >> 1;
  }
  return ~reg;
}

using CopyFn = uint32_t (*)(uint32_t, uint8_t*, const uint8_t*, size_t);

// Copies src[src_off, +len) to a guarded buffer at dst_off and checks the bytes and the CRC.
void check_copy(CopyFn fn, const Bytes& src, size_t src_off, size_t dst_off, size_t len, uint32_t start) {
  constexpr uint8_t guard = 0xa5;
  Bytes dst(dst_off + len + 64, guard);
  const uint32_t got = fn(start, dst.data() + dst_off, src.data() + src_off, len);
  const std::span<const uint8_t> want_bytes(src.data() + src_off, len);
  INFO("length " << len << ", source offset " << src_off << ", destination offset " << dst_off << ", start 0x"
                 << std::hex << start);
  if (got != crc32_update(start, src.data() + src_off, len)) FAIL_CHECK("CRC differs from crc32_update");
  if (!std::equal(want_bytes.begin(), want_bytes.end(), dst.begin() + std::ptrdiff_t(dst_off))) {
    FAIL_CHECK("copied bytes differ");
  }
  for (size_t i = 0; i < dst_off; ++i) {
    if (dst[i] != guard) FAIL_CHECK("wrote before the destination at " << i);
  }
  for (size_t i = dst_off + len; i < dst.size(); ++i) {
    if (dst[i] != guard) FAIL_CHECK("wrote past the destination at " << i);
  }
}

}  // namespace

TEST_CASE("crc32_copy equals the bitwise oracle", "[wire][crc32]") {
  const Bytes data = random_bytes(9000 + 64, 5);
  // The oracle itself, for a few lengths (crc32_update, already checked against it, covers the rest).
  for (size_t n : {size_t(0), size_t(255), size_t(256), size_t(4096), size_t(9000)}) {
    for (uint32_t start : {0u, 0x2144DF1Cu, 0xFFFFFFFFu, 0x12345678u}) {
      Bytes dst(n);
      CHECK(crc32_copy(start, dst.data(), data.data(), n) == ref_crc32_from(start, {data.data(), n}));
      CHECK(dst == Bytes(data.begin(), data.begin() + std::ptrdiff_t(n)));
    }
  }
}

TEST_CASE("crc32_copy: every length, alignment and starting CRC", "[wire][crc32]") {
  const Bytes data = random_bytes(9000 + 64, 11);
  std::vector<detail::CopyKernel> kernels = detail::crc32_copy_kernels();
  if (kernels.empty()) WARN("this CPU has no VPCLMULQDQ: only the memcpy + crc32_update path is checked");
  kernels.push_back({"crc32_copy", crc32_copy});
  for (const auto& [name, fn] : kernels) {
    INFO("kernel " << name);
    // Every length through five blocks: no block, one block with every tail, the loop with every tail.
    for (size_t n = 0; n <= 5 * 256 + 1; ++n) check_copy(fn, data, 0, 0, n, 0x2144DF1Cu);
    // Misaligned source and destination, separately and together.
    for (size_t off = 1; off < 64; off += 3) {
      check_copy(fn, data, off, 0, 1000, 0);
      check_copy(fn, data, 0, off, 4096, 0xFFFFFFFFu);
      check_copy(fn, data, off, 63 - off, 4096 + off, 0x9e3779b9u);
    }
    // Jumbo and the sizes the frame builder sees at every path MTU.
    for (size_t n : {size_t(256), size_t(512), size_t(1024), size_t(2048), size_t(4096), size_t(9000)}) {
      for (uint32_t start : {0u, 1u, 0x80000000u, 0xFFFFFFFFu}) check_copy(fn, data, 7, 54, n, start);
    }
  }
}

TEST_CASE("crc32_copy chains with crc32_update at any split", "[wire][crc32]") {
  const Bytes data = random_bytes(3000, 13);
  const uint32_t whole = crc32_update(0, data.data(), data.size());
  Bytes dst(data.size());
  for (size_t cut : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(1500), size_t(2744), size_t(3000)}) {
    uint32_t c = crc32_update(0, data.data(), cut);
    c = crc32_copy(c, dst.data() + cut, data.data() + cut, data.size() - cut);
    CHECK(c == whole);
  }
}

TEST_CASE("Frames whose payload is CRC'd as it is copied (built or received) carry the recipe's ICRC", "[wire][crc32][icrc]") {
  // Payloads around the fused path's threshold and the path MTUs, every opcode position, both IP versions.
  for (const uint8_t opcode : {uint8_t(0x04), uint8_t(0x00), uint8_t(0x01), uint8_t(0x02), uint8_t(0x06),
                               uint8_t(0x07), uint8_t(0x0a), uint8_t(0x10), uint8_t(0x64)}) {
    const OpcodeInfo& info = opcode_info(opcode);
    for (const bool v6 : {false, true}) {
      for (size_t len : {size_t(252), size_t(256), size_t(257), size_t(1023), size_t(1024), size_t(4093), size_t(4096)}) {
        if ((info.position == Position::first || info.position == Position::middle) && len % 4 != 0) continue;
        const Bytes payload = random_bytes(len, len * 31 + opcode);
        const Bytes b = build_bytes(make_spec(opcode, v6 ? IpVersion::v6 : IpVersion::v4, false, payload, Fill(0)));
        const Frame f = parse(b);
        INFO("opcode 0x" << std::hex << int(opcode) << std::dec << " IPv" << (v6 ? 6 : 4) << " payload " << len);
        REQUIRE(f.is_roce());
        CHECK(f.roce.payload.size() == len);
        CHECK(std::equal(payload.begin(), payload.end(), f.roce.payload.begin()));
        CHECK(f.roce.icrc == ref_icrc(icrc_span(b, f), v6));
        CHECK(icrc_ok(f));
        // The receiver's side (early placement): the same ICRC, with the payload (and not its pad) copied.
        Bytes placed(len + 8, 0xee);
        CHECK(compute_icrc_copying_payload(f, placed.data() + 4) == f.roce.icrc);
        CHECK(std::equal(payload.begin(), payload.end(), placed.begin() + 4));
        CHECK(Bytes(placed.begin(), placed.begin() + 4) == Bytes(4, 0xee));
        CHECK(Bytes(placed.end() - 4, placed.end()) == Bytes(4, 0xee));
      }
    }
  }
}
