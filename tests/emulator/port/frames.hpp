// Test frames: recognisable Ethernet frames and helpers to send and collect them through a port.
#pragma once

#include "emulator/port/dpdk_port.hpp"

#include <chrono>
#include <cstdint>
#include <vector>

namespace uroce::emulator::port::test {

// An experimental EtherType (IEEE 802 local use): frames the tests send are told apart from anything
// the kernel itself puts on an interface the test created (IPv6 neighbour discovery, ...).
constexpr uint16_t kTestEtherType = 0x88b5;

using Frame = std::vector<uint8_t>;

// A frame of `size` bytes from `source` to `destination` whose payload is a pattern derived from `seed`.
Frame make_frame(const wire::MacAddress& destination, const wire::MacAddress& source, size_t size,
                 uint32_t seed);
bool is_test_frame(const Frame& frame);

// Copies frames into mbufs and sends them all (fails the test if the port does not take them).
void send_frames(DpdkPort& port, const std::vector<Frame>& frames);
// Receives test frames until `count` arrived or `timeout` passed; other frames are dropped.
std::vector<Frame> receive_frames(DpdkPort& port, size_t count,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));

}  // namespace uroce::emulator::port::test
