// A completion queue: a bounded FIFO of work completions. Overflow is an error the consumer must see
// (IBV_EVENT_CQ_ERR), never a silently lost completion.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "transport/verbs/work.hpp"

namespace uroce::transport {

class CompletionQueue {
 public:
  explicit CompletionQueue(uint32_t capacity) : ring_(capacity ? capacity : 1) {}

  // False (and the CQ is marked overflowed) when full.
  bool push(const verbs::WorkCompletion& wc);
  // Moves up to out.size() completions into out; returns how many.
  size_t poll(std::span<verbs::WorkCompletion> out);
  // Grows or shrinks; false if the completions already queued would not fit.
  bool resize(uint32_t capacity);

  uint32_t capacity() const { return uint32_t(ring_.size()); }
  uint32_t size() const { return count_; }
  bool overflowed() const { return overflowed_; }

 private:
  std::vector<verbs::WorkCompletion> ring_;
  uint32_t head_ = 0;   // oldest
  uint32_t count_ = 0;
  bool overflowed_ = false;
};

}  // namespace uroce::transport
