#include "emulator/port/mbuf_frame.hpp"

#include "emulator/port/dpdk_port.hpp"

#include <catch2/catch.hpp>
#include <rte_mbuf.h>

#include <numeric>
#include <vector>

using namespace uroce::emulator::port;

TEST_CASE("A frame is copied into one mbuf and seen in place") {
  PortOptions options;
  options.mbufs = 63;
  auto port = DpdkPort::loopback("frame_test", options);
  std::vector<uint8_t> bytes(9000);
  std::iota(bytes.begin(), bytes.end(), uint8_t{7});
  rte_mbuf* mbuf = copy_frame_into_mbuf(port->mempool(), bytes);
  REQUIRE(mbuf != nullptr);
  auto frame = frame_of(mbuf);
  CHECK(frame.size() == bytes.size());
  CHECK(std::equal(frame.begin(), frame.end(), bytes.begin()));
  CHECK(static_cast<void*>(frame.data()) == rte_pktmbuf_mtod(mbuf, void*));  // in place, no copy
  rte_pktmbuf_free(mbuf);

  std::vector<uint8_t> too_big(port->max_frame() + 1);
  CHECK(copy_frame_into_mbuf(port->mempool(), too_big) == nullptr);
}

TEST_CASE("A chained mbuf is linearised into the caller's buffer") {
  PortOptions options;
  options.mbufs = 63;
  auto port = DpdkPort::loopback("chain_test", options);
  std::vector<uint8_t> first(100, 0xaa), second(50, 0xbb);
  rte_mbuf* head = copy_frame_into_mbuf(port->mempool(), first);
  rte_mbuf* tail = copy_frame_into_mbuf(port->mempool(), second);
  REQUIRE(head);
  REQUIRE(tail);
  REQUIRE(rte_pktmbuf_chain(head, tail) == 0);
  CHECK(frame_of(head).empty());  // not one segment: no in-place view

  std::vector<uint8_t> scratch(200);
  auto frame = frame_of(head, scratch);
  REQUIRE(frame.size() == 150);
  CHECK(frame.data() == scratch.data());
  CHECK(std::all_of(frame.begin(), frame.begin() + 100, [](uint8_t b) { return b == 0xaa; }));
  CHECK(std::all_of(frame.begin() + 100, frame.end(), [](uint8_t b) { return b == 0xbb; }));

  std::vector<uint8_t> small(10);
  CHECK(frame_of(head, small).empty());
  rte_pktmbuf_free(head);
}
