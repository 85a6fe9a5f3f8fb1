#include "frames.hpp"

#include "emulator/port/mbuf_frame.hpp"

#include <catch2/catch.hpp>
#include <rte_mbuf.h>

#include <thread>

namespace uroce::emulator::port::test {

Frame make_frame(const wire::MacAddress& destination, const wire::MacAddress& source, size_t size,
                 uint32_t seed) {
  Frame frame(size);
  std::copy(destination.bytes.begin(), destination.bytes.end(), frame.begin());
  std::copy(source.bytes.begin(), source.bytes.end(), frame.begin() + 6);
  frame[12] = kTestEtherType >> 8;
  frame[13] = kTestEtherType & 0xff;
  uint32_t state = seed * 2654435761u + 1;
  for (size_t i = 14; i < size; ++i) {
    state = state * 1103515245u + 12345u;
    frame[i] = static_cast<uint8_t>(state >> 16);
  }
  return frame;
}

bool is_test_frame(const Frame& frame) {
  return frame.size() >= 14 && frame[12] == (kTestEtherType >> 8) && frame[13] == (kTestEtherType & 0xff);
}

void send_frames(DpdkPort& port, const std::vector<Frame>& frames) {
  for (const auto& frame : frames) {
    rte_mbuf* mbuf = copy_frame_into_mbuf(port.mempool(), frame);
    REQUIRE(mbuf != nullptr);
    // A kernel-backed port can be briefly busy; give it a moment rather than fail on the first refusal.
    bool sent = false;
    for (int attempt = 0; attempt < 1000 && !sent; ++attempt) {
      sent = port.tx_burst(&mbuf, 1) == 1;
      if (!sent) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (!sent) rte_pktmbuf_free(mbuf);
    REQUIRE(sent);
  }
}

std::vector<Frame> receive_frames(DpdkPort& port, size_t count, std::chrono::milliseconds timeout) {
  std::vector<Frame> received;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  rte_mbuf* burst[32];
  while (received.size() < count && std::chrono::steady_clock::now() < deadline) {
    uint16_t n = port.rx_burst(burst, 32);
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    for (uint16_t i = 0; i < n; ++i) {
      auto bytes = frame_of(burst[i]);
      Frame frame(bytes.begin(), bytes.end());
      if (is_test_frame(frame)) received.push_back(std::move(frame));
      rte_pktmbuf_free(burst[i]);
    }
  }
  return received;
}

}  // namespace uroce::emulator::port::test
