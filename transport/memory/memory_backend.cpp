#include "transport/memory/memory_backend.hpp"

#include <atomic>
#include <cstring>

namespace uroce::transport {

bool HostMemory::read(uint64_t offset, void* dst, size_t len) {
  if (!in_bounds(offset, len)) return false;
  if (len != 0) std::memcpy(dst, base_ + offset, len);
  return true;
}

bool HostMemory::write(uint64_t offset, const void* src, size_t len) {
  if (!in_bounds(offset, len)) return false;
  if (len != 0) std::memcpy(base_ + offset, src, len);
  return true;
}

bool HostMemory::compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) {
  if (!in_bounds(offset, 8) || ((reinterpret_cast<uintptr_t>(base_) + offset) & 7) != 0) return false;
  // Atomic with respect to the CPU too: an application may be polling the word.
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(base_ + offset));
  uint64_t expected = compare;
  word.compare_exchange_strong(expected, swap);
  original = expected;
  return true;
}

bool HostMemory::fetch_add(uint64_t offset, uint64_t add, uint64_t& original) {
  if (!in_bounds(offset, 8) || ((reinterpret_cast<uintptr_t>(base_) + offset) & 7) != 0) return false;
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(base_ + offset));
  original = word.fetch_add(add);
  return true;
}

bool HostMemory::atomic_store(uint64_t offset, uint64_t value) {
  if (!in_bounds(offset, 8) || ((reinterpret_cast<uintptr_t>(base_) + offset) & 7) != 0) return false;
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base_ + offset)).store(value, std::memory_order_release);
  return true;
}

}  // namespace uroce::transport
