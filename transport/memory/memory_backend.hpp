// How the NIC reaches memory that an application registered.
//
// In tests it is a buffer of the test process; in the daemon it is pages shared with the application or
// the application's address space through process_vm_readv/writev. The transport never dereferences
// application addresses itself: every access goes through this interface, which can refuse (the owner
// died, the mapping is gone) so that a vanished client turns into an error completion, not a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace uroce::transport {

class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  // Byte copies between the store (at `offset` from its start) and local buffers. False if unreachable.
  virtual bool read(uint64_t offset, void* dst, size_t len) = 0;
  virtual bool write(uint64_t offset, const void* src, size_t len) = 0;
  // 8-byte atomics at an 8-byte aligned offset, in the store's native byte order; `original` receives the
  // value before the operation.
  virtual bool compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) = 0;
  virtual bool fetch_add(uint64_t offset, uint64_t add, uint64_t& original) = 0;
  // ATOMIC WRITE: the 8 bytes of `value` (as memory holds them) stored at once at an 8-byte aligned
  // offset, after every earlier write: no reader sees part of them.
  virtual bool atomic_store(uint64_t offset, uint64_t value) = 0;
  // The bytes [offset, offset + len) in place, when the store is memory this process can read directly
  // (valid until the next call into the transport); empty otherwise, and then read() must be used. Lets
  // the requester send from registered memory without first copying the payload into a staging buffer.
  virtual std::span<const uint8_t> view(uint64_t offset, size_t len) {
    (void)offset;
    (void)len;
    return {};
  }
  // The same for writing: the bytes in place, valid until the next call into the transport; empty when
  // the store cannot be written directly, and then write() must be used. Lets the responder copy a
  // payload into place in the same pass that checks its ICRC (qp/early_placement.cpp).
  virtual std::span<uint8_t> writable_view(uint64_t offset, size_t len) {
    (void)offset;
    (void)len;
    return {};
  }
};

// Memory of this process: [base, base + size).
class HostMemory final : public MemoryBackend {
 public:
  HostMemory(void* base, size_t size) : base_(static_cast<uint8_t*>(base)), size_(size) {}
  bool read(uint64_t offset, void* dst, size_t len) override;
  bool write(uint64_t offset, const void* src, size_t len) override;
  bool compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) override;
  bool fetch_add(uint64_t offset, uint64_t add, uint64_t& original) override;
  bool atomic_store(uint64_t offset, uint64_t value) override;
  std::span<const uint8_t> view(uint64_t offset, size_t len) override { return writable_view(offset, len); }
  std::span<uint8_t> writable_view(uint64_t offset, size_t len) override {
    if (!in_bounds(offset, len)) return {};
    return {base_ + offset, len};
  }

 private:
  bool in_bounds(uint64_t offset, size_t len) const { return offset <= size_ && len <= size_ - offset; }
  uint8_t* base_;
  size_t size_;
};

}  // namespace uroce::transport
