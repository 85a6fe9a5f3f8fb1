#include "emulator/daemon/link_watch.hpp"

#include <utility>

namespace uroce::emulator {

LinkWatch::LinkWatch(boost::asio::io_context& io, std::function<bool()> link_up,
                     std::function<void(bool up)> changed, std::chrono::milliseconds period)
    : timer_(io), link_up_(std::move(link_up)), changed_(std::move(changed)), period_(period), up_(link_up_()) {
  arm();
}

void LinkWatch::stop() {
  stopped_ = true;
  timer_.cancel();
}

void LinkWatch::arm() {
  timer_.expires_after(period_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    if (const bool now = link_up_(); now != up_) {
      up_ = now;
      changed_(now);
    }
    arm();
  });
}

}  // namespace uroce::emulator
