// The memory-key table: memory regions by lkey/rkey and memory windows by rkey, with the checks every
// access makes.
//
// A key is (slot index << 8) | key byte, as in rxe. The key byte changes each time a slot is reused, so
// a key that was deregistered (or re-registered) stops working at once even though its slot lives on.
//
// A memory window (ibv_alloc_mw) is a slot of its own, in the same key space: an rkey that, once bound
// (bind_window), grants remote access to part of a region with rights of its own. While bound, its slot
// holds a MemoryRegion built from the region's (the same memory, the window's bounds and rights), so a
// remote access through a window is checked and carried out exactly as one through a region. The one
// binding it chooses the key byte: the low byte of the rkey in the bind request (ibv_inc_rkey's), so that
// a peer holding the window's previous rkey loses access at each rebind.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "transport/memory/memory_backend.hpp"

namespace uroce::transport {

// What a key names. Type 1 windows are bound with ibv_bind_mw and used through any QP of their PD; type 2
// windows are bound by a work request, used only through the QP that bound them, and invalidated by
// LOCAL_INV or SEND_WITH_INV (type 1 windows cannot be).
enum class KeyKind : uint8_t { region, window_type1, window_type2 };

struct MemoryRegion {
  uint32_t pd = 0;
  uint64_t iova = 0;     // the first address, as the application names it
  uint64_t length = 0;
  uint32_t access = 0;   // verbs::AccessFlags
  std::shared_ptr<MemoryBackend> memory;
  uint64_t memory_offset = 0;  // where iova lies in `memory`
  uint32_t key = 0;      // lkey == rkey
  bool valid = true;     // false after an invalidate, until re-registration; a window: false while unbound
  KeyKind kind = KeyKind::region;
  uint32_t windows = 0;   // region: windows bound to it (it cannot be deregistered meanwhile)
  uint32_t parent = 0;    // bound window: the key of the region it opens
  uint32_t bound_qp = 0;  // bound type 2 window: the QP it was bound by, the only one it serves
};

// A bind request (IBV_WR_BIND_MW): the window's new key byte, and what it opens; length 0 unbinds (type 1).
struct WindowBind {
  uint8_t key_byte = 0;
  uint32_t mr_lkey = 0;
  uint64_t addr = 0;      // where the window starts in the region (a region address, also when zero-based)
  uint64_t length = 0;
  uint32_t access = 0;    // verbs::AccessFlags: remote rights, and zero_based (addresses count from 0)
};

// Whether [addr, addr + len) lies within [start, start + length): written so that no sum can wrap, whatever
// a request names (a region's, a window's or a prefetch's range).
constexpr bool range_within(uint64_t start, uint64_t length, uint64_t addr, uint64_t len) {
  return addr >= start && addr - start <= length && len <= length - (addr - start);
}

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
  // Changes a region in place (ibv_rereg_mr); nullopt if `key` is not current. With `new_key` the region
  // gets a new key byte, so that keys handed out before cannot reach what the region now is.
  std::optional<uint32_t> replace(uint32_t key, MemoryRegion region, bool new_key);
  // Marks a region invalid (SEND_WITH_INV, LOCAL_INV); false if the key is not current or the region
  // is not in protection domain `pd` (the QP's): keys are unique across the whole device, so without the
  // check a peer could invalidate any region, another application's included.
  // A type 2 window unbinds instead; a type 1 window cannot be invalidated (false), as IBA o10-37.2.26.
  bool invalidate(uint32_t key, uint32_t pd);

  // Windows. add_window makes an unbound window in `pd` and returns its rkey (its number is rkey >> 8).
  std::optional<uint32_t> add_window(uint32_t pd, KeyKind kind);
  // Binds window number `mw` for a QP (`qp_pd`, `qpn`), following rxe's checks (IBA C10-72..75): the
  // window, the QP and the region in one PD; a type 2 window unbound and given a region and a length; the
  // region not zero-based and granting MW_BIND, and LOCAL_WRITE if the window grants remote write or
  // atomics; the range inside the region. Returns 0 or EINVAL (the WR then completes with MW_BIND_ERR).
  int bind_window(uint32_t mw, uint32_t qp_pd, uint32_t qpn, const WindowBind& bind);
  // Window number `mw` (bound or not), or null.
  const MemoryRegion* find_window(uint32_t mw) const { return const_cast<MrTable*>(this)->window(mw); }
  // Removes window number `mw`, unbinding it; false if there is no such window.
  bool remove_window(uint32_t mw);
  // Unbinds every type 2 window bound by QP `qpn` (the QP is going away).
  void unbind_windows_of(uint32_t qpn);

  // Local access (an SGE's lkey): checks that [addr, addr+len) lies in the region `key` of protection
  // domain `pd` and that the region grants every bit of `access`. A zero-length access checks the key and
  // PD only. A window's key is no lkey and is refused. Inline (with find()): every packet's payload is checked.
  KeyCheck check(uint32_t key, uint32_t pd, uint64_t addr, uint64_t len, uint32_t access,
                 const MemoryRegion** region = nullptr) const {
    const MemoryRegion* r = find(key);
    if (r == nullptr || r->kind != KeyKind::region) return KeyCheck::bad_key;
    return check_range(*r, pd, addr, len, access, region);
  }
  // Remote access (an rkey in a request) by QP `qpn`: a region's key, or a bound window's, through the QP
  // that bound it if it is of type 2.
  KeyCheck check_remote(uint32_t key, uint32_t pd, uint32_t qpn, uint64_t addr, uint64_t len, uint32_t access,
                        const MemoryRegion** region = nullptr) const {
    const MemoryRegion* r = find(key);
    if (r == nullptr) return KeyCheck::bad_key;
    if (r->kind != KeyKind::region && !window_usable(*r, qpn)) return KeyCheck::invalidated;
    return check_range(*r, pd, addr, len, access, region);
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
  static KeyCheck check_range(const MemoryRegion& r, uint32_t pd, uint64_t addr, uint64_t len, uint32_t access,
                              const MemoryRegion** region) {
    if (!r.valid) return KeyCheck::invalidated;
    if (r.pd != pd) return KeyCheck::wrong_pd;
    if (len != 0 && !range_within(r.iova, r.length, addr, len)) return KeyCheck::out_of_bounds;
    if ((r.access & access) != access) return KeyCheck::no_access;
    if (region != nullptr) *region = &r;
    return KeyCheck::ok;
  }
  // A window serves while bound, to any QP (type 1) or to its binder (type 2), and while its region is
  // valid (a region invalidated under a bound window closes the window too).
  bool window_usable(const MemoryRegion& w, uint32_t qpn) const {
    if (!w.valid || (w.kind == KeyKind::window_type2 && w.bound_qp != qpn)) return false;
    const MemoryRegion* parent = find(w.parent);
    return parent != nullptr && parent->valid;
  }
  MemoryRegion* window(uint32_t mw);
  void unbind(MemoryRegion& w);

  struct Slot {
    MemoryRegion region;
    uint8_t key_byte = 0;
    bool in_use = false;
  };
  std::vector<Slot> slots_;   // slot 0 is never used, so key 0 is never valid
  std::vector<uint32_t> free_;
  uint32_t max_regions_;
  size_t live_ = 0;
  size_t type2_bound_ = 0;  // bound type 2 windows: unbind_windows_of scans only when there are some
};

}  // namespace uroce::transport
