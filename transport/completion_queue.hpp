// A completion queue: a bounded FIFO of work completions. Overflow is an error the consumer must see
// (IBV_EVENT_CQ_ERR), never a silently lost completion.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "transport/verbs/work.hpp"

namespace uroce::transport {

// Its slots grow with use, up to the capacity the consumer asked for: a CQ may hold 2^22 completions (a
// ConnectX's max_cqe, which libfabric's ofi_rxm needs 2^18 of), and most never queue more than a few
// dozen at a time, so an idle one costs kInitialSlots, not its capacity.
class CompletionQueue {
 public:
  static constexpr uint32_t kInitialSlots = 64;

  explicit CompletionQueue(uint32_t capacity)
      : capacity_(capacity ? capacity : 1), ring_(std::min(capacity_, kInitialSlots)) {}

  // Appends a default completion for the caller to fill in place, or returns nullptr (and the CQ is
  // marked overflowed) when full. The hot paths fill the slot directly: a completion built on the stack
  // field by field and then copied in is read back with wide loads that wait for the narrow stores to
  // reach the cache (store forwarding fails), on every completion. The slot is valid until the next
  // append: growing moves the slots (DeviceImpl::new_completion's callers fill theirs at once).
  verbs::WorkCompletion* append() {
    if (count_ == ring_.size() && !grow()) {
      overflowed_ = true;
      return nullptr;
    }
    verbs::WorkCompletion& slot = ring_[index(count_)];
    ++count_;
    slot = {};
    return &slot;
  }
  // False (and the CQ is marked overflowed) when full.
  bool push(const verbs::WorkCompletion& wc) {
    verbs::WorkCompletion* slot = append();
    if (slot != nullptr) *slot = wc;
    return slot != nullptr;
  }
  // Moves up to out.size() completions into out; returns how many.
  size_t poll(std::span<verbs::WorkCompletion> out);
  // Removes the queued completions of QP `qpn`, keeping the others in order; returns how many went. A QP
  // moved to RESET takes its unpolled completions with it, as mlx4/mlx5 clean their CQs (rdma-core's own
  // tests rely on it: a QP brought back from an error must not meet its old flush completions).
  uint32_t remove_qp(uint32_t qpn);
  // Grows or shrinks; false if the completions already queued would not fit.
  bool resize(uint32_t capacity);

  uint32_t capacity() const { return capacity_; }
  uint32_t slots() const { return uint32_t(ring_.size()); }  // allocated so far (tests)
  uint32_t size() const { return count_; }
  bool overflowed() const { return overflowed_; }

  bool active_listed = false;  // in the device's list of CQs with new completions (Device::take_active_cqs)

 private:
  // The ring slot `i` places after the oldest. A compare instead of a modulo: the capacity is whatever
  // the consumer asked for, and a division per completion is a measurable part of a small message.
  uint32_t index(uint32_t i) const {
    const uint32_t at = head_ + i;  // head_ and i are both below the capacity: no overflow
    return at >= ring_.size() ? uint32_t(at - ring_.size()) : at;
  }

  // Doubles the slots (at most to the capacity), the queued completions moved to the front in order;
  // false when they are all in use already.
  bool grow();
  // The queued completions in order at the front of `slots` new slots.
  void relocate(uint32_t slots);

  uint32_t capacity_;
  std::vector<verbs::WorkCompletion> ring_;
  uint32_t head_ = 0;   // oldest
  uint32_t count_ = 0;
  bool overflowed_ = false;
};

}  // namespace uroce::transport
