// The memory-key table: memory regions by lkey/rkey, with the checks every access makes.
//
// A key is (slot index << 8) | key byte, as in rxe. The key byte changes each time a slot is reused, so
// a key that was deregistered (or re-registered) stops working at once even though its slot lives on.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "transport/memory/memory_backend.hpp"

namespace uroce::transport {

struct MemoryRegion {
  uint32_t pd = 0;
  uint64_t iova = 0;     // the first address, as the application names it
  uint64_t length = 0;
  uint32_t access = 0;   // verbs::AccessFlags
  std::shared_ptr<MemoryBackend> memory;
  uint64_t memory_offset = 0;  // where iova lies in `memory`
  uint32_t key = 0;      // lkey == rkey
  bool valid = true;     // false after an invalidate, until re-registration
};

// The outcome of a key check; each maps to one verbs error (local protection / remote access ...).
enum class KeyCheck : uint8_t { ok, bad_key, invalidated, wrong_pd, out_of_bounds, no_access };
std::string_view to_string(KeyCheck k);

class MrTable {
 public:
  explicit MrTable(uint32_t max_regions = 1u << 16);

  // Registers a region; returns its key, or nullopt when the table is full.
  std::optional<uint32_t> add(MemoryRegion region);
  // Removes a region; false if the key is not current.
  bool remove(uint32_t key);
  // Changes a region in place and gives it a new key (ibv_rereg_mr); nullopt if `key` is not current.
  std::optional<uint32_t> replace(uint32_t key, MemoryRegion region);
  // Marks a region invalid (SEND_WITH_INV, LOCAL_INV); false if the key is not current or the region
  // is not in protection domain `pd` (the QP's): keys are unique across the whole device, so without the
  // check a peer could invalidate any region, another application's included.
  bool invalidate(uint32_t key, uint32_t pd);

  // Checks that [addr, addr+len) lies in the region `key` of protection domain `pd` and that the region
  // grants every bit of `access`. A zero-length access checks the key and PD only.
  // Inline (with find()): every packet's payload is checked.
  KeyCheck check(uint32_t key, uint32_t pd, uint64_t addr, uint64_t len, uint32_t access,
                 const MemoryRegion** region = nullptr) const {
    const MemoryRegion* r = find(key);
    if (r == nullptr) return KeyCheck::bad_key;
    if (!r->valid) return KeyCheck::invalidated;
    if (r->pd != pd) return KeyCheck::wrong_pd;
    if (len != 0 && (addr < r->iova || addr - r->iova > r->length || len > r->length - (addr - r->iova))) {
      return KeyCheck::out_of_bounds;
    }
    if ((r->access & access) != access) return KeyCheck::no_access;
    if (region != nullptr) *region = r;
    return KeyCheck::ok;
  }

  const MemoryRegion* find(uint32_t key) const {
    const uint32_t index = key >> 8;
    if (index == 0 || index >= slots_.size()) return nullptr;
    const Slot& s = slots_[index];
    if (!s.in_use || s.key_byte != uint8_t(key)) return nullptr;
    return &s.region;
  }
  size_t size() const { return live_; }

 private:
  struct Slot {
    MemoryRegion region;
    uint8_t key_byte = 0;
    bool in_use = false;
  };
  std::vector<Slot> slots_;   // slot 0 is never used, so key 0 is never valid
  std::vector<uint32_t> free_;
  uint32_t max_regions_;
  size_t live_ = 0;
};

}  // namespace uroce::transport
