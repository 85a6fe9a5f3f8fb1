// A scatter/gather list that keeps up to four entries inline: posting a work request copies it, and
// almost every request has one or two entries, so the common case never touches the heap.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace uroce::verbs {

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

class SgeList {
 public:
  static constexpr size_t inline_capacity = 4;

  SgeList() = default;
  SgeList(std::initializer_list<Sge> sges) { assign(sges.begin(), sges.end()); }
  SgeList(const std::vector<Sge>& sges) { assign(sges.data(), sges.data() + sges.size()); }  // NOLINT: as a vector
  SgeList& operator=(const std::vector<Sge>& sges) {
    assign(sges.data(), sges.data() + sges.size());
    return *this;
  }
  // Copies and moves take the entries in use only: a work request is copied when it is posted and
  // moved when a receive is taken, and copying the whole inline array cost more than the entries.
  SgeList(const SgeList& other) { assign(other.begin(), other.end()); }
  SgeList& operator=(const SgeList& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SgeList(SgeList&& other) noexcept { take(other); }
  SgeList& operator=(SgeList&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }

  void push_back(const Sge& s) {
    if (size_ < inline_capacity) {
      inline_[size_] = s;
    } else {
      if (size_ == inline_capacity) heap_.assign(inline_.begin(), inline_.end());
      heap_.push_back(s);
    }
    ++size_;
  }
  void clear() {
    size_ = 0;
    heap_.clear();
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Sge* data() { return size_ > inline_capacity ? heap_.data() : inline_.data(); }
  const Sge* data() const { return size_ > inline_capacity ? heap_.data() : inline_.data(); }
  Sge& operator[](size_t i) { return data()[i]; }
  const Sge& operator[](size_t i) const { return data()[i]; }
  Sge* begin() { return data(); }
  Sge* end() { return data() + size_; }
  const Sge* begin() const { return data(); }
  const Sge* end() const { return data() + size_; }
  std::span<const Sge> view() const { return {data(), size_}; }

 private:
  void assign(const Sge* first, const Sge* last) {
    clear();
    for (; first != last; ++first) push_back(*first);
  }
  // Leaves `other` empty.
  void take(SgeList& other) {
    if (other.size_ > inline_capacity) {
      heap_ = std::move(other.heap_);
      size_ = other.size_;
    } else {
      assign(other.begin(), other.end());
    }
    other.clear();
  }

  std::array<Sge, inline_capacity> inline_;  // entries past size_ are never read, so not initialised
  uint32_t size_ = 0;
  std::vector<Sge> heap_;  // all entries, once there are more than inline_capacity
};

}  // namespace uroce::verbs
