// Runs a function on an io_context's thread every period until it says stop or stop() is called: how the
// control thread watches what nothing announces to it (the port's link, SLAAC's addresses).
#pragma once

#include <chrono>
#include <functional>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace uroce::emulator {

class Periodic {
 public:
  // `tick` returns false to stop. The first call comes one period from now.
  Periodic(boost::asio::io_context& io, std::chrono::milliseconds period, std::function<bool()> tick)
      : timer_(io), period_(period), tick_(std::move(tick)) {
    arm();
  }
  Periodic(const Periodic&) = delete;
  Periodic& operator=(const Periodic&) = delete;

  // No call after this one, so that io_context::run can return.
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

 private:
  void arm() {
    timer_.expires_after(period_);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && !stopped_ && tick_()) arm();
    });
  }

  boost::asio::steady_timer timer_;
  std::chrono::milliseconds period_;
  std::function<bool()> tick_;
  bool stopped_ = false;
};

}  // namespace uroce::emulator
