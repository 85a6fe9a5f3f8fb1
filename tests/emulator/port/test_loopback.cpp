#include "emulator/port/dpdk_port.hpp"
#include "emulator/port/mbuf_frame.hpp"

#include <catch2/catch.hpp>
#include <rte_mbuf.h>

#include <chrono>

#include "frames.hpp"

using namespace uroce::emulator::port;
using namespace uroce::emulator::port::test;

TEST_CASE("The loopback port receives exactly the frames it sends") {
  auto port = DpdkPort::loopback("lo_exact");
  CHECK(port->name() == "net_ring_lo_exact");
  CHECK(port->link().up);
  auto self = port->mac();

  std::vector<Frame> sent;
  uint32_t seed = 0;
  for (int burst = 0; burst < 5; ++burst) {
    std::vector<Frame> frames;
    for (int i = 0; i < 20; ++i, ++seed) frames.push_back(make_frame(self, self, 60 + (seed * 37) % 1450, seed));
    if (burst == 2) frames.push_back(make_frame(self, self, 9000, seed++));  // a jumbo frame, one segment
    send_frames(*port, frames);
    auto received = receive_frames(*port, frames.size());
    REQUIRE(received.size() == frames.size());
    CHECK(received == frames);  // byte-exact and in order
    sent.insert(sent.end(), frames.begin(), frames.end());
  }
  auto stats = port->stats();
  CHECK(stats.opackets == sent.size());
  CHECK(stats.ipackets == sent.size());
  CHECK(stats.oerrors == 0);
  CHECK(port->xstat("rx_good_packets") == sent.size());
  CHECK_FALSE(port->xstat("no_such_counter").has_value());
  CHECK_FALSE(port->xstats().empty());
}

TEST_CASE("send_or_drop frees and counts what the port cannot take") {
  auto port = DpdkPort::loopback("lo_full");
  // Nobody receives, so the ring (1023 usable slots) fills up and the rest is dropped.
  constexpr uint16_t kFrames = 1100;
  std::vector<rte_mbuf*> mbufs(kFrames);
  auto frame = make_frame(port->mac(), port->mac(), 64, 1);
  for (auto& mbuf : mbufs) {
    mbuf = copy_frame_into_mbuf(port->mempool(), frame);
    REQUIRE(mbuf);
  }
  uint16_t sent = 0;
  for (uint16_t at = 0; at < kFrames; at += 32) {
    uint16_t n = std::min<uint16_t>(32, kFrames - at);
    sent += port->send_or_drop(mbufs.data() + at, n);
  }
  CHECK(sent == 1023);
  CHECK(port->stats().tx_dropped == uint64_t{kFrames} - sent);
  CHECK(receive_frames(*port, sent).size() == sent);
  port->reset_stats();
  CHECK(port->stats().tx_dropped == 0);
}

TEST_CASE("Loopback burst rate", "[.][rate]") {
  auto port = DpdkPort::loopback("lo_rate");
  auto frame = make_frame(port->mac(), port->mac(), 64, 1);
  rte_mbuf* burst[32];
  uint64_t frames = 0;
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) {
    for (int i = 0; i < 32; ++i) {
      burst[i] = port->alloc();
      REQUIRE(burst[i]);
      rte_pktmbuf_append(burst[i], 64);
    }
    port->send_or_drop(burst, 32);
    uint16_t n = port->rx_burst(burst, 32);
    rte_pktmbuf_free_bulk(burst, n);
    frames += n;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  WARN("loopback: " << frames / seconds / 1e6 << " Mpps (alloc + tx + rx + free, 64 B, bursts of 32)");
}
