// Port events: the link watch reports each change of the port's link once, and the verbs service turns a
// change into IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE for port 1 on every open device context's async
// event pipe, as a RoCE NIC's driver does for every uverbs file of the device.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "emulator/daemon/link_watch.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using namespace std::chrono_literals;
using emulator::LinkWatch;
using protocol::AsyncEventRecord;

// Runs `io` until `done` or 2 s.
template <class Done>
void run_until(boost::asio::io_context& io, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (!done() && std::chrono::steady_clock::now() < deadline) io.run_for(1ms);
}

}  // namespace

TEST_CASE("the link watch reports each change once and not the state it started in", "[port-events]") {
  boost::asio::io_context io;
  std::atomic<bool> link{false};  // a memif: down until its peer connects
  std::vector<bool> reports;
  LinkWatch watch(io, [&] { return link.load(); }, [&](bool up) { reports.push_back(up); }, 1ms);
  CHECK_FALSE(watch.up());

  io.run_for(20ms);
  CHECK(reports.empty());  // down from the start: nothing to say

  link = true;
  run_until(io, [&] { return !reports.empty(); });
  io.run_for(20ms);  // stays up: said once
  REQUIRE(reports == std::vector<bool>{true});
  CHECK(watch.up());

  link = false;
  run_until(io, [&] { return reports.size() == 2; });
  link = true;
  run_until(io, [&] { return reports.size() == 3; });
  CHECK(reports == std::vector<bool>{true, false, true});

  // Stopped, it lets run() return and says nothing more.
  watch.stop();
  link = false;
  io.restart();
  io.run();
  CHECK(reports.size() == 3);
}

TEST_CASE("a link change reaches every open device context as a port event for port 1", "[port-events]") {
  ServiceHarness h;
  std::vector<int> fds1, fds2;
  h.service->open_session(1, getpid(), getuid());
  h.service->open_session(2, getpid(), getuid());
  h.service->open_session(3, getpid(), getuid());  // connected, but no device open: no pipe
  h.call(1, {{"op", "open_device"}}, &fds1);
  h.call(2, {{"op", "open_device"}}, &fds2);
  for (int fd : {fds1[0], fds2[0]}) REQUIRE(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);

  h.service->port_link_changed(false);
  h.service->port_link_changed(true);
  for (int fd : {fds1[0], fds2[0]}) {
    const auto events = drain_records<AsyncEventRecord>(fd);
    REQUIRE(events.size() == 2);
    CHECK(events[0].type == uint32_t(verbs::EventType::port_err));
    CHECK(events[0].object == 1);
    CHECK(events[1].type == uint32_t(verbs::EventType::port_active));
    CHECK(events[1].object == 1);
  }
  CHECK(h.queues->counters().events_sent == 4);
  CHECK(h.queues->counters().events_lost == 0);

  // A session that closed hears nothing more; the others still do.
  h.service->close_session(1);
  h.service->port_link_changed(false);
  CHECK(drain_records<AsyncEventRecord>(fds2[0]).size() == 1);
  CHECK(h.queues->counters().events_lost == 0);
  close_all(fds1);
  close_all(fds2);
}

}  // namespace uroce::test::service
