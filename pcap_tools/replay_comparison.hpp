// How what uroce sent in a replay compares with what the capture shows, one item at a time: the answers
// of the responder side (responder_replay.hpp), the requests and completions of the requester side
// (requester_replay.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

namespace uroce::pcap_tools {

template <class T>
struct SequenceComparison {
  size_t matched = 0;  // expected items found
  struct Difference {
    size_t index = 0;               // in `got` (exact: also in `expected`)
    std::optional<T> uroce;         // nothing: uroce sent fewer
    std::optional<T> captured;      // nothing: uroce sent more (exact), or an extra answer (lossy)
  };
  std::vector<Difference> differences;
  bool same() const { return differences.empty(); }
};

// Item for item, in order: the two must be the same.
template <class T>
SequenceComparison<T> compare_in_order(const std::vector<T>& expected, const std::vector<T>& got) {
  SequenceComparison<T> c;
  for (size_t i = 0; i < std::max(expected.size(), got.size()); ++i) {
    const std::optional<T> mine = i < got.size() ? std::optional(got[i]) : std::nullopt;
    const std::optional<T> theirs = i < expected.size() ? std::optional(expected[i]) : std::nullopt;
    if (mine == theirs) {
      ++c.matched;
    } else {
      c.differences.push_back({i, mine, theirs});
    }
  }
  return c;
}

}  // namespace uroce::pcap_tools
