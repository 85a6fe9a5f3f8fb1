// The device's containers: RingQueue (work queues) and NumberedTable (QPs and CQs by number). The
// protocol tests use them through the Device; these reach the corners those rarely do: ring wrap-around
// while growing, and numbers that share their low bits in the table's index.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "transport/completion_queue.hpp"
#include "transport/numbered_table.hpp"
#include "transport/ring_queue.hpp"

using uroce::transport::CompletionQueue;
using uroce::transport::NumberedTable;
using uroce::transport::RingQueue;

TEST_CASE("RingQueue is a FIFO across wrap-around and growth", "[transport][containers]") {
  RingQueue<std::string> q;
  CHECK(q.empty());
  std::vector<std::string> model;  // what the queue should hold, oldest first
  size_t next = 0;
  // Push more than pop, so that the ring wraps (head moves) before each growth.
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3; ++i) {
      q.push_back(std::to_string(next));
      model.push_back(std::to_string(next++));
    }
    for (int i = 0; i < 2; ++i) {
      REQUIRE(q.front() == model.front());
      q.pop_front();
      model.erase(model.begin());
    }
    REQUIRE(q.size() == model.size());
    for (size_t i = 0; i < model.size(); ++i) REQUIRE(q[i] == model[i]);
  }
  size_t i = 0;
  for (const std::string& s : q) CHECK(s == model[i++]);
  CHECK(q.back() == model.back());

  RingQueue<std::string> moved = std::move(q);
  CHECK(moved.size() == model.size());
  CHECK(moved.front() == model.front());
  moved.clear();
  CHECK(moved.empty());
  moved.emplace_back("again");
  CHECK(moved.front() == "again");
}

TEST_CASE("NumberedTable finds by number, also when numbers collide in its index", "[transport][containers]") {
  NumberedTable<int> t;
  // 0x11 and 0x11 + 64 share their low bits in the initial 64-entry index.
  t.insert(0x11, std::make_unique<int>(1));
  t.insert(0x11 + 64, std::make_unique<int>(2));
  REQUIRE(t.find(0x11) != nullptr);
  CHECK(*t.find(0x11) == 1);
  REQUIRE(t.find(0x11 + 64) != nullptr);
  CHECK(*t.find(0x11 + 64) == 2);
  CHECK(t.find(0x11 + 128) == nullptr);  // shares the slot, never inserted
  CHECK(t.find(0x12) == nullptr);

  // Removing the indexed one lets the other take its slot; a removed number never finds anything.
  CHECK(t.erase(0x11));
  CHECK(t.find(0x11) == nullptr);
  REQUIRE(t.find(0x11 + 64) != nullptr);
  CHECK(*t.find(0x11 + 64) == 2);
  CHECK_FALSE(t.erase(0x11));

  // Growth (the index stays at least twice the population) keeps every object reachable.
  for (uint32_t n = 1000; n < 1300; ++n) t.insert(n, std::make_unique<int>(int(n)));
  CHECK(t.size() == 301);
  for (uint32_t n = 1000; n < 1300; ++n) {
    REQUIRE(t.find(n) != nullptr);
    CHECK(*t.find(n) == int(n));
  }
  for (uint32_t n = 1000; n < 1300; n += 2) CHECK(t.erase(n));
  for (uint32_t n = 1000; n < 1300; ++n) CHECK((t.find(n) != nullptr) == (n % 2 == 1));
  size_t seen = 0;
  for (const auto& [number, object] : t) {
    CHECK(*object == (number == 0x11 + 64 ? 2 : int(number)));
    ++seen;
  }
  CHECK(seen == t.size());
}

TEST_CASE("CompletionQueue::remove_qp keeps the other QPs' completions in order, across wrap-around",
          "[transport][containers]") {
  CompletionQueue cq(8);
  std::vector<uroce::verbs::WorkCompletion> out(8);
  // Move the ring's head so that the queued completions wrap around its end.
  for (int i = 0; i < 5; ++i) REQUIRE(cq.push({.wr_id = 0, .qp_num = 9}));
  REQUIRE(cq.poll(std::span(out.data(), 5)) == 5);
  const uint32_t qps[] = {1, 2, 1, 3, 2, 1, 2};
  for (uint64_t i = 0; i < 7; ++i) REQUIRE(cq.push({.wr_id = i, .qp_num = qps[i]}));
  CHECK(cq.remove_qp(2) == 3);
  CHECK(cq.remove_qp(7) == 0);
  REQUIRE(cq.size() == 4);
  REQUIRE(cq.push({.wr_id = 99, .qp_num = 4}));  // the room is there again
  REQUIRE(cq.poll(out) == 5);
  const uint64_t want[] = {0, 2, 3, 5, 99};
  for (int i = 0; i < 5; ++i) {
    CHECK(out[size_t(i)].wr_id == want[i]);
    CHECK(out[size_t(i)].qp_num != 2);
  }
}

TEST_CASE("CompletionQueue grows its slots with use, keeps order across growth, and overflows at its capacity",
          "[transport][containers]") {
  const uint32_t capacity = 4194303;  // the device's max_cqe (a ConnectX's)
  CompletionQueue cq(capacity);
  CHECK(cq.capacity() == capacity);
  CHECK(cq.slots() == CompletionQueue::kInitialSlots);  // an idle CQ does not cost its capacity
  // Wrap the head, then fill past several growths; a model checks the order.
  std::vector<uroce::verbs::WorkCompletion> out(1000);
  uint64_t next = 0, expected = 0;
  for (int i = 0; i < 40; ++i) REQUIRE(cq.push({.wr_id = next++}));
  REQUIRE(cq.poll(std::span(out.data(), 30)) == 30);
  expected = 30;
  for (int i = 0; i < 5000; ++i) REQUIRE(cq.push({.wr_id = next++}));
  CHECK(cq.slots() == 8192);
  while (cq.size() > 0) {
    const size_t n = cq.poll(out);
    for (size_t i = 0; i < n; ++i) REQUIRE(out[i].wr_id == expected++);
  }
  CHECK(expected == next);

  // A small CQ overflows at its capacity, not at a power of two, and says so.
  CompletionQueue small(100);
  for (uint64_t i = 0; i < 100; ++i) REQUIRE(small.push({.wr_id = i}));
  CHECK(small.slots() == 100);
  CHECK_FALSE(small.overflowed());
  CHECK_FALSE(small.push({.wr_id = 100}));
  CHECK(small.overflowed());

  // resize: below what is queued refused; shrinking keeps the order and the new limit.
  CompletionQueue r(1000);
  for (uint64_t i = 0; i < 300; ++i) REQUIRE(r.push({.wr_id = i}));
  CHECK_FALSE(r.resize(299));
  REQUIRE(r.resize(300));
  CHECK(r.capacity() == 300);
  CHECK_FALSE(r.push({.wr_id = 300}));
  REQUIRE(r.poll(out) == 300);
  for (uint64_t i = 0; i < 300; ++i) CHECK(out[i].wr_id == i);
}
