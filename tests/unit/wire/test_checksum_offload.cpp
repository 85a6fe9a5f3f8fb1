// Checksum offload (transport/wire/checksum_offload.hpp): the IPv4 header checksum and the TCP/UDP checksum
// a NIC fills in on IBV_SEND_IP_CSUM, and the receive side's check. Frames are built by hand
// (tests/unit/support/test_frames.hpp, which leaves the checksum fields as given) and the checksums compared
// with a plain word-by-word one's-complement sum written in this file (RFC 1071's definition, not
// internet_checksum()), plus a textbook header whose checksum is known.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tests/unit/support/test_frames.hpp"
#include "transport/wire/checksum_offload.hpp"

using uroce::wire::ipv4_checksums_ok;
using uroce::wire::offload_checksums;
using namespace uroce::test::frames;

namespace {

uint16_t get16(const Bytes& b, size_t at) { return uint16_t(b[at] << 8 | b[at + 1]); }
void set16(Bytes& b, size_t at, uint16_t v) {
  b[at] = uint8_t(v >> 8);
  b[at + 1] = uint8_t(v);
}

// The one's-complement sum of the bytes as big-endian 16-bit words (an odd last byte padded with a zero),
// with the end-around carry taken at every step; and the checksum, its complement.
uint16_t ones_sum(const Bytes& data) {
  uint32_t sum = 0;
  for (size_t i = 0; i < data.size(); i += 2) {
    sum += uint32_t(data[i]) << 8 | (i + 1 < data.size() ? data[i + 1] : 0);
    if (sum > 0xffff) sum -= 0xffff;
  }
  return uint16_t(sum);
}
uint16_t reference_checksum(const Bytes& data) { return uint16_t(~ones_sum(data)); }

// This file's frames keep their own header values (not the shared defaults), so that every sum below is still taken
// over the same frames; the default payload's odd length has the last word padded.
FrameParts parts() {
  FrameParts p;
  p.dst = uroce::wire::MacAddress{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
  p.src = uroce::wire::MacAddress{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};
  p.tos = 0x02;  // ECT(0)
  p.identification = 0x4c1f;
  p.src4 = 0x0a000001;
  p.dst4 = 0x0a0000fe;
  p.traffic_class = 0x0a;
  p.flow_label = 0x12345;
  p.hop_limit = 64;
  p.sport = 0xd00d;
  p.tcp_seq = 0x8badf00d;
  p.tcp_window = 0x7210;
  p.payload = Bytes{0xde, 0xad, 0xbe, 0xef, 0x01};
  return p;
}

// The pseudo-header from the parts (not from the frame): RFC 768 / 793 for IPv4, RFC 8200 8.1 for IPv6.
Bytes pseudo_header(const FrameParts& p, size_t l4_length) {
  Bytes h;
  if (p.ip_version == 4) {
    put32(h, p.src4);
    put32(h, p.dst4);
    put8(h, 0);
    put8(h, p.protocol);
    put16(h, uint16_t(l4_length));
  } else {
    h.insert(h.end(), p.src6.begin(), p.src6.end());
    h.insert(h.end(), p.dst6.begin(), p.dst6.end());
    put32(h, uint32_t(l4_length));
    put8(h, 0);
    put8(h, 0);
    put8(h, 0);
    put8(h, p.protocol);
  }
  return h;
}

// The L4 checksum the frame should carry: over the pseudo-header and the segment with its field zeroed.
uint16_t expected_l4_checksum(const FrameParts& p, const Built& b) {
  Bytes data = pseudo_header(p, b.end - b.l4);
  data.insert(data.end(), b.bytes.begin() + std::ptrdiff_t(b.l4), b.bytes.begin() + std::ptrdiff_t(b.end));
  const size_t field = data.size() - (b.end - b.l4) + (b.l4_checksum_at - b.l4);
  data[field] = data[field + 1] = 0;
  const uint16_t c = reference_checksum(data);
  return p.protocol == udp && c == 0 ? 0xffff : c;
}

uint16_t expected_ip_checksum(const Built& b) {
  Bytes header(b.bytes.begin() + std::ptrdiff_t(b.l3), b.bytes.begin() + std::ptrdiff_t(b.l4));
  header[10] = header[11] = 0;
  return reference_checksum(header);
}

// offload_checksums on a copy in a buffer of exactly the frame's size (a write past it is one the
// sanitizer sees).
Bytes offloaded(const Bytes& frame) {
  Bytes out = frame;
  offload_checksums(std::span<uint8_t>(out.data(), out.size()));
  return out;
}
bool ok(const Bytes& frame) {
  const Bytes exact = frame;
  return ipv4_checksums_ok(std::span<const uint8_t>(exact.data(), exact.size()));
}

// `after` equals `before` except at the given two-byte fields.
bool same_except(const Bytes& before, const Bytes& after, std::initializer_list<size_t> fields) {
  if (before.size() != after.size()) return false;
  for (size_t i = 0; i < before.size(); ++i) {
    bool in_field = false;
    for (size_t at : fields) in_field = in_field || (at != 0 && (i == at || i == at + 1));
    if (!in_field && before[i] != after[i]) return false;
  }
  return true;
}

Bytes random_bytes(std::mt19937& rng, size_t n) {
  Bytes b(n);
  for (uint8_t& x : b) x = uint8_t(rng());
  return b;
}

FrameParts ipv6_parts(uint8_t protocol) {
  FrameParts p = parts();
  p.ip_version = 6;
  p.protocol = protocol;
  return p;
}

// The variety every "a good frame" test runs over.
std::vector<FrameParts> good_frames(bool ipv6_too) {
  std::vector<FrameParts> frames;
  std::mt19937 rng(5);
  for (int version : {4, 6}) {
    if (version == 6 && !ipv6_too) continue;
    for (uint8_t protocol : {udp, tcp}) {
      for (bool tagged : {false, true}) {
        for (size_t options : {0, 4, 40}) {
          if (version == 6 && options) continue;
          for (size_t payload : {0, 1, 2, 3, 7, 8, 33, 1001}) {
            FrameParts p = version == 4 ? parts() : ipv6_parts(protocol);
            p.protocol = protocol;
            if (tagged) p.tci = 0xa123;
            p.options.assign(options, 0x01);
            p.payload = random_bytes(rng, payload);
            p.ip_checksum = uint16_t(rng());  // whatever the fields held: overwritten
            p.l4_checksum = uint16_t(rng());
            frames.push_back(p);
          }
        }
      }
    }
  }
  return frames;
}

}  // namespace

TEST_CASE("checksum offload: a textbook IPv4 header checksum", "[wire][checksum]") {
  // 4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7: a UDP packet of 0x73 bytes, checksum 0xb861.
  FrameParts p = parts();
  p.src4 = 0xc0a80001;
  p.dst4 = 0xc0a800c7;
  p.payload.assign(0x73 - 20 - 8, 0x55);
  Built b = build(p);
  b.bytes[b.l3 + 1] = 0x00;  // TOS
  set16(b.bytes, b.l3 + 4, 0x0000);  // identification
  const Bytes after = offloaded(b.bytes);
  CHECK(get16(after, b.l3 + 10) == 0xb861);
  // And the header with the checksum in place sums to 0xFFFF.
  CHECK(ones_sum(Bytes(after.begin() + std::ptrdiff_t(b.l3), after.begin() + std::ptrdiff_t(b.l4))) == 0xffff);
}

TEST_CASE("checksum offload: TCP and UDP over IPv4 and IPv6, tagged or not, any length", "[wire][checksum]") {
  for (const FrameParts& p : good_frames(true)) {
    const Built b = build(p);
    INFO("IPv" << p.ip_version << " protocol " << int(p.protocol) << (p.tci ? " tagged" : "") << " options "
               << p.options.size() << " payload " << p.payload.size());
    const Bytes after = offloaded(b.bytes);
    const size_t ip_checksum_at = p.ip_version == 4 ? b.l3 + 10 : 0;
    CHECK(same_except(b.bytes, after, {ip_checksum_at, b.l4_checksum_at}));
    if (p.ip_version == 4) CHECK(get16(after, ip_checksum_at) == expected_ip_checksum(b));
    CHECK(get16(after, b.l4_checksum_at) == expected_l4_checksum(p, b));
    // The receiver's view: pseudo-header and segment, checksum in place, sum to 0xFFFF.
    Bytes whole = pseudo_header(p, b.end - b.l4);
    whole.insert(whole.end(), after.begin() + std::ptrdiff_t(b.l4), after.begin() + std::ptrdiff_t(b.end));
    CHECK(ones_sum(whole) == 0xffff);
    CHECK(offloaded(after) == after);  // idempotent
    CHECK(ok(after) == (p.ip_version == 4));  // the receive check is for IPv4 only
  }
}

TEST_CASE("checksum offload: a UDP checksum of 0 is sent as 0xFFFF, a TCP one as 0", "[wire][checksum]") {
  for (const FrameParts& base : {parts(), ipv6_parts(udp), ipv6_parts(tcp), [] {
                                   FrameParts q = parts();
                                   q.protocol = tcp;
                                   return q;
                                 }()}) {
    INFO("IPv" << base.ip_version << " protocol " << int(base.protocol));
    // The payload's last word chosen so that the whole sum is 0xFFFF: its checksum computes to 0.
    FrameParts p = base;
    p.payload = {1, 2, 3, 4, 5, 6, 7, 8, 0, 0};
    Built b = build(p);
    Bytes data = pseudo_header(p, b.end - b.l4);
    data.insert(data.end(), b.bytes.begin() + std::ptrdiff_t(b.l4), b.bytes.begin() + std::ptrdiff_t(b.end));
    const uint16_t fill = uint16_t(0xffff - ones_sum(data));
    p.payload[8] = uint8_t(fill >> 8);
    p.payload[9] = uint8_t(fill);
    b = build(p);
    const Bytes after = offloaded(b.bytes);
    CHECK(get16(after, b.l4_checksum_at) == (p.protocol == udp ? 0xffff : 0x0000));
    CHECK(ok(after) == (p.ip_version == 4));
  }
}

TEST_CASE("checksum offload: Ethernet padding after the IP packet is not summed or touched", "[wire][checksum]") {
  for (const FrameParts& base : {parts(), ipv6_parts(udp), ipv6_parts(tcp)}) {
    for (size_t padding : {1, 6, 30}) {
      INFO("IPv" << base.ip_version << " padding " << padding);
      FrameParts p = base;
      p.payload = {0x42};
      const Bytes unpadded = offloaded(build(p).bytes);
      p.padding = padding;
      const Built b = build(p);
      const Bytes after = offloaded(b.bytes);
      CHECK(Bytes(after.begin(), after.begin() + std::ptrdiff_t(b.end)) == unpadded);
      CHECK(Bytes(after.begin() + std::ptrdiff_t(b.end), after.end()) == Bytes(padding, 0xa5));
      CHECK(ok(after) == (p.ip_version == 4));
    }
  }
}

TEST_CASE("checksum offload: truncated or inconsistent frames are left byte for byte", "[wire][checksum]") {
  SECTION("every proper prefix of a frame") {
    FrameParts options = parts();
    options.protocol = tcp;
    options.options.assign(8, 0x01);
    FrameParts tagged6 = ipv6_parts(udp);
    tagged6.tci = 7;
    for (const FrameParts& p : {parts(), options, ipv6_parts(tcp), tagged6}) {
      const Bytes whole = build(p).bytes;
      for (size_t len = 0; len < whole.size(); ++len) {
        INFO("IPv" << p.ip_version << ", " << len << " of " << whole.size() << " bytes");
        const Bytes f(whole.begin(), whole.begin() + std::ptrdiff_t(len));
        CHECK(offloaded(f) == f);
        CHECK_FALSE(ok(f));
      }
    }
  }

  SECTION("lengths and versions that do not fit") {
    const Built v4 = build(parts());
    const Built v6 = build(ipv6_parts(udp));
    auto changed = [](Bytes f, size_t at, uint8_t v) {
      f[at] = v;
      return f;
    };
    auto changed16 = [](Bytes f, size_t at, uint16_t v) {
      set16(f, at, v);
      return f;
    };
    const size_t v4_total = v4.end - v4.l3;
    const std::vector<Bytes> frames = {
        changed16(v4.bytes, v4.l3 + 2, uint16_t(v4_total + 1)),  // total length past the frame
        changed16(v4.bytes, v4.l3 + 2, 19),                      // total length inside the header
        changed16(v4.bytes, v4.l3 + 2, 0),
        changed(v4.bytes, v4.l3, 0x44),                          // IHL 4
        changed(v4.bytes, v4.l3, 0x40),
        changed(v4.bytes, v4.l3, 0x4f),                          // IHL 15: a header past the total length
        changed(v4.bytes, v4.l3, 0x55),                          // IPv4's type, version 5
        changed(v4.bytes, v4.l3, 0x65),
        changed(v4.bytes, 12, 0x18),                             // EtherType 0x1800
        changed(v4.bytes, 13, 0x06),                             // ARP
        changed16(v6.bytes, v6.l3 + 4, uint16_t(v6.end - v6.l4 + 1)),  // payload length past the frame
        changed(v6.bytes, v6.l3, 0x40),                          // IPv6's type, version 4
        changed(v6.bytes, v6.l3 + 6, 0),                         // hop-by-hop options: not walked
        changed(v6.bytes, v6.l3 + 6, 44),                        // fragment header
        changed16(v6.bytes, v6.l3 + 4, 0),                       // a jumbogram's 0: no segment
        changed16(v6.bytes, v6.l3 + 4, 4),                       // UDP cut short by the IP length
        changed16(v4.bytes, 12, 0x86dd),                         // IPv4 bytes under IPv6's EtherType
    };
    for (size_t i = 0; i < frames.size(); ++i) {
      INFO("case " << i);
      CHECK(offloaded(frames[i]) == frames[i]);
      CHECK_FALSE(ok(frames[i]));
    }
    // A frame whose IPv4 header claims 60 bytes, the frame ending at 59.
    FrameParts p = parts();
    p.protocol = icmp;
    p.payload.clear();
    p.options.assign(40, 0x01);
    Bytes f = build(p).bytes;
    f.pop_back();
    CHECK(offloaded(f) == f);
  }

  SECTION("a tag whose inner type is not IP") {
    FrameParts p = parts();
    p.tci = 0x0005;
    Bytes f = build(p).bytes;
    f[16] = 0x08;
    f[17] = 0x06;  // ARP
    CHECK(offloaded(f) == f);
  }
}

TEST_CASE("checksum offload: the IPv4 header only, for fragments, other protocols and short segments",
          "[wire][checksum]") {
  std::vector<FrameParts> frames;
  for (uint16_t field : {0x2000, 0x0001, 0x2001, 0x1fff, 0x4100}) {
    FrameParts p = parts();
    p.flags_fragment = field;
    p.l4_checksum = 0x1357;
    frames.push_back(p);
    p.protocol = tcp;
    frames.push_back(p);
  }
  FrameParts other = parts();
  other.protocol = icmp;
  other.payload = {8, 0, 0xf7, 0xff, 0, 0, 0, 0};
  frames.push_back(other);
  for (const FrameParts& p : frames) {
    INFO("fragment field " << p.flags_fragment << " protocol " << int(p.protocol));
    const Built b = build(p);
    const Bytes after = offloaded(b.bytes);
    CHECK(same_except(b.bytes, after, {b.l3 + 10}));
    CHECK(get16(after, b.l3 + 10) == expected_ip_checksum(b));
    CHECK_FALSE(ok(after));  // no segment checksum to vouch for
  }

  // The IP header's lengths fit, but the TCP or UDP header does not fit in them.
  for (uint8_t protocol : {udp, tcp}) {
    FrameParts p = parts();
    p.protocol = protocol;
    p.payload.clear();
    const Built whole = build(p);
    const size_t header = protocol == udp ? 8 : 20;
    for (size_t l4_length = 0; l4_length < header; ++l4_length) {
      INFO("protocol " << int(protocol) << ", an L4 length of " << l4_length);
      Bytes f(whole.bytes.begin(), whole.bytes.begin() + std::ptrdiff_t(whole.l4 + l4_length));
      set16(f, whole.l3 + 2, uint16_t(20 + l4_length));
      Built b = whole;
      b.bytes = f;
      const Bytes after = offloaded(f);
      CHECK(same_except(f, after, {whole.l3 + 10}));
      CHECK(get16(after, whole.l3 + 10) == expected_ip_checksum(b));
      CHECK_FALSE(ok(after));
    }
  }
}

TEST_CASE("ipv4_checksums_ok: true after the offload, false after any one bit flips", "[wire][checksum]") {
  std::vector<FrameParts> frames;
  for (uint8_t protocol : {udp, tcp}) {
    FrameParts p = parts();
    p.protocol = protocol;
    p.payload = {0x10, 0x20, 0x30, 0x41, 0x52};
    frames.push_back(p);
    p.tci = 0xe00a;
    p.options.assign(4, 0x01);
    p.padding = 9;
    frames.push_back(p);
  }
  for (const FrameParts& p : frames) {
    const Built b = build(p);
    const Bytes good = offloaded(b.bytes);
    REQUIRE(ok(good));
    CHECK_FALSE(ok(b.bytes));  // before the offload: the checksums are still 0
    for (size_t i = 0; i < good.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        Bytes f = good;
        f[i] ^= uint8_t(1 << bit);
        INFO("protocol " << int(p.protocol) << (p.tci ? " tagged" : "") << ": byte " << i << " bit " << bit);
        if (i < 12 || (p.tci && i >= 14 && i < 16)) {
          CHECK(ok(f));  // the MAC addresses and the TCI are nobody's checksum
        } else if (i >= b.end) {
          CHECK(ok(f));  // padding
        } else if (p.protocol == udp && (i == b.l4_checksum_at || i == b.l4_checksum_at + 1) &&
                   get16(f, b.l4_checksum_at) == 0) {
          CHECK(ok(f));  // a flip that leaves UDP's "no checksum"
        } else {
          CHECK_FALSE(ok(f));
        }
      }
    }
  }
}

TEST_CASE("ipv4_checksums_ok: UDP without a checksum, TCP with a wrong one, IPv6, a bad header", "[wire][checksum]") {
  FrameParts p = parts();
  const Built b = build(p);
  Bytes f = offloaded(b.bytes);
  set16(f, b.l4_checksum_at, 0);  // UDP sent without one
  CHECK(ok(f));
  f[b.l3 + 10] ^= 0x01;
  CHECK_FALSE(ok(f));  // but the IP header's is still checked

  p.protocol = tcp;
  const Built t = build(p);
  Bytes g = offloaded(t.bytes);
  REQUIRE(ok(g));
  set16(g, t.l4_checksum_at, 0);  // TCP has no "none"
  CHECK_FALSE(ok(g));

  // The receive check is ConnectX's IBV_WC_IP_CSUM_OK: IPv4 only, however right an IPv6 frame's sums are.
  for (const FrameParts& v6 : {ipv6_parts(udp), ipv6_parts(tcp)}) CHECK_FALSE(ok(offloaded(build(v6).bytes)));
}

TEST_CASE("checksum offload on random bytes: total, idempotent, and verified when it filled in a segment",
          "[wire][checksum]") {
  std::mt19937 rng(1071);
  for (int i = 0; i < 20000; ++i) {
    Bytes f = random_bytes(rng, rng() % 120);
    // Steer most frames into the parsers: a tag or not, IPv4 or IPv6, plausible first bytes and lengths.
    const size_t l3 = (rng() % 2 && f.size() >= 18) ? 18 : 14;
    const bool v6 = rng() % 2;
    if (l3 == 18) {
      f[12] = 0x81;
      f[13] = 0x00;
    }
    if (f.size() >= l3) {
      f[l3 - 2] = v6 ? 0x86 : 0x08;
      f[l3 - 1] = v6 ? 0xdd : 0x00;
    }
    const size_t header = v6 ? 40 : 20 + 4 * (rng() % 3);
    if (f.size() >= l3 + header && rng() % 8) {
      const size_t available = f.size() - l3;
      const uint16_t length = uint16_t(rng() % 4 ? available - rng() % 8 : rng());
      f[l3] = uint8_t(v6 ? 0x60 : (0x40 | header / 4));
      if (v6) {
        set16(f, l3 + 4, uint16_t(length - 40));
        f[l3 + 6] = rng() % 2 ? udp : tcp;
      } else {
        set16(f, l3 + 2, length);
        set16(f, l3 + 6, rng() % 4 ? 0x4000 : uint16_t(rng()));
        f[l3 + 9] = rng() % 2 ? udp : tcp;
      }
    }
    const Bytes once = offloaded(f);
    REQUIRE(once.size() == f.size());
    REQUIRE(offloaded(once) == once);
    // Whenever the offload changed an IPv4 TCP/UDP frame's segment checksum, the receive side accepts it.
    if (!v6 && f.size() >= l3 + 20 && once != f && f[l3 + 9] == udp) {
      const size_t ihl = (f[l3] & 0x0f) * 4u;
      const size_t at = l3 + ihl + 6;
      if (at + 2 <= f.size() && (once[at] != f[at] || once[at + 1] != f[at + 1])) CHECK(ok(once));
    }
  }
}
