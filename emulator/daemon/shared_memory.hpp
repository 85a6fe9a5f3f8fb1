// Application memory on pages the daemon maps too, so an RDMA access is a memcpy, and atomics are real CPU
// atomics on the shared page: a memfd the client moved its pages onto at registration (emulator/client/
// shared_pages.hpp), or the file under a shared mapping of the client's (shared_mappings.hpp). The file
// must keep its size, or a client could truncate it and make the daemon fault (SIGBUS) on pages that no
// longer exist: a memfd sealed against shrinking, or a SysV segment or shared anonymous memory.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>

#include "emulator/daemon/process_memory.hpp"
#include "transport/memory/memory_backend.hpp"

namespace uroce::emulator {

class SharedMemory final : public transport::MemoryBackend {
 public:
  // What keeps the file's size: its seals, or what it is (open_shared_mapping found a file nobody can resize).
  enum class Size { sealed, fixed };
  // mmap refused (ENOMEM: the daemon has as many mappings as vm.max_map_count allows).
  struct MapFailed : std::runtime_error {
    explicit MapFailed(int errno_value);
    int error;
  };
  // Maps [offset, offset+length) of `fd` (not taken), the file's pages under it only. Throws
  // std::runtime_error when the fd is too small, or is to be sealed and is not a memfd sealed against
  // shrinking; MapFailed when it cannot be mapped.
  SharedMemory(int fd, uint64_t offset, uint64_t length, std::shared_ptr<ClientLiveness> liveness,
               Size size = Size::sealed);
  ~SharedMemory() override;
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  bool read(uint64_t offset, void* dst, size_t len) override;
  bool write(uint64_t offset, const void* src, size_t len) override;
  bool compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) override;
  bool atomic_store(uint64_t offset, uint64_t value) override;
  bool fetch_add(uint64_t offset, uint64_t add, uint64_t& original) override;
  // The mapping in place: the requester sends from it and the responder places payloads into it without
  // a staging copy. Empty once the client is gone, as read() and write() then refuse.
  std::span<const uint8_t> view(uint64_t offset, size_t len) override { return writable_view(offset, len); }
  std::span<uint8_t> writable_view(uint64_t offset, size_t len) override {
    if (!usable(offset, len)) return {};
    return {base_ + offset, len};
  }

 private:
  void populate(uint64_t offset, uint64_t length, uint64_t page);
  bool usable(uint64_t offset, size_t len) const {
    return liveness_->alive.load(std::memory_order_acquire) && offset <= length_ && len <= length_ - offset;
  }
  uint8_t* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  uint8_t* base_ = nullptr;  // the registered region's first byte in the mapping
  uint64_t length_ = 0;
  std::shared_ptr<ClientLiveness> liveness_;
};

}  // namespace uroce::emulator
