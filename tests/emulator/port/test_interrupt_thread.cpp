#include "emulator/port/interrupt_thread.hpp"

#include <catch2/catch.hpp>
#include <rte_interrupts.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace uroce::emulator::port;
using namespace std::chrono_literals;

TEST_CASE("work for the interrupt thread runs there and the caller waits for it") {
  std::atomic<bool> on_interrupt_thread{false}, finished{false};
  CHECK(run_on_interrupt_thread([&] {
    on_interrupt_thread = rte_thread_is_intr();
    std::this_thread::sleep_for(50ms);
    finished = true;
  }));
  CHECK(on_interrupt_thread);
  CHECK(finished);
}

TEST_CASE("work for a busy interrupt thread runs on the caller after the patience") {
  // Another caller holds the interrupt thread for 600 ms; ours gives up after 100 ms and runs the work
  // itself, and the late alarm is cancelled, so the work runs once.
  std::atomic<bool> holding{false};
  std::thread holder([&] {
    run_on_interrupt_thread([&] {
      holding = true;
      std::this_thread::sleep_for(600ms);
    });
  });
  while (!holding) std::this_thread::sleep_for(1ms);
  std::atomic<int> runs{0};
  std::atomic<bool> on_interrupt_thread{true};
  auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(run_on_interrupt_thread(
      [&] {
        ++runs;
        on_interrupt_thread = rte_thread_is_intr();
      },
      100ms));
  auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= 100ms);
  CHECK(waited < 500ms);
  CHECK_FALSE(on_interrupt_thread);
  holder.join();
  std::this_thread::sleep_for(20ms);  // a cancelled alarm would have run by now
  CHECK(runs == 1);
}
