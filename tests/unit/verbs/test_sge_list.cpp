// SgeList: inline up to four entries, then all of them on the heap; copies and assignments keep order.
#include <catch2/catch.hpp>

#include "transport/verbs/sge_list.hpp"

using uroce::verbs::Sge;
using uroce::verbs::SgeList;

TEST_CASE("SgeList keeps order across the inline-to-heap spill, and copies", "[verbs][sge]") {
  SgeList l;
  CHECK(l.empty());
  for (uint32_t i = 0; i < 9; ++i) {
    l.push_back({0x1000u * i, i, 100 + i});
    REQUIRE(l.size() == i + 1);
    for (uint32_t j = 0; j <= i; ++j) {
      CHECK(l[j].addr == 0x1000u * j);
      CHECK(l[j].lkey == 100 + j);
    }
  }
  const SgeList copy = l;
  REQUIRE(copy.size() == 9);
  CHECK(copy[8].length == 8);
  uint64_t sum = 0;
  for (const Sge& s : copy) sum += s.length;
  CHECK(sum == 36);
  CHECK(copy.view().size() == 9);

  SgeList moved = std::move(l);
  CHECK(moved.size() == 9);
  CHECK(moved[4].addr == 0x4000);

  const std::vector<Sge> v = {{1, 2, 3}, {4, 5, 6}};
  SgeList from_vector = v;
  REQUIRE(from_vector.size() == 2);
  CHECK(from_vector[1].lkey == 6);
  from_vector = std::vector<Sge>{};
  CHECK(from_vector.empty());
  from_vector.clear();
  from_vector.push_back({7, 8, 9});
  CHECK(from_vector.size() == 1);
  CHECK(from_vector[0].addr == 7);
}
