// A single-producer single-consumer ring in shared memory: the layout of every work and completion queue
// between a client and the daemon.
//
// Indexes run free (uint32_t, wrapping) and the capacity is a power of two, so `producer - consumer` is the
// fill level without a wasted slot. Each index sits on its own cache line and is written by one side only
// (release) and read by the other (acquire): posting a work request is a store, polling a completion is a
// load, and neither is a system call.
//
// The other side may be hostile or dead (the daemon maps pages a client can scribble on): a reader never
// trusts the peer's index beyond `capacity` entries, and entries are validated by whoever consumes them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace uroce::emulator::protocol {

inline constexpr uint32_t ring_magic = 0x55524f52;  // "UROR"
inline constexpr uint32_t ring_version = 1;

// What a completion queue's arm word asks for (ibv_req_notify_cq): an event on the next completion, or on
// the next solicited or error one. The daemon clears it when it sends the event.
enum class CqArm : uint32_t { none = 0, next = 1, solicited = 2 };

struct alignas(64) RingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t capacity;    // entries, a power of two
  uint32_t entry_size;  // bytes, a multiple of 8
  alignas(64) uint32_t producer;  // written by the producing side only
  alignas(64) uint32_t consumer;  // written by the consuming side only
  alignas(64) uint32_t arm;       // completion queues: CqArm, written by the client, cleared by the daemon
  uint32_t overflowed;            // completion queues: set by the daemon when the client fell behind
};
static_assert(sizeof(RingHeader) == 256);

inline constexpr size_t ring_bytes(uint32_t capacity, uint32_t entry_size) {
  return sizeof(RingHeader) + size_t(capacity) * entry_size;
}

// A view of a ring in a mapped region (does not own the memory). Its geometry is kept here, not read back
// from the shared header, which the other side could rewrite.
class RingView {
 public:
  RingView() = default;
  RingView(uint8_t* base, uint32_t capacity, uint32_t entry_size)
      : header_(reinterpret_cast<RingHeader*>(base)), entries_(base + sizeof(RingHeader)), capacity_(capacity),
        entry_size_(entry_size) {}

  // Lays out a fresh ring in zeroed memory of at least ring_bytes(capacity, entry_size).
  static RingView format(uint8_t* base, uint32_t capacity, uint32_t entry_size) {
    RingView r(base, capacity, entry_size);
    r.header_->magic = ring_magic;
    r.header_->version = ring_version;
    r.header_->capacity = capacity;
    r.header_->entry_size = entry_size;
    return r;
  }

  bool valid() const { return header_ != nullptr; }
  uint32_t capacity() const { return capacity_; }
  uint32_t entry_size() const { return entry_size_; }
  uint8_t* entry(uint32_t index) const { return entries_ + size_t(index & (capacity_ - 1)) * entry_size_; }

  uint32_t load_producer() const { return std::atomic_ref<uint32_t>(header_->producer).load(std::memory_order_acquire); }
  uint32_t load_consumer() const { return std::atomic_ref<uint32_t>(header_->consumer).load(std::memory_order_acquire); }
  void publish_producer(uint32_t v) const { std::atomic_ref<uint32_t>(header_->producer).store(v, std::memory_order_release); }
  void publish_consumer(uint32_t v) const { std::atomic_ref<uint32_t>(header_->consumer).store(v, std::memory_order_release); }

  // Entries ready to consume, clamped to the capacity so that a scribbled index cannot make a reader run
  // around the ring more than once.
  uint32_t readable(uint32_t consumer) const {
    const uint32_t n = load_producer() - consumer;
    return n > capacity_ ? 0 : n;
  }
  uint32_t writable(uint32_t producer) const {
    const uint32_t used = producer - load_consumer();
    return used > capacity_ ? 0 : capacity_ - used;
  }
  // The same, reading the consumer index (a line the other side writes, so a cache miss once it moved)
  // only when the room `consumer_seen`, the index as last read, leaves is used up.
  uint32_t writable(uint32_t producer, uint32_t& consumer_seen) const {
    uint32_t used = producer - consumer_seen;
    if (used >= capacity_) {
      consumer_seen = load_consumer();
      used = producer - consumer_seen;
    }
    return used > capacity_ ? 0 : capacity_ - used;
  }

  std::atomic_ref<uint32_t> arm() const { return std::atomic_ref<uint32_t>(header_->arm); }
  std::atomic_ref<uint32_t> overflowed() const { return std::atomic_ref<uint32_t>(header_->overflowed); }
  RingHeader* header() const { return header_; }

 private:
  RingHeader* header_ = nullptr;
  uint8_t* entries_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t entry_size_ = 0;
};

// A ring is valid to use when its header says what the user expects: a mapped header a peer wrote is
// checked before any entry is touched.
inline bool ring_header_ok(const RingHeader& h, uint32_t capacity, uint32_t entry_size) {
  return h.magic == ring_magic && h.version == ring_version && h.capacity == capacity && h.entry_size == entry_size &&
         capacity != 0 && (capacity & (capacity - 1)) == 0;
}

inline uint32_t round_up_pow2(uint32_t v) {
  uint32_t p = 1;
  while (p < v && p < (1u << 31)) p <<= 1;
  return p;
}

}  // namespace uroce::emulator::protocol
