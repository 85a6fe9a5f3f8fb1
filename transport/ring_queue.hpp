// A FIFO on a ring that grows and never shrinks, for work queues (the send queue, receive queues).
//
// A queue reaches its working size once and then posts and completes without touching the heap:
// std::deque allocates and frees a block every few elements (a send WQE is ~200 bytes, two to a block),
// which was a measurable part of a small message. An idle queue holds no memory. Elements are indexed
// from the oldest, as the engines walk the send queue.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <utility>

namespace uroce::transport {

template <class T>
class RingQueue {
 public:
  RingQueue() = default;
  RingQueue(const RingQueue&) = delete;
  RingQueue& operator=(const RingQueue&) = delete;
  RingQueue(RingQueue&& other) noexcept { swap(other); }
  RingQueue& operator=(RingQueue&& other) noexcept {
    RingQueue(std::move(other)).swap(*this);
    return *this;
  }
  ~RingQueue() {
    clear();
    std::allocator<T>().deallocate(slots_, capacity_);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The element `i` places after the oldest; i < size().
  T& operator[](size_t i) { return slots_[(head_ + i) & (capacity_ - 1)]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & (capacity_ - 1)]; }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) grow();
    T* slot = slots_ + ((head_ + size_) & (capacity_ - 1));
    std::construct_at(slot, std::forward<Args>(args)...);
    ++size_;
    return *slot;
  }
  void push_back(const T& value) { emplace_back(value); }
  void push_back(T&& value) { emplace_back(std::move(value)); }

  void pop_front() {
    std::destroy_at(&front());
    head_ = (head_ + 1) & (capacity_ - 1);
    --size_;
  }

  // Empties the queue; the ring keeps its capacity.
  void clear() {
    while (!empty()) pop_front();
    head_ = 0;
  }

  template <class Q, class V>
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = V*;
    using reference = V&;
    Iterator() = default;
    Iterator(Q* queue, size_t i) : queue_(queue), i_(i) {}
    V& operator*() const { return (*queue_)[i_]; }
    V* operator->() const { return &(*queue_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }

   private:
    Q* queue_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = Iterator<RingQueue, T>;
  using const_iterator = Iterator<const RingQueue, const T>;
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  void swap(RingQueue& o) noexcept {
    std::swap(slots_, o.slots_);
    std::swap(capacity_, o.capacity_);
    std::swap(head_, o.head_);
    std::swap(size_, o.size_);
  }

  // Doubles the capacity (a power of two, so that positions wrap with a mask), oldest element first.
  void grow() {
    const size_t capacity = capacity_ == 0 ? 4 : capacity_ * 2;
    T* slots = std::allocator<T>().allocate(capacity);
    for (size_t i = 0; i < size_; ++i) {
      std::construct_at(slots + i, std::move((*this)[i]));
      std::destroy_at(&(*this)[i]);
    }
    std::allocator<T>().deallocate(slots_, capacity_);
    slots_ = slots;
    capacity_ = capacity;
    head_ = 0;
  }

  T* slots_ = nullptr;
  size_t capacity_ = 0;  // 0 or a power of two
  size_t head_ = 0;      // slot of the oldest element
  size_t size_ = 0;
};

}  // namespace uroce::transport
