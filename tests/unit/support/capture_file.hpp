// The real captures in tests/data/captures, read without libpcap so that tests depend on nothing but
// the files: a minimal classic-pcap reader (24-byte global header, then 16-byte record headers, all
// little-endian as written by the capturing host), and the list of captures by name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::test {

struct Capture {
  std::string name;
  uint32_t linktype = 0;
  std::vector<std::vector<uint8_t>> frames;
};

inline uint32_t le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

inline Capture read_pcap(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  const std::vector<uint8_t> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (all.size() < 24 || le32(&all[0]) != 0xa1b2c3d4) throw std::runtime_error("not LE pcap: " + path.string());
  Capture c;
  c.name = path.filename().string();
  c.linktype = le32(&all[20]);
  size_t off = 24;
  while (off < all.size()) {
    if (all.size() - off < 16) throw std::runtime_error("truncated record header in " + c.name);
    const uint32_t incl = le32(&all[off + 8]);
    const uint32_t orig = le32(&all[off + 12]);
    if (incl != orig) throw std::runtime_error("snapped frame in " + c.name);
    off += 16;
    if (all.size() - off < incl) throw std::runtime_error("truncated record in " + c.name);
    c.frames.emplace_back(all.begin() + std::ptrdiff_t(off), all.begin() + std::ptrdiff_t(off + incl));
    off += incl;
  }
  return c;
}

// Every capture of tests/data/captures, sorted by name, read once.
inline const std::vector<Capture>& captures() {
  static const std::vector<Capture> all = [] {
    std::vector<std::filesystem::path> paths;
    for (const auto& entry : std::filesystem::directory_iterator(std::string(UROCE_TEST_DATA_DIR) + "/captures")) {
      if (entry.path().extension() == ".pcap") paths.push_back(entry.path());
    }
    std::sort(paths.begin(), paths.end());
    std::vector<Capture> v;
    for (const auto& p : paths) v.push_back(read_pcap(p));
    return v;
  }();
  return all;
}

inline const Capture& capture(std::string_view prefix) {
  for (const Capture& c : captures()) {
    if (c.name.starts_with(prefix)) return c;
  }
  throw std::runtime_error("no capture " + std::string(prefix));
}

}  // namespace uroce::test
