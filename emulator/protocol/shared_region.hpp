// A memfd mapped MAP_SHARED: how the daemon and a client share a queue. The daemon creates it and passes
// the fd over the control socket; the client maps the same pages. Both sides only ever see the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace uroce::emulator::protocol {

// `size` rounded up to whole pages: what SharedRegion::create makes of it.
size_t round_to_pages(size_t size);

class SharedRegion {
 public:
  SharedRegion() = default;
  // Creates a zero-filled region of `size` bytes (rounded up to whole pages). Throws std::system_error.
  static SharedRegion create(const std::string& name, size_t size);
  // Maps a region received from the other side; takes ownership of `fd`. Throws std::system_error, and
  // std::runtime_error when the fd is smaller than `size` (a peer cannot make us read past its end).
  static SharedRegion attach(int fd, size_t size);

  SharedRegion(SharedRegion&& other) noexcept;
  SharedRegion& operator=(SharedRegion&& other) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;
  ~SharedRegion();

  uint8_t* data() const { return base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  // A duplicate of the fd (close-on-exec), for sending: the sender closes its copy after sendmsg.
  int dup_fd() const;

 private:
  SharedRegion(int fd, uint8_t* base, size_t size) : fd_(fd), base_(base), size_(size) {}
  void reset();
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
};

}  // namespace uroce::emulator::protocol
