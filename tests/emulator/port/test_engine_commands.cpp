// Engine::run_on_engine, from a control thread as uroced's services call it: a command that throws on the
// engine thread must throw in its caller, who would otherwise go on as if it had run (a registration past
// the daemon's memory returned key 0 to the application that way), and the engine must go on serving.
#include "emulator/engine/engine.hpp"

#include <new>
#include <thread>

#include <catch2/catch.hpp>

#include "emulator/port/dpdk_port.hpp"

using namespace uroce;
using namespace uroce::emulator;

TEST_CASE("a command that throws on the engine thread throws in its caller, and the engine goes on") {
  auto [port, peer] = port::DpdkPort::cable("eng_a", "eng_b");
  engine::EngineConfig config;
  config.addresses = {*wire::parse_ip("192.0.2.1")};
  config.mac = wire::MacAddress{{0x02, 0, 0, 0, 0, 1}};
  engine::Engine engine(*port, config);
  std::thread thread([&] { engine.run(); });

  CHECK_THROWS_AS(engine.run_on_engine([](EngineContext&) { throw std::bad_alloc(); }), std::bad_alloc);
  int ran = 0;
  engine.run_on_engine([&](EngineContext&) { ++ran; });
  CHECK(ran == 1);

  engine.stop();
  thread.join();
}
