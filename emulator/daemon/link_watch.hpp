// Watches the port's link and says when it goes down or comes back, so that applications hear of it as
// they do from a RoCE NIC: IBV_EVENT_PORT_ERR when the link is lost, IBV_EVENT_PORT_ACTIVE when it returns
// (the device advertises IBV_DEVICE_PORT_ACTIVE_EVENT). ibv_query_port reads the live state on its own;
// this is for programs that wait on their async event fd (ibv_asyncwatch, UCX, MPI libraries).
//
// It polls, on the control thread: few DPDK drivers raise link interrupts. In DPDK 22.11 af_packet, memif
// and the ring ports set no RTE_ETH_DEV_INTR_LSC (memif only writes dev_link when its control channel
// connects or drops), and a look at the link costs an ioctl or a read of the driver's state. A change
// shorter than one period may go unseen, as a flap faster than a NIC's own debounce does.
#pragma once

#include <chrono>
#include <functional>

#include <boost/asio/io_context.hpp>

#include "emulator/daemon/periodic.hpp"

namespace uroce::emulator {

class LinkWatch {
 public:
  static constexpr std::chrono::milliseconds default_period{100};

  // Reads `link_up` now (the state applications saw at start-up: nothing is reported for it), then every
  // `period`; calls `changed(up)` on the io_context's thread each time the answer differs from the last.
  LinkWatch(boost::asio::io_context& io, std::function<bool()> link_up, std::function<void(bool up)> changed,
            std::chrono::milliseconds period = default_period);
  // Stops polling, so that io_context::run can return; nothing is reported afterwards.
  void stop();
  bool up() const { return up_; }

 private:
  std::function<bool()> link_up_;
  std::function<void(bool)> changed_;
  bool up_;
  Periodic poll_;  // last: it starts once the rest is set
};

}  // namespace uroce::emulator
