// Receive side scaling hash (transport/flow/rss_hash.hpp). The Toeplitz hash is checked against the
// verification data Microsoft publishes with the RSS specification ("Verifying the RSS Hash Calculation",
// Windows driver docs: the key and both tables, IPv4 and IPv6) and against a second, bit-by-bit
// implementation here that follows the definition literally. rss_hash is checked on frames built by hand
// (tests/unit/support/test_frames.hpp), byte by byte from the header layouts, with the expected input
// assembled from the parts the frame was built from rather than read back out of it; every prefix of every
// frame is hashed from a buffer of exactly that size, so that the sanitizer builds see any read past the end.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "tests/unit/support/test_frames.hpp"
#include "transport/flow/rss_hash.hpp"

using namespace uroce::transport::flow;
using namespace uroce::test::frames;

namespace {

using Addr4 = std::array<uint8_t, 4>;

constexpr uint8_t ipv6_hop_by_hop = 0;

// The verification key of the RSS specification (also the default key of many NICs and drivers).
const Bytes ms_key{0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                   0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                   0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};

template <typename Range>
void append(Bytes& b, const Range& r) {
  b.insert(b.end(), r.begin(), r.end());
}

// The frames hold IPv4 addresses as numbers, the tables and the hash input as the bytes on the wire.
Addr4 bytes4(uint32_t a) { return Addr4{uint8_t(a >> 24), uint8_t(a >> 16), uint8_t(a >> 8), uint8_t(a)}; }
uint32_t value4(const Addr4& a) { return uint32_t(a[0]) << 24 | uint32_t(a[1]) << 16 | uint32_t(a[2]) << 8 | a[3]; }

// The Toeplitz hash exactly as the specification states it: for every set input bit, most significant bit
// of the first byte first, XOR in the 32 key bits that start at that bit's position; key bits past the
// key's end are zero. Deliberately slow and shares nothing with the implementation under test.
uint32_t naive_toeplitz(std::span<const uint8_t> key, std::span<const uint8_t> input) {
  auto key_bit = [&](size_t i) -> uint32_t { return i / 8 < key.size() ? (key[i / 8] >> (7 - i % 8)) & 1 : 0; };
  uint32_t result = 0;
  for (size_t i = 0; i < input.size() * 8; ++i) {
    if (((input[i / 8] >> (7 - i % 8)) & 1) == 0) continue;
    uint32_t window = 0;
    for (size_t k = 0; k < 32; ++k) window = window << 1 | key_bit(i + k);
    result ^= window;
  }
  return result;
}

// The specification's input: source address, destination address, then (for the "with TCP" column) source
// port and destination port.
template <size_t N>
Bytes spec_input(const std::array<uint8_t, N>& src, const std::array<uint8_t, N>& dst,
                 std::optional<std::pair<uint16_t, uint16_t>> ports) {
  Bytes b;
  append(b, src);
  append(b, dst);
  if (ports) {
    put16(b, ports->first);
    put16(b, ports->second);
  }
  return b;
}

// The same for IPv4 addresses held as numbers, as FrameParts holds them.
Bytes spec_input(uint32_t src4, uint32_t dst4, std::optional<std::pair<uint16_t, uint16_t>> ports) {
  return spec_input(bytes4(src4), bytes4(dst4), ports);
}

// One row of the published tables, in the page's column order (destination first).
template <typename Addr>
struct Vector {
  Addr dst;
  uint16_t dst_port;
  Addr src;
  uint16_t src_port;
  uint32_t ip_only;
  uint32_t with_tcp;
};

const std::array<Vector<Addr4>, 5> ipv4_vectors{{
    {{161, 142, 100, 80}, 1766, {66, 9, 149, 187}, 2794, 0x323e8fc2, 0x51ccc178},
    {{65, 69, 140, 83}, 4739, {199, 92, 111, 2}, 14230, 0xd718262a, 0xc626b0ea},
    {{12, 22, 207, 184}, 38024, {24, 19, 198, 95}, 12898, 0xd2d0a5de, 0x5c2b394a},
    {{209, 142, 163, 6}, 2217, {38, 27, 205, 30}, 48228, 0x82989176, 0xafc7327f},
    {{202, 188, 127, 2}, 1303, {153, 39, 163, 191}, 44251, 0x5d1809c5, 0x10e828a2},
}};

const std::array<Vector<Addr6>, 3> ipv6_vectors{{
    // 3ffe:2501:200:3::1 (1766), 3ffe:2501:200:1fff::7 (2794)
    {{0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x01},
     1766,
     {0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0x07},
     2794,
     0x2cc18cd5,
     0x40207d3d},
    // ff02::1 (4739), 3ffe:501:8::260:97ff:fe40:efab (14230)
    {{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01},
     4739,
     {0x3f, 0xfe, 0x05, 0x01, 0x00, 0x08, 0x00, 0x00, 0x02, 0x60, 0x97, 0xff, 0xfe, 0x40, 0xef, 0xab},
     14230,
     0x0f0c461c,
     0xdde51bbf},
    // fe80::200:f8ff:fe21:67cf (38024), 3ffe:1900:4545:3:200:f8ff:fe21:67cf (44251)
    {{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x00, 0xf8, 0xff, 0xfe, 0x21, 0x67, 0xcf},
     38024,
     {0x3f, 0xfe, 0x19, 0x00, 0x45, 0x45, 0x00, 0x03, 0x02, 0x00, 0xf8, 0xff, 0xfe, 0x21, 0x67, 0xcf},
     44251,
     0x4b61e985,
     0x02d1feef},
}};

bool has_ports(const FrameParts& p) {
  if (p.protocol != tcp && p.protocol != udp) return false;
  if (p.ip_version == 4) return (p.flags_fragment & 0x1fff) == 0;
  return p.ip_version == 6;
}

// The input the specification builds from the parts a frame was made of, for the fields selected.
Bytes expected_input(const FrameParts& p, uint64_t fields, bool with_ports = true) {
  Bytes in;
  if (p.ip_version == 4) {
    if (fields & hash_src_ipv4) append(in, bytes4(p.src4));
    if (fields & hash_dst_ipv4) append(in, bytes4(p.dst4));
  } else if (p.ip_version == 6) {
    if (fields & hash_src_ipv6) append(in, p.src6);
    if (fields & hash_dst_ipv6) append(in, p.dst6);
  }
  if (with_ports && has_ports(p)) {
    const uint64_t src_bit = p.protocol == tcp ? hash_src_port_tcp : hash_src_port_udp;
    const uint64_t dst_bit = p.protocol == tcp ? hash_dst_port_tcp : hash_dst_port_udp;
    if (fields & src_bit) put16(in, p.sport);
    if (fields & dst_bit) put16(in, p.dport);
  }
  return in;
}

uint32_t expected_hash(const FrameParts& p, uint64_t fields) {
  return naive_toeplitz(ms_key, expected_input(p, fields));
}

// rss_hash over a heap buffer holding exactly `n` bytes of `frame`, so that reading past them is an overflow
// of the allocation (which ASan reports), not a read of the rest of the frame.
uint32_t hash_prefix(uint64_t fields, const Bytes& frame, size_t n) {
  const Bytes exact(frame.begin(), frame.begin() + std::ptrdiff_t(n));
  return rss_hash(ms_key, fields, exact);
}

constexpr uint64_t all_ipv4 = hash_src_ipv4 | hash_dst_ipv4;
constexpr uint64_t all_ipv6 = hash_src_ipv6 | hash_dst_ipv6;
constexpr uint64_t all_tcp = hash_src_port_tcp | hash_dst_port_tcp;
constexpr uint64_t all_udp = hash_src_port_udp | hash_dst_port_udp;

// This file's frames: the shared defaults, but for a TCP acknowledgement number of its own.
FrameParts parts() {
  FrameParts p;
  p.tcp_ack = 0x05060708;
  return p;
}
FrameParts ipv4_udp() { return parts(); }
FrameParts ipv4_tcp() {
  FrameParts p = parts();
  p.protocol = tcp;
  return p;
}
FrameParts ipv6_tcp() {
  FrameParts p = parts();
  p.ip_version = 6;
  p.protocol = tcp;
  return p;
}
FrameParts ipv6_udp() {
  FrameParts p = parts();
  p.ip_version = 6;
  return p;
}

}  // namespace

TEST_CASE("the naive Toeplitz hash reproduces the specification's verification data", "[transport][rss]") {
  // Checks the reference the rest of this file relies on, before it is used as an oracle.
  for (const auto& v : ipv4_vectors) {
    CHECK(naive_toeplitz(ms_key, spec_input(v.src, v.dst, std::nullopt)) == v.ip_only);
    CHECK(naive_toeplitz(ms_key, spec_input(v.src, v.dst, std::pair{v.src_port, v.dst_port})) == v.with_tcp);
  }
  for (const auto& v : ipv6_vectors) {
    CHECK(naive_toeplitz(ms_key, spec_input(v.src, v.dst, std::nullopt)) == v.ip_only);
    CHECK(naive_toeplitz(ms_key, spec_input(v.src, v.dst, std::pair{v.src_port, v.dst_port})) == v.with_tcp);
  }
}

TEST_CASE("toeplitz_hash matches the specification's IPv4 verification data", "[transport][rss]") {
  for (const auto& v : ipv4_vectors) {
    CAPTURE(v.ip_only);
    CHECK(toeplitz_hash(ms_key, spec_input(v.src, v.dst, std::nullopt)) == v.ip_only);
    CHECK(toeplitz_hash(ms_key, spec_input(v.src, v.dst, std::pair{v.src_port, v.dst_port})) == v.with_tcp);
  }
}

TEST_CASE("toeplitz_hash matches the specification's IPv6 verification data", "[transport][rss]") {
  for (const auto& v : ipv6_vectors) {
    CAPTURE(v.ip_only);
    CHECK(toeplitz_hash(ms_key, spec_input(v.src, v.dst, std::nullopt)) == v.ip_only);
    CHECK(toeplitz_hash(ms_key, spec_input(v.src, v.dst, std::pair{v.src_port, v.dst_port})) == v.with_tcp);
  }
}

TEST_CASE("toeplitz_hash of nothing is 0, and of a single bit is the key window there", "[transport][rss]") {
  CHECK(toeplitz_hash(ms_key, {}) == 0);
  CHECK(toeplitz_hash({}, {}) == 0);
  CHECK(toeplitz_hash(ms_key, Bytes{0, 0, 0, 0, 0}) == 0);
  CHECK(toeplitz_hash(ms_key, Bytes{0x80}) == 0x6d5a56da);  // key bits 0..31
  CHECK(toeplitz_hash(ms_key, Bytes{0x00, 0x80}) == 0x5a56da25);  // key bits 8..39
  CHECK(toeplitz_hash(ms_key, Bytes{0x01}) == uint32_t(0x6d5a56da25ull >> 1));  // key bits 7..38
}

TEST_CASE("toeplitz_hash treats key bytes past the key's end as zero", "[transport][rss]") {
  // Sixteen bytes of input need a key of at least 20 bytes; shorter keys hash as though padded with zeros.
  const Bytes input{0xff, 0x01, 0x80, 0x55, 0xaa, 0x00, 0x7f, 0xfe, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0};
  for (size_t key_size = 0; key_size <= 24; ++key_size) {
    CAPTURE(key_size);
    const Bytes short_key(ms_key.begin(), ms_key.begin() + std::ptrdiff_t(key_size));
    Bytes padded = short_key;
    padded.resize(40, 0);
    CHECK(toeplitz_hash(short_key, input) == toeplitz_hash(padded, input));
    CHECK(toeplitz_hash(short_key, input) == naive_toeplitz(short_key, input));
  }
  CHECK(toeplitz_hash({}, input) == 0);
}

TEST_CASE("toeplitz_hash agrees with the naive hash on random keys and inputs", "[transport][rss]") {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int round = 0; round < 2000; ++round) {
    Bytes key(size_t(std::uniform_int_distribution<int>(0, 52)(rng)));
    Bytes input(size_t(std::uniform_int_distribution<int>(0, 48)(rng)));
    for (uint8_t& b : key) b = uint8_t(byte(rng));
    for (uint8_t& b : input) b = uint8_t(byte(rng));
    CAPTURE(round, key.size(), input.size());
    REQUIRE(toeplitz_hash(key, input) == naive_toeplitz(key, input));
  }
}

TEST_CASE("rss_hash of frames built from the verification data gives the published hashes", "[transport][rss]") {
  // TCP frames give both columns; UDP frames with the UDP port bits hash the same input.
  for (const uint8_t protocol : {tcp, udp}) {
    const uint64_t ports = protocol == tcp ? all_tcp : all_udp;
    for (const auto& v : ipv4_vectors) {
      FrameParts p = parts();
      p.protocol = protocol;
      p.src4 = value4(v.src);
      p.dst4 = value4(v.dst);
      p.sport = v.src_port;
      p.dport = v.dst_port;
      const Bytes frame = build(p).bytes;
      CAPTURE(protocol, v.ip_only);
      CHECK(rss_hash(ms_key, all_ipv4, frame) == v.ip_only);
      CHECK(rss_hash(ms_key, all_ipv4 | ports, frame) == v.with_tcp);
      // The IPv6 bits select nothing of an IPv4 frame.
      CHECK(rss_hash(ms_key, all_ipv4 | all_ipv6 | ports, frame) == v.with_tcp);
    }
    for (const auto& v : ipv6_vectors) {
      FrameParts p = parts();
      p.ip_version = 6;
      p.protocol = protocol;
      p.src6 = v.src;
      p.dst6 = v.dst;
      p.sport = v.src_port;
      p.dport = v.dst_port;
      const Bytes frame = build(p).bytes;
      CAPTURE(protocol, v.ip_only);
      CHECK(rss_hash(ms_key, all_ipv6, frame) == v.ip_only);
      CHECK(rss_hash(ms_key, all_ipv6 | ports, frame) == v.with_tcp);
      CHECK(rss_hash(ms_key, all_ipv4 | all_ipv6 | ports, frame) == v.with_tcp);
    }
  }
}

TEST_CASE("rss_hash: each field bit selects its own bytes", "[transport][rss]") {
  SECTION("IPv4/TCP") {
    const FrameParts p = ipv4_tcp();
    const Bytes frame = build(p).bytes;
    CHECK(rss_hash(ms_key, hash_src_ipv4, frame) == toeplitz_hash(ms_key, bytes4(p.src4)));
    CHECK(rss_hash(ms_key, hash_dst_ipv4, frame) == toeplitz_hash(ms_key, bytes4(p.dst4)));
    CHECK(rss_hash(ms_key, hash_src_port_tcp, frame) == toeplitz_hash(ms_key, Bytes{0xc5, 0xa3}));
    CHECK(rss_hash(ms_key, hash_dst_port_tcp, frame) == toeplitz_hash(ms_key, Bytes{0x12, 0xb7}));
    // The UDP port bits and the IPv6 bits select nothing of it.
    CHECK(rss_hash(ms_key, all_udp | all_ipv6, frame) == 0);
  }
  SECTION("IPv4/UDP") {
    const FrameParts p = ipv4_udp();
    const Bytes frame = build(p).bytes;
    CHECK(rss_hash(ms_key, hash_src_port_udp, frame) == toeplitz_hash(ms_key, Bytes{0xc5, 0xa3}));
    CHECK(rss_hash(ms_key, hash_dst_port_udp, frame) == toeplitz_hash(ms_key, Bytes{0x12, 0xb7}));
    CHECK(rss_hash(ms_key, all_tcp | all_ipv6, frame) == 0);
  }
  SECTION("IPv6/TCP") {
    const FrameParts p = ipv6_tcp();
    const Bytes frame = build(p).bytes;
    CHECK(rss_hash(ms_key, hash_src_ipv6, frame) == toeplitz_hash(ms_key, p.src6));
    CHECK(rss_hash(ms_key, hash_dst_ipv6, frame) == toeplitz_hash(ms_key, p.dst6));
    CHECK(rss_hash(ms_key, hash_src_port_tcp, frame) == toeplitz_hash(ms_key, Bytes{0xc5, 0xa3}));
    CHECK(rss_hash(ms_key, hash_dst_port_tcp, frame) == toeplitz_hash(ms_key, Bytes{0x12, 0xb7}));
    CHECK(rss_hash(ms_key, all_udp | all_ipv4, frame) == 0);
  }
  SECTION("every combination of fields, in the specification's order") {
    for (const FrameParts& p : {ipv4_udp(), ipv4_tcp(), ipv6_udp(), ipv6_tcp()}) {
      const Bytes frame = build(p).bytes;
      for (uint64_t fields = 0; fields <= hash_known_fields; ++fields) {
        CAPTURE(p.ip_version, p.protocol, fields);
        REQUIRE(rss_hash(ms_key, fields, frame) == expected_hash(p, fields));
      }
    }
  }
}

TEST_CASE("rss_hash skips an 802.1Q tag", "[transport][rss]") {
  for (FrameParts p : {ipv4_udp(), ipv4_tcp(), ipv6_udp(), ipv6_tcp()}) {
    const Bytes untagged = build(p).bytes;
    p.tci = 0x6123;
    const Bytes tagged = build(p).bytes;
    REQUIRE(tagged.size() == untagged.size() + 4);
    for (uint64_t fields = 0; fields <= hash_known_fields; ++fields) {
      CAPTURE(p.ip_version, p.protocol, fields);
      REQUIRE(rss_hash(ms_key, fields, tagged) == expected_hash(p, fields));
      REQUIRE(rss_hash(ms_key, fields, tagged) == rss_hash(ms_key, fields, untagged));
    }
  }
}

TEST_CASE("rss_hash finds the ports after IPv4 options", "[transport][rss]") {
  FrameParts p = ipv4_tcp();
  p.options = Bytes{0x94, 0x04, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00};  // router alert, NOP NOP NOP EOL
  const Bytes frame = build(p).bytes;
  CHECK(rss_hash(ms_key, all_ipv4 | all_tcp, frame) == expected_hash(p, all_ipv4 | all_tcp));
  CHECK(rss_hash(ms_key, all_tcp, frame) == toeplitz_hash(ms_key, Bytes{0xc5, 0xa3, 0x12, 0xb7}));
}

TEST_CASE("rss_hash hashes no ports of a non-first IPv4 fragment", "[transport][rss]") {
  const uint64_t fields = all_ipv4 | all_tcp | all_udp;
  for (FrameParts p : {ipv4_udp(), ipv4_tcp()}) {
    CAPTURE(p.protocol);
    // Offset 0 has the ports, whatever the flags: a whole datagram, or a first fragment (more fragments).
    const Bytes with_ports = spec_input(p.src4, p.dst4, std::pair{p.sport, p.dport});
    for (const uint16_t flags_fragment : {0x0000, 0x2000, 0x4000, 0xe000}) {
      p.flags_fragment = flags_fragment;
      CAPTURE(flags_fragment);
      CHECK(rss_hash(ms_key, fields, build(p).bytes) == naive_toeplitz(ms_key, with_ports));
    }
    // A later fragment, the last or not, has only its addresses: any bit of the 13-bit offset makes one.
    for (const uint16_t flags_fragment : {0x2001, 0x0001, 0x00b9, 0x1000, 0x3000, 0x1fff, 0x3fff}) {
      p.flags_fragment = flags_fragment;
      CAPTURE(flags_fragment);
      const Bytes frame = build(p).bytes;
      CHECK(rss_hash(ms_key, fields, frame) == naive_toeplitz(ms_key, spec_input(p.src4, p.dst4, {})));
      CHECK(rss_hash(ms_key, all_tcp | all_udp, frame) == 0);
    }
  }
}

TEST_CASE("rss_hash hashes only the addresses of other IP protocols", "[transport][rss]") {
  const uint64_t everything = hash_known_fields;
  SECTION("IPv4/ICMP") {
    FrameParts p = parts();
    p.protocol = icmp;
    CHECK(rss_hash(ms_key, everything, build(p).bytes) == naive_toeplitz(ms_key, spec_input(p.src4, p.dst4, {})));
  }
  SECTION("IPv6 with an extension header: the next header is not followed") {
    FrameParts p = ipv6_tcp();
    p.protocol = ipv6_hop_by_hop;
    // A hop-by-hop header announcing TCP, then what would be the TCP ports: still not hashed.
    p.payload = Bytes{tcp, 0, 5, 2, 0, 0, 1, 0, 0xc5, 0xa3, 0x12, 0xb7};
    CHECK(rss_hash(ms_key, everything, build(p).bytes) == naive_toeplitz(ms_key, spec_input(p.src6, p.dst6, {})));
  }
}

TEST_CASE("rss_hash of a frame with nothing selected is 0", "[transport][rss]") {
  SECTION("ARP") {
    FrameParts p = parts();
    p.ip_version = 0;
    p.payload = Bytes(28, 0xa5);
    CHECK(rss_hash(ms_key, hash_known_fields, build(p).bytes) == 0);
  }
  SECTION("no fields") {
    for (const FrameParts& p : {ipv4_udp(), ipv4_tcp(), ipv6_udp(), ipv6_tcp()})
      CHECK(rss_hash(ms_key, 0, build(p).bytes) == 0);
  }
  SECTION("an IPv4 ether type without a version 4 header") {
    FrameParts p = ipv4_tcp();
    p.version_override = 6;
    CHECK(rss_hash(ms_key, hash_known_fields, build(p).bytes) == 0);
  }
  SECTION("an IPv4 header with an IHL under 5") {
    FrameParts p = ipv4_tcp();
    for (const uint8_t ihl : {1, 4}) {
      p.ihl_override = ihl;
      CHECK(rss_hash(ms_key, hash_known_fields, build(p).bytes) == 0);
    }
  }
  SECTION("an IPv4 header whose IHL reaches past the frame") {
    FrameParts p = ipv4_udp();
    p.payload.clear();  // the frame ends 28 bytes after the IP header starts: an IHL of 8 (32 bytes) is too much
    p.ihl_override = 8;
    CHECK(rss_hash(ms_key, hash_known_fields, build(p).bytes) == 0);
    p.ihl_override = 7;  // 28 bytes: all there, and no room left for ports
    CHECK(rss_hash(ms_key, hash_known_fields, build(p).bytes) ==
          naive_toeplitz(ms_key, spec_input(p.src4, p.dst4, {})));
  }
  SECTION("an IPv6 ether type without a version 6 header") {
    FrameParts p = ipv6_tcp();
    p.version_override = 4;
    CHECK(rss_hash(ms_key, hash_known_fields, build(p).bytes) == 0);
  }
}

TEST_CASE("rss_hash of every truncation of a frame reads only what is there", "[transport][rss]") {
  // A frame cut inside the IP header hashes nothing; cut after it but inside the first four bytes of the
  // L4 header, the addresses only; from there on, everything selected.
  std::vector<FrameParts> frames{ipv4_udp(), ipv4_tcp(), ipv6_udp(), ipv6_tcp()};
  for (FrameParts p : {ipv4_udp(), ipv4_tcp(), ipv6_udp(), ipv6_tcp()}) {
    p.tci = 0x0005;
    frames.push_back(p);
  }
  FrameParts options = ipv4_tcp();
  options.options = Bytes{0x01, 0x01, 0x01, 0x00};
  frames.push_back(options);
  FrameParts arp = parts();
  arp.ip_version = 0;
  frames.push_back(arp);
  const std::array<uint64_t, 4> field_sets{hash_known_fields, all_ipv4 | all_tcp, all_ipv6 | all_udp,
                                           hash_dst_ipv4 | hash_src_port_udp};
  for (const FrameParts& p : frames) {
    const Built built = build(p);
    const size_t ip_end = built.l4;
    for (const uint64_t fields : field_sets) {
      const uint32_t none = 0;
      const uint32_t addresses = naive_toeplitz(ms_key, expected_input(p, fields, false));
      const uint32_t all = expected_hash(p, fields);
      for (size_t n = 0; n <= built.bytes.size(); ++n) {
        CAPTURE(p.ip_version, p.protocol, bool(p.tci), fields, n);
        const uint32_t expected = n < ip_end ? none : n < ip_end + 4 ? addresses : all;
        REQUIRE(hash_prefix(fields, built.bytes, n) == expected);
      }
    }
  }
}

TEST_CASE("rss_hash of random bytes behind IP ether types reads only what is there", "[transport][rss]") {
  // Mostly garbage headers: no expectations beyond staying inside the frame (the sanitizer builds check
  // that) and agreeing with itself on a copy.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  const std::array<uint16_t, 4> types{0x0800, 0x86dd, 0x8100, 0x0806};
  for (int round = 0; round < 3000; ++round) {
    Bytes frame(size_t(std::uniform_int_distribution<int>(0, 90)(rng)));
    for (uint8_t& b : frame) b = uint8_t(byte(rng));
    const uint16_t type = types[size_t(round) % types.size()];
    if (frame.size() >= 14) {
      frame[12] = uint8_t(type >> 8);
      frame[13] = uint8_t(type);
    }
    if (type == 0x8100 && frame.size() >= 18) {
      frame[16] = round % 8 < 4 ? 0x08 : 0x86;
      frame[17] = round % 8 < 4 ? 0x00 : 0xdd;
    }
    const size_t l3 = type == 0x8100 ? 18 : 14;
    if (frame.size() > l3) frame[l3] = uint8_t((round % 2 ? 0x40 : 0x60) | (frame[l3] & 0x0f));
    const uint64_t fields = uint64_t(byte(rng));
    CAPTURE(round, frame.size(), fields);
    REQUIRE(hash_prefix(fields, frame, frame.size()) == rss_hash(ms_key, fields, frame));
  }
}
