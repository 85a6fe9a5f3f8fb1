// The PRNG and the corruption model: the two pieces whose exact behaviour every seeded test relies on.
#include <set>
#include <catch2/catch.hpp>

#include <set>
#include <vector>

#include "transport/sim/corruption.hpp"
#include "transport/sim/random.hpp"
#include "transport/wire/build.hpp"
#include "transport/wire/frame.hpp"

using namespace uroce;
using namespace uroce::sim;

TEST_CASE("splitmix64 and xoshiro256** match an independent implementation", "[sim][random]") {
  uint64_t s = 0;
  CHECK(splitmix64(s) == 0xe220a8397b1dcdafull);  // the published first output for seed 0
  // Golden values from a Python transcription of the reference C code, seeded the same way.
  Rng r(42);
  CHECK(r.next() == 0x15780b2e0c2ec716ull);
  CHECK(r.next() == 0x6104d9866d113a7eull);
  CHECK(r.next() == 0xae17533239e499a1ull);
  CHECK(r.next() == 0xecb8ad4703b360a1ull);
  Rng z(0);
  CHECK(z.next() == 0x99ec5f36cb75f2b4ull);
  CHECK(z.next() == 0xbf6e1f784956452aull);
}

TEST_CASE("probabilities from raw draws are exact at the edges and monotone", "[sim][random]") {
  CHECK_FALSE(Rng::chance(0, 0.0));
  CHECK_FALSE(Rng::chance(0, -1.0));
  CHECK(Rng::chance(~uint64_t(0), 1.0));
  CHECK(Rng::chance(0, 1e-12));                      // the smallest draw is below any positive p
  CHECK_FALSE(Rng::chance(~uint64_t(0), 1 - 1e-12)); // the largest is above any p < 1
  CHECK(Rng::chance(uint64_t(1) << 62, 0.25 + 1e-9));
  CHECK_FALSE(Rng::chance(uint64_t(1) << 62, 0.25));
  Rng r(7);
  for (int i = 0; i < 1000; ++i) {
    const uint64_t d = r.next();
    if (Rng::chance(d, 0.1)) CHECK(Rng::chance(d, 0.2));
  }
  CHECK(Rng::up_to(12345, 0) == 0);
  CHECK(Rng::up_to(12345, 9) == 5);
  CHECK(Rng::up_to(~uint64_t(0), ~uint64_t(0)) == ~uint64_t(0));
}

namespace {

std::vector<uint8_t> sample_frame(wire::IpVersion v, bool vlan, size_t payload_len) {
  std::vector<uint8_t> payload(payload_len, 0xa5);
  wire::FrameSpec s;
  s.eth.src = {{2, 0, 0, 0, 0, 1}};
  s.eth.dst = {{2, 0, 0, 0, 0, 2}};
  s.eth.has_vlan = vlan;
  s.eth.vlan_tci = 0x2005;
  s.ip_version = v;
  s.ipv4.src = 0x0a000001;
  s.ipv4.dst = 0x0a000002;
  s.ipv6.src = *wire::parse_ip("2001:db8::1");
  s.ipv6.dst = *wire::parse_ip("2001:db8::2");
  s.ipv6.flow_label = 0x12345;
  s.headers.bth.opcode = 0x0a;  // WRITE_ONLY: RETH and a payload, so extension headers are covered too
  s.headers.bth.dest_qp = 0x123;
  s.headers.bth.psn = 77;
  s.headers.reth.va = 0x1000;
  s.headers.reth.rkey = 0x42;
  s.headers.reth.dma_length = uint32_t(payload_len);
  s.payload = payload;
  std::vector<uint8_t> f(wire::frame_size(s));
  const wire::BuildResult r = wire::build_frame(s, f);
  REQUIRE(r.ok());
  f.resize(r.size);
  return f;
}

bool detected(std::span<const uint8_t> f) {
  wire::Frame p;
  wire::parse_frame(f, p);
  return !p.is_roce() || !wire::icrc_ok(p);
}

}  // namespace

TEST_CASE("corruptible bits exclude the Ethernet header and exactly the ICRC-masked fields", "[sim][corruption]") {
  const auto v4 = sample_frame(wire::IpVersion::v4, false, 16);
  // Everything after Ethernet, minus TOS, TTL, IP checksum (32 bits), UDP checksum (16), BTH byte 4 (8).
  CHECK(corruptible_bits(v4, CorruptionScope::icrc_protected) == (v4.size() - 14) * 8 - 32 - 16 - 8);
  CHECK(corruptible_bits(v4, CorruptionScope::anywhere) == v4.size() * 8);
  const auto v6 = sample_frame(wire::IpVersion::v6, true, 16);
  // After Ethernet + VLAN, minus traffic class + flow label (28), hop limit (8), UDP checksum, BTH byte 4.
  CHECK(corruptible_bits(v6, CorruptionScope::icrc_protected) == (v6.size() - 18) * 8 - 28 - 8 - 16 - 8);
  const std::vector<uint8_t> junk = {1, 2, 3};
  CHECK(corruptible_bits(junk, CorruptionScope::icrc_protected) == 24);
}

TEST_CASE("every single protected bit flip is detected by parse or ICRC", "[sim][corruption]") {
  for (auto v : {wire::IpVersion::v4, wire::IpVersion::v6}) {
    for (bool vlan : {false, true}) {
      for (size_t payload : {size_t(0), size_t(13), size_t(64)}) {
        const auto frame = sample_frame(v, vlan, payload);
        REQUIRE_FALSE(detected(frame));
        const size_t n = corruptible_bits(frame, CorruptionScope::icrc_protected);
        std::set<size_t> flipped;
        size_t missed = 0;
        for (size_t k = 0; k < n; ++k) {
          auto copy = frame;
          const auto bit = flip_bit(copy, CorruptionScope::icrc_protected, k);
          REQUIRE(bit);
          flipped.insert(*bit);
          REQUIRE(copy != frame);
          if (!detected(copy)) ++missed;
        }
        INFO("ip v" << int(v) << " vlan " << vlan << " payload " << payload);
        CHECK(missed == 0);
        CHECK(flipped.size() == n);  // every draw value names a different bit
      }
    }
  }
}

TEST_CASE("flips anywhere can go unnoticed, which is why that scope is not the default", "[sim][corruption]") {
  const auto frame = sample_frame(wire::IpVersion::v4, false, 16);
  size_t missed = 0;
  for (size_t k = 0; k < frame.size() * 8; ++k) {
    auto copy = frame;
    REQUIRE(flip_bit(copy, CorruptionScope::anywhere, k) == k);
    if (!detected(copy)) ++missed;
  }
  // The MAC addresses (96 bits) and the masked fields (56 bits) at least.
  CHECK(missed >= 96 + 56);
}
