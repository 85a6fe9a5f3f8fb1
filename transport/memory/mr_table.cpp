#include "transport/memory/mr_table.hpp"

#include <cerrno>

#include "transport/verbs/types.hpp"

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

std::optional<uint32_t> MrTable::replace(uint32_t key, MemoryRegion region, bool new_key) {
  if (find(key) == nullptr) return std::nullopt;
  Slot& s = slots_[key >> 8];
  if (new_key) ++s.key_byte;
  s.region = std::move(region);
  s.region.key = (key & ~0xffu) | s.key_byte;
  s.region.valid = true;
  return s.region.key;
}

bool MrTable::invalidate(uint32_t key, uint32_t pd) {
  const MemoryRegion* r = find(key);
  if (r == nullptr || r->pd != pd) return false;
  MemoryRegion& m = slots_[key >> 8].region;
  switch (m.kind) {
    case KeyKind::region: m.valid = false; return true;
    case KeyKind::window_type1: return false;
    case KeyKind::window_type2:
      if (!m.valid) return false;  // nothing bound under this key
      unbind(m);
      return true;
  }
  return false;
}

std::optional<uint32_t> MrTable::add_window(uint32_t pd, KeyKind kind) {
  MemoryRegion w;
  w.pd = pd;
  w.kind = kind;
  const auto key = add(std::move(w));
  if (key) slots_[*key >> 8].region.valid = false;  // unbound
  return key;
}

MemoryRegion* MrTable::window(uint32_t mw) {
  if (mw == 0 || mw >= slots_.size()) return nullptr;
  Slot& s = slots_[mw];
  if (!s.in_use || s.region.kind == KeyKind::region) return nullptr;
  return &s.region;
}

void MrTable::unbind(MemoryRegion& w) {
  if (w.valid) {
    if (find(w.parent) != nullptr) --slots_[w.parent >> 8].region.windows;
    if (w.kind == KeyKind::window_type2) --type2_bound_;
  }
  const uint32_t key = w.key;
  const uint32_t pd = w.pd;
  const KeyKind kind = w.kind;
  w = MemoryRegion{};
  w.key = key;
  w.pd = pd;
  w.kind = kind;
  w.valid = false;
}

int MrTable::bind_window(uint32_t mw, uint32_t qp_pd, uint32_t qpn, const WindowBind& b) {
  using namespace verbs;
  MemoryRegion* w = window(mw);
  if (w == nullptr || w->pd != qp_pd) return EINVAL;  // C10-72 (rxe checks it for type 2 when binding,
                                                      // for both types at every access)
  const bool type2 = w->kind == KeyKind::window_type2;
  const bool zero_based = (b.access & access_zero_based) != 0;
  if (!type2 && zero_based) return EINVAL;            // o10-36.2.2: a type 1 window has virtual addresses
  if (type2 && (w->valid || b.length == 0)) return EINVAL;  // o10-37.2.30, o10-37.2.40: invalidate first
  const MemoryRegion* mr = nullptr;
  if (b.length != 0) {
    mr = find(b.mr_lkey);
    if (mr == nullptr || mr->kind != KeyKind::region || !mr->valid || mr->pd != w->pd) return EINVAL;
    if (mr->access & access_zero_based) return EINVAL;
    if (!(mr->access & access_mw_bind)) return EINVAL;                                   // C10-73
    if ((b.access & (access_remote_write | access_remote_atomic)) && !(mr->access & access_local_write)) {
      return EINVAL;                                                                     // C10-74
    }
    if (!range_within(mr->iova, mr->length, b.addr, b.length)) return EINVAL;           // C10-75
  }
  unbind(*w);
  Slot& s = slots_[mw];
  s.key_byte = b.key_byte;
  w->key = mw << 8 | b.key_byte;
  if (mr == nullptr) return 0;  // type 1 with length 0: left unbound, under its new key
  w->iova = zero_based ? 0 : b.addr;
  w->length = b.length;
  w->access = b.access & (access_remote_read | access_remote_write | access_remote_atomic | access_zero_based);
  w->access |= mr->access & access_on_demand;  // a window reaches its region's pages the same way
  w->memory = mr->memory;
  w->memory_offset = mr->memory_offset + (b.addr - mr->iova);
  w->parent = mr->key;
  w->valid = true;
  ++slots_[mr->key >> 8].region.windows;
  if (type2) {
    w->bound_qp = qpn;
    ++type2_bound_;
  }
  return 0;
}

bool MrTable::remove_window(uint32_t mw) {
  MemoryRegion* w = window(mw);
  if (w == nullptr) return false;
  unbind(*w);
  return remove(w->key);
}

void MrTable::unbind_windows_of(uint32_t qpn) {
  for (size_t i = 1; i < slots_.size() && type2_bound_ > 0; ++i) {
    MemoryRegion& r = slots_[i].region;
    if (slots_[i].in_use && r.kind == KeyKind::window_type2 && r.valid && r.bound_qp == qpn) unbind(r);
  }
}

}  // namespace uroce::transport
