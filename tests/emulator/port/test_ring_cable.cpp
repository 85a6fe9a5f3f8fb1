#include "emulator/port/dpdk_port.hpp"

#include <catch2/catch.hpp>

#include "frames.hpp"

using namespace uroce::emulator::port;
using namespace uroce::emulator::port::test;

TEST_CASE("Two ring ports joined by a cable exchange frames both ways") {
  auto [a, b] = DpdkPort::cable("cable_a", "cable_b");
  REQUIRE(a->port_id() != b->port_id());

  std::vector<Frame> a_to_b, b_to_a;
  for (uint32_t i = 0; i < 40; ++i) {
    a_to_b.push_back(make_frame(b->mac(), a->mac(), 64 + i * 200, i));
    b_to_a.push_back(make_frame(a->mac(), b->mac(), 9000 - i * 100, 1000 + i));
  }
  send_frames(*a, a_to_b);
  send_frames(*b, b_to_a);
  CHECK(receive_frames(*b, a_to_b.size()) == a_to_b);
  CHECK(receive_frames(*a, b_to_a.size()) == b_to_a);
  CHECK(receive_frames(*a, 1, std::chrono::milliseconds(20)).empty());  // nothing came back to its sender
}

TEST_CASE("A cable end can go first while frames are in flight") {
  auto [a, b] = DpdkPort::cable("cable_c", "cable_d");
  send_frames(*a, {make_frame(b->mac(), a->mac(), 100, 1)});
  a.reset();  // the frame is still in the ring; the shared pool keeps its mbuf valid
  CHECK(receive_frames(*b, 1).size() == 1);
  send_frames(*b, {make_frame(b->mac(), b->mac(), 100, 2)});  // into a ring nobody reads any more
}
