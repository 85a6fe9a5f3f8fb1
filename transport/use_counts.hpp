// Objects that are nothing but a number and a count of what uses them: protection domains and XRC domains.
//
// Numbers start at 1 and are handed out in sequence, skipping any still in use once the counter wraps, so a
// number is never given twice at once. An object goes only when nothing uses it: freeing one in use is EBUSY,
// as ibv_dealloc_pd and ibv_close_xrcd say.
#pragma once

#include <cerrno>
#include <cstdint>
#include <map>
#include <optional>

namespace uroce::transport {

class UseCounts {
 public:
  // A new object's number, or nullopt when `limit` objects exist.
  std::optional<uint32_t> add(size_t limit) {
    if (counts_.size() >= limit) return std::nullopt;
    while (next_ == 0 || counts_.contains(next_)) ++next_;
    const uint32_t n = next_++;
    counts_.emplace(n, 0);
    return n;
  }
  // 0, EINVAL (no such object) or EBUSY (still used).
  int remove(uint32_t n) {
    const auto it = counts_.find(n);
    if (it == counts_.end()) return EINVAL;
    if (it->second != 0) return EBUSY;
    counts_.erase(it);
    return 0;
  }
  bool contains(uint32_t n) const { return counts_.contains(n); }
  // The use count of object `n`, which must exist.
  uint32_t& operator[](uint32_t n) { return counts_.at(n); }
  size_t size() const { return counts_.size(); }

 private:
  std::map<uint32_t, uint32_t> counts_;
  uint32_t next_ = 1;
};

}  // namespace uroce::transport
