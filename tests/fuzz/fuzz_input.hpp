// A fuzz input read as a stream of choices: a byte or a big-endian word at a time, zeros once it runs out
// (so that every input, however short, describes a whole run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uroce::fuzz {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool more() const { return at_ < size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint64_t word(unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v = v << 8 | byte();
    return v;
  }
  // Up to `n` bytes: fewer when the input ends first.
  std::vector<uint8_t> bytes(size_t n) {
    std::vector<uint8_t> out;
    while (n-- > 0 && more()) out.push_back(byte());
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace uroce::fuzz
