// Objects a device numbers and owns (QPs, CQs), found by number on every packet and every verb.
//
// A hash map owns them; lookups go first through a direct-mapped index on the low bits of the number.
// Numbers are handed out in sequence (QP numbers from 0x11, as rxe), so live objects rarely share low
// bits and nearly every lookup is one array access. Each index entry carries the full number, so a
// destroyed object's number, or one that only shares the low bits, never finds another object: a
// mismatch falls back to the map, and only when some live object is not in the index.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace uroce::transport {

template <class T>
class NumberedTable {
 public:
  using Map = std::unordered_map<uint32_t, std::unique_ptr<T>>;

  NumberedTable() : index_(min_index_size) {}

  T* find(uint32_t number) const {
    const Entry& e = index_[slot_of(number)];
    if (e.object != nullptr && e.number == number) return e.object;
    if (unindexed_ == 0) return nullptr;  // every live object is in the index
    const auto it = all_.find(number);
    return it == all_.end() ? nullptr : it->second.get();
  }
  bool contains(uint32_t number) const { return find(number) != nullptr; }
  size_t size() const { return all_.size(); }

  // Adds an object under a number that is not in use.
  T& insert(uint32_t number, std::unique_ptr<T> object) {
    T& added = *all_.emplace(number, std::move(object)).first->second;
    // Keep the index at least twice as large as the population, so that sequential numbers spread.
    if (all_.size() * 2 > index_.size()) {
      rebuild_index(index_.size() * 2);
    } else {
      add_to_index(number, &added);
    }
    return added;
  }

  // Removes (and destroys) the object with this number; false if there is none.
  bool erase(uint32_t number) {
    const auto it = all_.find(number);
    if (it == all_.end()) return false;
    Entry& e = index_[slot_of(number)];
    if (e.object == it->second.get()) {
      e = {};
      all_.erase(it);
      // An object that lost this slot to the one just removed may take it now.
      if (unindexed_ != 0) refill(slot_of(number));
    } else {
      --unindexed_;
      all_.erase(it);
    }
    return true;
  }

  // Every object, as (number, owner) pairs in no particular order.
  typename Map::const_iterator begin() const { return all_.begin(); }
  typename Map::const_iterator end() const { return all_.end(); }

 private:
  struct Entry {
    uint32_t number = 0;
    T* object = nullptr;
  };
  static constexpr size_t min_index_size = 64;

  size_t slot_of(uint32_t number) const { return number & (index_.size() - 1); }

  void add_to_index(uint32_t number, T* object) {
    Entry& e = index_[slot_of(number)];
    if (e.object == nullptr) {
      e = {number, object};
    } else {
      ++unindexed_;  // the slot is taken: this one is found through the map
    }
  }

  void rebuild_index(size_t size) {
    index_.assign(std::bit_ceil(std::max(size, min_index_size)), Entry{});
    unindexed_ = 0;
    for (const auto& [number, object] : all_) add_to_index(number, object.get());
  }

  void refill(size_t slot) {
    for (const auto& [number, object] : all_) {
      if (slot_of(number) == slot) {
        index_[slot] = {number, object.get()};
        --unindexed_;
        return;
      }
    }
  }

  Map all_;
  std::vector<Entry> index_;  // a power of two in size
  size_t unindexed_ = 0;      // live objects not in the index (their slot was taken)
};

}  // namespace uroce::transport
