// The ICRC: a golden vector from real hardware, an independent bitwise oracle, and which bits it covers.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cpuid.h>

#include <string>
#include <string_view>
#include <vector>

#include "transport/wire/build.hpp"
#include "transport/wire/crc32.hpp"
#include "transport/wire/crc32_copy.hpp"
#include "transport/wire/frame.hpp"
#include "transport/wire/icrc.hpp"
#include "wire_test_support.hpp"

using namespace uroce::wire;
using namespace uroce::wire::test;

namespace {

Bytes from_hex(std::string_view hex) {
  Bytes b;
  int hi = -1;
  for (char c : hex) {
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else continue;  // spaces
    if (hi < 0) {
      hi = v;
    } else {
      b.push_back(uint8_t(hi << 4 | v));
      hi = -1;
    }
  }
  return b;
}

// The CNP captured from a ConnectX-4 Lx (rocev2.md).
const Bytes& golden_cnp() {
  static const Bytes b = from_hex(
      "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161 0a001101 0a001201 000012b7 00280000"
      "8100ffff 40000118 00000000 00000000000000000000000000000000 82fd002a");
  return b;
}

// Is bit `bit` of byte `i` of the IP packet one of the masked (variant) bits? Straight from the recipe.
bool masked_bit(size_t i, int bit, bool ipv6, size_t ihl) {
  if (!ipv6) {
    if (i == 1 || i == 8 || i == 10 || i == 11) return true;  // TOS, TTL, header checksum
  } else {
    if (i == 0 && bit < 4) return true;                      // traffic class, high nibble
    if (i == 1 || i == 2 || i == 3 || i == 7) return true;   // TC low nibble + flow label; hop limit
  }
  if (i == ihl + 6 || i == ihl + 7) return true;  // UDP checksum
  if (i == ihl + 8 + 4) return true;              // BTH byte 4
  return false;
}

}  // namespace

TEST_CASE("ICRC: the golden ConnectX-4 Lx CNP", "[wire][icrc]") {
  const Bytes& b = golden_cnp();
  REQUIRE(b.size() == 74);
  const Frame f = parse(b);
  REQUIRE(f.error == ParseError::none);
  CHECK(f.kind == FrameKind::roce);
  CHECK(f.eth.dst == MacAddress{{0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2}});
  CHECK(f.eth.src == MacAddress{{0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32}});
  CHECK(f.ipv4.src == 0x0a001101);  // 10.0.17.1
  CHECK(f.ipv4.dst == 0x0a001201);  // 10.0.18.1
  CHECK(f.ipv4.tos == 0xc2);
  CHECK(f.ipv4.checksum_ok);
  CHECK(f.ipv4.dont_fragment);
  CHECK(f.udp.src_port == 0);
  CHECK(f.udp.dst_port == 4791);
  CHECK(f.udp.checksum == 0);
  const Bth& bth = f.roce.bth();
  CHECK(bth.opcode == 0x81);
  CHECK(f.roce.info->transport == Transport::cnp);
  CHECK(bth.becn);
  CHECK_FALSE(bth.fecn);
  CHECK(bth.pkey == 0xffff);
  CHECK(bth.dest_qp == 0x118);
  CHECK(bth.psn == 0);
  CHECK_FALSE(bth.ack_req);
  for (uint8_t x : f.roce.headers.cnp_reserved) CHECK(x == 0);
  CHECK(f.roce.payload.empty());
  // Wire bytes 82 fd 00 2a, least-significant byte first.
  CHECK(load_icrc(&b[70]) == 0x2a00fd82);
  CHECK(f.roce.icrc == 0x2a00fd82);
  CHECK(compute_icrc(f) == 0x2a00fd82);
  CHECK(icrc_ok(f));
  // The oracle agrees with the hardware, so it can be trusted below.
  CHECK(ref_icrc(icrc_span(b, f), false) == 0x2a00fd82);

  // And the builder, given what the CNP means, writes the very same 74 bytes.
  FrameSpec s;
  s.eth.dst = f.eth.dst;
  s.eth.src = f.eth.src;
  s.ipv4.src = 0x0a001101;
  s.ipv4.dst = 0x0a001201;
  s.ipv4.tos = 0xc2;
  s.ipv4.ttl = 64;
  s.ipv4.identification = 0x718c;
  s.udp_src_port = 0;
  s.headers.bth.opcode = 0x81;
  s.headers.bth.becn = true;
  s.headers.bth.dest_qp = 0x118;
  CHECK(build_bytes(s) == b);
}

TEST_CASE("ICRC: load_icrc / store_icrc are little-endian", "[wire][icrc]") {
  uint8_t buf[6] = {0xee, 0, 0, 0, 0, 0xee};
  store_icrc(buf + 1, 0x12345678);
  CHECK(buf[0] == 0xee);
  CHECK(buf[1] == 0x78);
  CHECK(buf[2] == 0x56);
  CHECK(buf[3] == 0x34);
  CHECK(buf[4] == 0x12);
  CHECK(buf[5] == 0xee);
  CHECK(load_icrc(buf + 1) == 0x12345678);
}

TEST_CASE("ICRC: every single-bit change outside the masked fields changes it, and no masked bit does",
          "[wire][icrc]") {
  for (bool v6 : {false, true}) {
    for (uint8_t op : {0x0b, 0x12, 0x65, 0x81}) {
      INFO("IPv" << (v6 ? 6 : 4) << " opcode 0x" << std::hex << unsigned(op));
      const Bytes b = build_simple(op, op == 0x0b || op == 0x65 ? 61 : 0, v6 ? IpVersion::v6 : IpVersion::v4);
      const Frame f = parse(b);
      REQUIRE(f.is_roce());
      const size_t ihl = v6 ? 40 : 20;
      const Bytes packet(icrc_span(b, f).begin(), icrc_span(b, f).end());
      const uint32_t base = compute_icrc(packet, v6 ? IpVersion::v6 : IpVersion::v4, ihl);
      REQUIRE(base == f.roce.icrc);
      unsigned masked = 0, covered = 0;
      for (size_t i = 0; i < packet.size(); ++i) {
        for (int bit = 0; bit < 8; ++bit) {
          Bytes p = packet;
          p[i] ^= uint8_t(1u << bit);
          const uint32_t c = compute_icrc(p, v6 ? IpVersion::v6 : IpVersion::v4, ihl);
          if (masked_bit(i, bit, v6, ihl)) {
            ++masked;
            if (c != base) FAIL_CHECK("masked bit " << bit << " of byte " << i << " changed the ICRC");
          } else {
            ++covered;
            if (c == base) FAIL_CHECK("bit " << bit << " of byte " << i << " is not covered by the ICRC");
          }
        }
      }
      // IPv4: TOS, TTL, checksum (4 bytes); IPv6: TC + flow label (28 bits), hop limit (8); both: UDP
      // checksum (16) and BTH byte 4 (8).
      CHECK(masked == (v6 ? 28u + 8 : 32u) + 16 + 8);
      CHECK(covered == packet.size() * 8 - masked);
    }
  }
}

TEST_CASE("ICRC: frame-level flips of invariant fields are detected", "[wire][icrc]") {
  for (bool v6 : {false, true}) {
    INFO("IPv" << (v6 ? 6 : 4));
    const Bytes good = build_simple(0x0b, 64, v6 ? IpVersion::v6 : IpVersion::v4, true);
    const Layout l = layout_of(good);
    REQUIRE(icrc_ok(parse(good)));
    struct Flip {
      const char* what;
      size_t offset;
      uint8_t mask;
    };
    const size_t payload = l.bth + 12 + 16 + 4;
    const std::vector<Flip> flips = {
        {"payload first byte", payload, 0x01},
        {"payload last byte", payload + 63, 0x80},
        {"PSN low bit", l.bth + 11, 0x01},
        {"PSN high bit", l.bth + 9, 0x80},
        {"dest QP", l.bth + 7, 0x04},
        {"dest QP high", l.bth + 5, 0x80},
        {"SE", l.bth + 1, 0x80},
        {"MigReq", l.bth + 1, 0x40},
        {"P_Key", l.bth + 2, 0x01},
        {"AckReq", l.bth + 8, 0x80},
        {"BTH reserved7", l.bth + 8, 0x01},
        {"RETH VA", l.bth + 12, 0x10},
        {"RETH R_Key", l.bth + 12 + 8, 0x01},
        {"RETH length", l.bth + 12 + 15, 0x01},
        {"ImmDt", l.bth + 12 + 16, 0x01},
        {"IP source", l.l3 + (v6 ? 8 : 12), 0x01},
        {"IP source last byte", l.l3 + (v6 ? 23 : 15), 0x01},
        {"IP destination", l.l3 + (v6 ? 39 : 19), 0x80},
        {"UDP source port", l.l4 + 1, 0x01},
    };
    for (const Flip& fl : flips) {
      INFO(fl.what);
      Bytes b = good;
      b[fl.offset] ^= fl.mask;
      const Frame f = parse(b);
      REQUIRE(f.is_roce());  // still a well-formed frame...
      CHECK_FALSE(icrc_ok(f));  // ...whose ICRC no longer matches
    }
    if (!v6) {
      // IPv4 identification and DF are invariant too (the IPv4 checksum goes bad, which is not fatal).
      for (auto [off, mask] : {std::pair<size_t, uint8_t>{l.l3 + 5, 0x01}, {l.l3 + 6, 0x40}}) {
        Bytes b = good;
        b[off] ^= mask;
        const Frame f = parse(b);
        REQUIRE(f.is_roce());
        CHECK_FALSE(icrc_ok(f));
      }
    }
  }
  // Pad bytes are covered as well.
  const Bytes good = build_simple(0x04, 5);  // 3 pad bytes
  Bytes b = good;
  b[b.size() - 5] ^= 0x01;
  const Frame f = parse(b);
  REQUIRE(f.is_roce());
  CHECK(f.roce.payload.size() == 5);
  CHECK(std::equal(f.roce.payload.begin(), f.roce.payload.end(), parse(good).roce.payload.begin()));
  CHECK_FALSE(icrc_ok(f));
}

TEST_CASE("ICRC: frame-level changes of the masked fields leave it unchanged", "[wire][icrc]") {
  for (bool v6 : {false, true}) {
    INFO("IPv" << (v6 ? 6 : 4));
    const Bytes good = build_simple(0x04, 32, v6 ? IpVersion::v6 : IpVersion::v4);
    const Layout l = layout_of(good);
    const uint32_t base = parse(good).roce.icrc;
    std::vector<std::pair<const char*, std::pair<size_t, uint8_t>>> flips = {
        {"UDP checksum", {l.l4 + 6, 0xff}},
        {"UDP checksum low", {l.l4 + 7, 0x01}},
        {"FECN", {l.bth + 4, 0x80}},
        {"BECN", {l.bth + 4, 0x40}},
        {"BTH reserved6", {l.bth + 4, 0x3f}},
    };
    if (!v6) {
      flips.push_back({"TOS (ECN CE)", {l.l3 + 1, 0x03}});
      flips.push_back({"TOS (DSCP)", {l.l3 + 1, 0xfc}});
      flips.push_back({"TTL", {l.l3 + 8, 0x3f}});
      flips.push_back({"header checksum", {l.l3 + 10, 0x12}});
      flips.push_back({"header checksum low", {l.l3 + 11, 0x80}});
    } else {
      flips.push_back({"traffic class high nibble", {l.l3 + 0, 0x0f}});
      flips.push_back({"traffic class low nibble (ECN)", {l.l3 + 1, 0x30}});
      flips.push_back({"flow label high nibble", {l.l3 + 1, 0x0f}});
      flips.push_back({"flow label", {l.l3 + 2, 0xff}});
      flips.push_back({"flow label low", {l.l3 + 3, 0x01}});
      flips.push_back({"hop limit", {l.l3 + 7, 0xff}});
    }
    for (const auto& [what, where] : flips) {
      INFO(what);
      Bytes b = good;
      b[where.first] ^= where.second;
      const Frame f = parse(b);
      REQUIRE(f.is_roce());
      CHECK(compute_icrc(f) == base);
      CHECK(icrc_ok(f));
    }
  }
}

TEST_CASE("ICRC: compute_icrc equals the bitwise oracle on random frames", "[wire][icrc]") {
  Rng rng(7);
  const auto& ops = expected_opcodes();
  for (int iter = 0; iter < 300; ++iter) {
    const ExpectedOpcode& e = ops[rng.below(unsigned(ops.size()))];
    const bool v6 = rng.below(2);
    size_t len = e.has_payload ? rng.below(1500) : 0;
    if (e.position == Position::first || e.position == Position::middle) len &= ~size_t(3);
    const Bytes payload = random_bytes(len, uint64_t(iter));
    FrameSpec s = make_spec(e.opcode, v6 ? IpVersion::v6 : IpVersion::v4, rng.below(2), payload,
                            Fill(rng.below(3)));
    // Randomise what the ICRC covers and what it masks.
    s.ipv4.src = uint32_t(rng.next());
    s.ipv4.tos = uint8_t(rng.next());
    s.ipv4.ttl = uint8_t(rng.next());
    s.ipv4.identification = uint16_t(rng.next());
    s.ipv6.traffic_class = uint8_t(rng.next());
    s.ipv6.flow_label = uint32_t(rng.next()) & 0xfffff;
    s.ipv6.hop_limit = uint8_t(rng.next());
    for (auto& x : s.ipv6.dst.bytes) x = uint8_t(rng.next());
    s.udp_src_port = uint16_t(rng.next());
    s.headers.bth.psn = uint32_t(rng.next()) & 0xffffff;
    s.headers.bth.dest_qp = uint32_t(rng.next()) & 0xffffff;
    s.headers.bth.fecn = rng.below(2);
    s.headers.bth.becn = rng.below(2);
    s.headers.reth.va = rng.next();
    s.headers.aeth.msn = uint32_t(rng.next()) & 0xffffff;
    const Bytes b = build_bytes(s);
    const Frame f = parse(b);
    INFO(e.full_name << " IPv" << (v6 ? 6 : 4) << " payload " << len);
    REQUIRE(f.is_roce());
    const uint32_t want = ref_icrc(icrc_span(b, f), v6);
    CHECK(f.roce.icrc == want);
    CHECK(compute_icrc(f) == want);
    CHECK(compute_icrc(icrc_span(b, f), v6 ? IpVersion::v6 : IpVersion::v4, v6 ? 40 : 20) == want);
    CHECK(icrc_ok(f));
  }
}

TEST_CASE("ICRC: the CRC of the 8 x 0xFF LRH stand-in is the constant icrc.cpp starts from", "[wire][icrc]") {
  const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  CHECK(crc32_update(0, ones, 8) == 0x2144DF1Cu);
  CHECK(~0x2144DF1Cu == 0xDEBB20E3u);  // the raw register state rocev2.md names
}

TEST_CASE("ICRC: the 0xDEBB20E3 shortcut of rocev2.md", "[wire][icrc]") {
  // A raw (non-inverting) CRC register started at 0xDEBB20E3, skipping the 8 x 0xFF, gives the same ICRC.
  const Bytes b = build_simple(0x05, 17, IpVersion::v6);
  const Frame f = parse(b);
  REQUIRE(f.is_roce());
  Bytes m(icrc_span(b, f).begin(), icrc_span(b, f).end());
  const uint32_t w = (uint32_t(m[0]) << 24 | uint32_t(m[1]) << 16 | uint32_t(m[2]) << 8 | m[3]) | 0x0fffffff;
  m[0] = uint8_t(w >> 24), m[1] = uint8_t(w >> 16), m[2] = uint8_t(w >> 8), m[3] = uint8_t(w);
  m[7] = 0xff;
  m[46] = m[47] = 0xff;
  m[52] = 0xff;
  uint32_t reg = 0xdebb20e3;
  for (uint8_t byte : m) {
    reg ^= byte;
    for (int k = 0; k < 8; ++k) reg = (reg & 1) ? (reg >> 1) ^ 0xedb88320u : reg >> 1;
  }
  CHECK((reg ^ 0xffffffff) == f.roce.icrc);
  CHECK(~ref_crc32(Bytes(8, 0xff)) == 0xdebb20e3);
}

TEST_CASE("crc32_update", "[wire][crc32]") {
  const std::string check = "123456789";
  const auto* p = reinterpret_cast<const uint8_t*>(check.data());
  CHECK(crc32_update(0, p, 9) == 0xcbf43926);
  CHECK(ref_crc32(std::span<const uint8_t>(p, 9)) == 0xcbf43926);
  CHECK(crc32_update(0, p, 0) == 0);
  CHECK(crc32_update(0xcbf43926, p, 0) == 0xcbf43926);
  // Chaining at every split point equals one shot.
  for (size_t k = 0; k <= 9; ++k) CHECK(crc32_update(crc32_update(0, p, k), p + k, 9 - k) == 0xcbf43926);
  // Every length up to 600 (all of the library's tail paths) and a jumbo frame, against the oracle.
  const Bytes data = random_bytes(9000, 99);
  for (size_t n = 0; n <= 600; ++n) {
    const uint32_t want = ref_crc32(std::span<const uint8_t>(data.data(), n));
    if (crc32_update(0, data.data(), n) != want) FAIL_CHECK("length " << n);
    const size_t cut = n / 3;
    if (crc32_update(crc32_update(0, data.data(), cut), data.data() + cut, n - cut) != want) {
      FAIL_CHECK("chained, length " << n);
    }
  }
  CHECK(crc32_update(0, data.data(), data.size()) == ref_crc32(data));
  // Unaligned starts.
  for (size_t off = 1; off < 16; ++off) {
    CHECK(crc32_update(0, data.data() + off, 1000) == ref_crc32(std::span<const uint8_t>(data.data() + off, 1000)));
  }
}

namespace {

// XINUSE (XGETBV with ECX = 1): which parts of the extended register state are in use. Bit 2 is the upper
// halves of the YMM registers, bit 6 the upper halves of the ZMM registers (Intel SDM vol. 1, 13.6).
constexpr uint64_t upper_vector_state = uint64_t(1) << 2 | uint64_t(1) << 6;

bool cpu_reports_xinuse() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(0xd, 1, &a, &b, &c, &d) && (a & (1u << 2)) != 0;
}

__attribute__((target("xsave"))) uint64_t xinuse() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return uint64_t(hi) << 32 | lo;
}

}  // namespace

// ISA-L's AVX-512 kernel returns with the upper vector state in use, which makes every legacy-SSE
// instruction after it slow on Intel cores (crc32.cpp, docs/icrc.md). crc32_update and crc32_copy must leave
// it clean.
TEST_CASE("crc32_update and crc32_copy leave the upper halves of the vector registers unused", "[wire][crc32]") {
  if (!cpu_reports_xinuse()) {
    WARN("this CPU does not report XINUSE (XGETBV ECX=1): not checked");
    return;
  }
  const Bytes data = random_bytes(4096, 7);
  for (size_t n : {size_t(64), size_t(256), size_t(4096)}) {
    const uint32_t crc = crc32_update(0, data.data(), n);
    const uint64_t in_use = xinuse();
    INFO("length " << n << ", XINUSE 0x" << std::hex << in_use);
    CHECK((in_use & upper_vector_state) == 0);
    CHECK(crc == ref_crc32(std::span<const uint8_t>(data.data(), n)));
    // crc32_copy's folding loop uses the ZMM registers itself.
    Bytes copy(n);
    const uint32_t copied = crc32_copy(0, copy.data(), data.data(), n);
    CHECK((xinuse() & upper_vector_state) == 0);
    CHECK(copied == crc);
  }
}

TEST_CASE("ICRC: every short packet length and header layout, at the edges of readable memory", "[wire][icrc]") {
  // Packets up to 256 bytes take a folded path (crc32_fold.hpp). On CPUs with AVX-512 and VPCLMULQDQ
  // it loads whole 64-byte registers with the bytes before the packet masked off; elsewhere 16-byte lanes. Here each packet starts
  // right after a page that may not be read and ends right before another, so a load that strayed outside
  // it would crash; and every length from the smallest header to past the folded path's limit is checked
  // against the bitwise oracle, for IPv4 with each header length and for IPv6.
  const long page = sysconf(_SC_PAGESIZE);
  auto* region = static_cast<uint8_t*>(mmap(nullptr, size_t(page) * 4, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  REQUIRE(region != MAP_FAILED);
  REQUIRE(mprotect(region, size_t(page), PROT_NONE) == 0);
  REQUIRE(mprotect(region + 3 * page, size_t(page), PROT_NONE) == 0);
  // Every way this CPU has (on one without AVX-512, the 16-byte lanes: the first lane's 1 to 16 bytes,
  // and the LRH register's four bytes split between two lanes), each up to its 256-byte limit; and
  // compute_icrc itself past it.
  std::vector<detail::ShortIcrcKernel> kernels = detail::short_icrc_kernels();
  kernels.push_back({"compute_icrc", compute_icrc});
  Rng rng(11);
  for (const auto& [name, fn] : kernels) {
    const size_t longest = std::string_view(name) == "compute_icrc" ? 300 : 256;
    for (const bool v6 : {false, true}) {
      for (size_t ihl = v6 ? 40 : 20; ihl <= (v6 ? 40 : 60); ihl += 4) {
        for (size_t n = ihl + 20; n <= longest; ++n) {
          for (const bool at_start : {true, false}) {
            uint8_t* p = at_start ? region + page : region + 3 * page - n;
            for (size_t i = 0; i < n; ++i) p[i] = uint8_t(rng.next());
            p[0] = v6 ? uint8_t(0x60 | (p[0] & 0x0f)) : uint8_t(0x40 | (ihl / 4));
            INFO(name << ": IPv" << (v6 ? 6 : 4) << " header " << ihl << " packet " << n
                      << (at_start ? " at a page start" : " at a page end"));
            CHECK(fn(std::span<const uint8_t>(p, n), v6 ? IpVersion::v6 : IpVersion::v4, ihl) ==
                  ref_icrc(std::span<const uint8_t>(p, n), v6));
          }
        }
      }
    }
  }
  munmap(region, size_t(page) * 4);
}
