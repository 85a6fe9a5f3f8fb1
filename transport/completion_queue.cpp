#include "transport/completion_queue.hpp"

namespace uroce::transport {

bool CompletionQueue::push(const verbs::WorkCompletion& wc) {
  if (count_ == ring_.size()) {
    overflowed_ = true;
    return false;
  }
  ring_[(head_ + count_) % ring_.size()] = wc;
  ++count_;
  return true;
}

size_t CompletionQueue::poll(std::span<verbs::WorkCompletion> out) {
  size_t n = 0;
  while (n < out.size() && count_ > 0) {
    out[n++] = ring_[head_];
    head_ = uint32_t((head_ + 1) % ring_.size());
    --count_;
  }
  return n;
}

bool CompletionQueue::resize(uint32_t capacity) {
  if (capacity == 0 || capacity < count_) return false;
  std::vector<verbs::WorkCompletion> ring(capacity);
  for (uint32_t i = 0; i < count_; ++i) ring[i] = ring_[(head_ + i) % ring_.size()];
  ring_ = std::move(ring);
  head_ = 0;
  return true;
}

}  // namespace uroce::transport
