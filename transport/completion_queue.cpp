#include "transport/completion_queue.hpp"

namespace uroce::transport {

size_t CompletionQueue::poll(std::span<verbs::WorkCompletion> out) {
  size_t n = 0;
  while (n < out.size() && count_ > 0) {
    out[n++] = ring_[head_];
    head_ = index(1);
    --count_;
  }
  return n;
}

bool CompletionQueue::resize(uint32_t capacity) {
  if (capacity == 0 || capacity < count_) return false;
  std::vector<verbs::WorkCompletion> ring(capacity);
  for (uint32_t i = 0; i < count_; ++i) ring[i] = ring_[index(i)];
  ring_ = std::move(ring);
  head_ = 0;
  return true;
}

}  // namespace uroce::transport
