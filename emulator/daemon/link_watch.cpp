#include "emulator/daemon/link_watch.hpp"

#include <utility>

namespace uroce::emulator {

LinkWatch::LinkWatch(boost::asio::io_context& io, std::function<bool()> link_up,
                     std::function<void(bool up)> changed, std::chrono::milliseconds period)
    : link_up_(std::move(link_up)), changed_(std::move(changed)), up_(link_up_()), poll_(io, period, [this] {
        if (const bool now = link_up_(); now != up_) {
          up_ = now;
          changed_(now);
        }
        return true;
      }) {}

void LinkWatch::stop() { poll_.stop(); }

}  // namespace uroce::emulator
