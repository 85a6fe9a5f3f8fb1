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

uint32_t CompletionQueue::remove_qp(uint32_t qpn) {
  uint32_t kept = 0;
  for (uint32_t i = 0; i < count_; ++i) {
    const verbs::WorkCompletion& wc = ring_[index(i)];
    if (wc.qp_num == qpn) continue;
    if (kept != i) ring_[index(kept)] = wc;
    ++kept;
  }
  const uint32_t removed = count_ - kept;
  count_ = kept;
  return removed;
}

bool CompletionQueue::resize(uint32_t capacity) {
  if (capacity == 0 || capacity < count_) return false;
  capacity_ = capacity;
  relocate(std::max(count_, std::min(capacity_, std::max(kInitialSlots, uint32_t(ring_.size())))));
  return true;
}

bool CompletionQueue::grow() {
  if (ring_.size() >= capacity_) return false;
  relocate(uint32_t(std::min<uint64_t>(capacity_, uint64_t(ring_.size()) * 2)));
  return true;
}

void CompletionQueue::relocate(uint32_t slots) {
  std::vector<verbs::WorkCompletion> ring(slots);
  for (uint32_t i = 0; i < count_; ++i) ring[i] = ring_[index(i)];
  ring_ = std::move(ring);
  head_ = 0;
}

}  // namespace uroce::transport
