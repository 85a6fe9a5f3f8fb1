// The counters as `uroce stats` will see them: every field named once, names unique, values as set.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "emulator/net/counters.hpp"

using namespace uroce::emulator::net;

TEST_CASE("for_each_counter names every counter once, drop reasons included", "[counters]") {
  NetCounters c;
  c.rx_roce = 11;
  c.arp_parked_dropped = 7;
  c.dropped(DropReason::bad_icmp_checksum) = 3;
  c.dropped(DropReason::not_for_our_mac) = 2;
  std::set<std::string> names;
  uint64_t sum = 0;
  size_t visited = 0;
  for_each_counter(c, [&](std::string_view name, uint64_t value) {
    names.emplace(name);
    sum += value;
    ++visited;
  });
  CHECK(names.size() == visited);
  // Every uint64_t member is listed: the struct is nothing but counters.
  CHECK(visited * sizeof(uint64_t) == sizeof(NetCounters));
  CHECK(names.count("rx_roce") == 1);
  CHECK(names.count("dropped.bad_icmp_checksum") == 1);
  CHECK(names.count("dropped.not_for_our_mac") == 1);
  CHECK(sum == 23);
  CHECK(c.dropped_total() == 5);
}

TEST_CASE("drop reasons have distinct names and a malformed/not-ours split", "[counters]") {
  std::set<std::string_view> names;
  for (size_t i = 0; i < drop_reason_count; ++i) names.insert(to_string(DropReason(i)));
  CHECK(names.size() == drop_reason_count);
  CHECK(names.count("unknown") == 0);
  CHECK_FALSE(is_malformed(DropReason::not_for_our_ip));
  CHECK_FALSE(is_malformed(DropReason::ipv4_fragment));
  CHECK(is_malformed(DropReason::truncated_ethernet));
  CHECK(is_malformed(DropReason::bad_icmp_checksum));
}
