// range_within (transport/memory/mr_table.hpp): the one bounds check for a region's, a window's and a
// prefetch's range. Addresses and lengths come from requests, so the corners are sums that would wrap.
#include <catch2/catch.hpp>

#include <cstdint>

#include "transport/memory/mr_table.hpp"

using uroce::transport::range_within;

TEST_CASE("range_within: inside, at the edges, outside, and sums that would wrap", "[transport][memory]") {
  constexpr uint64_t top = UINT64_MAX;
  CHECK(range_within(0x1000, 0x100, 0x1000, 0x100));   // the whole region
  CHECK(range_within(0x1000, 0x100, 0x10ff, 1));       // its last byte
  CHECK(range_within(0x1000, 0x100, 0x1100, 0));       // nothing, just past its end
  CHECK_FALSE(range_within(0x1000, 0x100, 0x0fff, 1)); // before it
  CHECK_FALSE(range_within(0x1000, 0x100, 0x10ff, 2)); // one byte past its end
  CHECK_FALSE(range_within(0x1000, 0x100, 0x1101, 0)); // starts past its end
  // addr + len or start + length would wrap past 2^64: still judged right.
  CHECK_FALSE(range_within(0x1000, 0x100, top, 2));
  CHECK_FALSE(range_within(0x1000, 0x100, 0x1000, top));
  CHECK_FALSE(range_within(0x1000, 0x100, 0x1080, top - 0x7f));
  CHECK(range_within(top - 0xff, 0x100, top, 1));      // a region that ends at the top of the space
  CHECK_FALSE(range_within(top - 0xff, 0x100, top, 2));
}
