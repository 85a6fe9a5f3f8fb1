#include "bench/frames.hpp"

#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "bench/harness.hpp"
#include "transport/wire/build.hpp"

namespace uroce::bench {

namespace wire = uroce::wire;

void FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

Buffer allocate(size_t bytes) {
  constexpr size_t huge = size_t(2) << 20;
  const size_t rounded = (bytes + huge - 1) / huge * huge;
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(huge, rounded));
  if (p == nullptr) throw std::bad_alloc();
  madvise(p, rounded, MADV_HUGEPAGE);  // best effort
  std::memset(p, 0, rounded);          // fault every page in now, not while measuring
  return Buffer(p);
}

namespace {

// xorshift64*: fast, reproducible, good enough for test content.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

constexpr size_t small_payload = 4;
constexpr size_t large_payload = 4096;

wire::FrameSpec random_spec(Shape shape, Rng& rng, std::vector<uint8_t>& payload) {
  wire::FrameSpec s;
  s.eth.dst = {{0x02, 0x00, 0x00, 0x00, 0x00, uint8_t(rng.below(4))}};
  s.eth.src = {{0x02, 0x00, 0x00, 0x00, 0x01, uint8_t(rng.below(4))}};
  s.ip_version = wire::IpVersion::v4;
  s.ipv4.src = 0x0a4d0000u | rng.below(256);  // 10.77.0.x
  s.ipv4.dst = 0x0a4d0100u | rng.below(256);
  static constexpr uint8_t ecn[4] = {0, 1, 2, 3};
  s.ipv4.tos = uint8_t(26 << 2 | ecn[rng.below(4)]);  // DSCP AF31, any ECN (CE included)
  s.ipv4.ttl = uint8_t(32 + rng.below(33));
  s.ipv4.identification = uint16_t(rng.next());
  s.ipv4.dont_fragment = true;
  s.udp_src_port = uint16_t(0xc000 | rng.below(0x4000));

  wire::Bth& bth = s.headers.bth;
  bth.dest_qp = rng.below(1u << 24);
  bth.psn = rng.below(1u << 24);
  bth.ack_req = rng.below(2);
  bth.fecn = rng.below(8) == 0;
  bth.becn = rng.below(8) == 0;
  bth.pkey = 0xffff;

  size_t payload_len = 0;
  if (shape == Shape::small) {
    static constexpr wire::Opcode ops[4] = {wire::Opcode::rc_acknowledge, wire::Opcode::rc_send_only,
                                            wire::Opcode::rc_send_only_imm, wire::Opcode::rc_send_last};
    const wire::Opcode op = ops[rng.below(4)];
    bth.opcode = uint8_t(op);
    if (op == wire::Opcode::rc_acknowledge) s.headers.aeth = wire::Aeth::ack(rng.below(1u << 24));
    if (op == wire::Opcode::rc_send_only_imm) s.headers.immdt = uint32_t(rng.next());
    if (op == wire::Opcode::rc_send_only || op == wire::Opcode::rc_send_last) payload_len = small_payload;
  } else {
    static constexpr wire::Opcode ops[3] = {wire::Opcode::rc_send_middle, wire::Opcode::rc_rdma_write_middle,
                                            wire::Opcode::rc_rdma_read_response_middle};
    bth.opcode = uint8_t(ops[rng.below(3)]);
    payload_len = large_payload;
  }
  payload.resize(payload_len);
  for (size_t i = 0; i < payload_len; i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(payload.data() + i, &r, std::min<size_t>(8, payload_len - i));
  }
  s.payload = payload;
  return s;
}

}  // namespace

size_t frame_size_of(Shape shape) {
  // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + (4 B extension header or 4 B payload | 4096 B payload) + ICRC 4
  return shape == Shape::small ? 62 : 4154;
}

std::string FramePool::describe() const {
  const bool gaps = stride > (frame_size + 63) / 64 * 64;
  return std::to_string(count) + " frames, " + format_bytes(footprint()) +
         (gaps ? ", " + std::to_string(stride) + " B apart" : "") + " (" + residency + ")";
}

FramePool make_pool(Shape shape, size_t count, uint64_t seed, std::string residency, size_t stride) {
  FramePool pool;
  pool.shape = shape;
  pool.frame_size = frame_size_of(shape);
  pool.stride = stride != 0 ? (stride + 63) / 64 * 64 : (pool.frame_size + 63) / 64 * 64;
  pool.count = count;
  pool.residency = std::move(residency);
  pool.name = std::to_string(pool.frame_size) + " B x " + std::to_string(count);
  pool.storage = allocate(pool.footprint());

  Rng rng{seed | 1};
  std::vector<uint8_t> payload;
  for (size_t i = 0; i < count; ++i) {
    const wire::FrameSpec spec = random_spec(shape, rng, payload);
    uint8_t* out = pool.storage.get() + i * pool.stride;
    const wire::BuildResult r = wire::build_frame(spec, {out, pool.stride});
    if (!r.ok() || r.size != pool.frame_size) {
      throw std::runtime_error("build_frame: " + std::string(wire::to_string(r.error)) + ", size " +
                               std::to_string(r.size) + " (expected " + std::to_string(pool.frame_size) +
                               ")");
    }
    pool.opcode_sum += spec.headers.bth.opcode;
  }
  return pool;
}

uint32_t reference_icrc(std::span<const uint8_t> frame) {
  // Ethernet (14) | IPv4 | UDP (8) | BTH (12) | ... | ICRC (4); no VLAN tag.
  if (frame.size() < 14 + 20 + 8 + 12 + 4 || frame[12] != 0x08 || frame[13] != 0x00) return 0;
  std::vector<uint8_t> buf(8 + frame.size() - 14 - 4);
  std::fill_n(buf.begin(), 8, uint8_t(0xff));  // the LRH stand-in
  std::copy(frame.begin() + 14, frame.end() - 4, buf.begin() + 8);
  uint8_t* ip = buf.data() + 8;
  const size_t ihl = size_t(ip[0] & 0x0f) * 4;
  ip[1] = 0xff;            // TOS (DSCP, ECN)
  ip[8] = 0xff;            // TTL
  ip[10] = ip[11] = 0xff;  // header checksum
  uint8_t* udp = ip + ihl;
  udp[6] = udp[7] = 0xff;  // UDP checksum
  uint8_t* bth = udp + 8;
  bth[4] = 0xff;  // FECN, BECN, reserved
  return uint32_t(crc32_z(0, buf.data(), buf.size()));
}

}  // namespace uroce::bench
