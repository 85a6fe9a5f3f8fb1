#include "transport/memory/mr_table.hpp"

namespace uroce::transport {

std::string_view to_string(KeyCheck k) {
  switch (k) {
    case KeyCheck::ok: return "ok";
    case KeyCheck::bad_key: return "unknown key";
    case KeyCheck::invalidated: return "invalidated key";
    case KeyCheck::wrong_pd: return "protection domain mismatch";
    case KeyCheck::out_of_bounds: return "address range outside the region";
    case KeyCheck::no_access: return "access right not granted";
  }
  return "?";
}

MrTable::MrTable(uint32_t max_regions) : slots_(1), max_regions_(max_regions) {}

std::optional<uint32_t> MrTable::add(MemoryRegion region) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    if (slots_.size() > max_regions_ || slots_.size() > 0xffffff) return std::nullopt;
    index = uint32_t(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[index];
  ++s.key_byte;
  s.in_use = true;
  s.region = std::move(region);
  s.region.key = index << 8 | s.key_byte;
  s.region.valid = true;
  ++live_;
  return s.region.key;
}

bool MrTable::remove(uint32_t key) {
  if (find(key) == nullptr) return false;
  Slot& s = slots_[key >> 8];
  s.in_use = false;
  s.region = MemoryRegion{};
  free_.push_back(key >> 8);
  --live_;
  return true;
}

std::optional<uint32_t> MrTable::replace(uint32_t key, MemoryRegion region) {
  if (find(key) == nullptr) return std::nullopt;
  Slot& s = slots_[key >> 8];
  ++s.key_byte;
  s.region = std::move(region);
  s.region.key = (key & ~0xffu) | s.key_byte;
  s.region.valid = true;
  return s.region.key;
}

bool MrTable::invalidate(uint32_t key, uint32_t pd) {
  const MemoryRegion* r = find(key);
  if (r == nullptr || r->pd != pd) return false;
  slots_[key >> 8].region.valid = false;
  return true;
}

}  // namespace uroce::transport
