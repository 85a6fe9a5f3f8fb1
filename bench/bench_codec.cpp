// Codec section: what the receive path costs per frame, against memcpy of the same bytes.
#include <cstring>

#include "bench/sections.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::bench {

namespace wire = uroce::wire;

Measurement& Group::add(std::string name) {
  Measurement& m = rows.emplace_back();
  m.name = std::move(name);
  m.frames_per_pass = pool->count;
  m.frame_size = pool->frame_size;
  return m;
}

Measurement* Group::find(const std::string& name) {
  for (Measurement& m : rows) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string verify_pool(const FramePool& pool) {
  wire::Frame f;
  for (size_t i = 0; i < pool.count; ++i) {
    const auto bytes = pool.bytes(i);
    const std::string where = pool.name + " frame " + std::to_string(i) + ": ";
    if (wire::parse_frame(bytes, f) != wire::ParseError::none || !f.is_roce())
      return where + "does not parse";
    if (!wire::icrc_ok(f)) return where + "icrc_ok is false";
    if (reference_icrc(bytes) != f.roce.icrc) return where + "ICRC differs from the independent zlib ICRC";
  }
  return "";
}

void add_codec_measurements(Group& g, uint8_t* dst, uint8_t* hot_dst) {
  const FramePool& pool = *g.pool;

  {
    Measurement& m = g.add(row_memcpy);
    m.pass = [&pool, dst] {
      const uint8_t* src = pool.storage.get();
      const size_t n = pool.frame_size, stride = pool.stride, count = pool.count;
      for (size_t i = 0; i < count; ++i) {
        std::memcpy(dst + i * stride, src + i * stride, n);
        clobber();
      }
      return uint64_t(0);
    };
    m.verify_after = [&pool, dst]() -> std::string {
      for (size_t i = 0; i < pool.count; ++i) {
        if (std::memcmp(dst + i * pool.stride, pool.frame(i), pool.frame_size) != 0)
          return "memcpy: copy differs";
      }
      return "";
    };
  }
  if (hot_dst != nullptr) {
    Measurement& m = g.add(row_memcpy_hot);
    m.pass = [&pool, hot_dst] {
      const uint8_t* src = pool.storage.get();
      const size_t n = pool.frame_size, stride = pool.stride, count = pool.count;
      for (size_t i = 0; i < count; ++i) {
        std::memcpy(hot_dst, src + i * stride, n);
        clobber();
      }
      return uint64_t(0);
    };
  }
  const uint64_t roce_count = uint64_t(pool.count) << 32;
  {
    Measurement& m = g.add(row_parse);
    m.expected = pool.opcode_sum + roce_count;
    m.pass = [&pool] {
      wire::Frame f;
      uint64_t check = 0;
      const size_t count = pool.count;
      for (size_t i = 0; i < count; ++i) {
        wire::parse_frame(pool.bytes(i), f);
        check += f.roce.headers.bth.opcode + (uint64_t(f.is_roce()) << 32);
      }
      return check;
    };
  }
  {
    Measurement& m = g.add(row_parse_icrc);
    m.expected = pool.opcode_sum + roce_count;
    m.pass = [&pool] {
      wire::Frame f;
      uint64_t check = 0;
      const size_t count = pool.count;
      for (size_t i = 0; i < count; ++i) {
        wire::parse_frame(pool.bytes(i), f);
        check += f.roce.headers.bth.opcode + (uint64_t(wire::icrc_ok(f)) << 32);
      }
      return check;
    };
  }
  {
    // The ICRC over a frame whose layout is known (Ethernet, IPv4 without options): the CRC work alone.
    Measurement& m = g.add(row_icrc);
    m.expected = pool.count;
    m.pass = [&pool] {
      uint64_t ok = 0;
      const size_t n = pool.frame_size, count = pool.count;
      for (size_t i = 0; i < count; ++i) {
        const uint8_t* p = pool.frame(i);
        const std::span<const uint8_t> packet(p + 14, n - 14 - wire::icrc_size);
        ok += wire::compute_icrc(packet, wire::IpVersion::v4, 20) == wire::load_icrc(p + n - wire::icrc_size);
      }
      return ok;
    };
  }
}

}  // namespace uroce::bench
