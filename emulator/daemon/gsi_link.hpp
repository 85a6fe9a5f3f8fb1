// QP1 between the engine thread (which alone touches the transport) and the control thread (where the
// connection manager and the rdma_cm IDs live, next to the client sessions): received MADs are copied and
// posted to the control thread's io_context; MADs to send go to the engine as commands. CM traffic is a
// few MADs per connection, so a copy and a thread hop each are nothing; in return the CM state needs no
// lock and the engine's loop is not touched.
#pragma once

#include <functional>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "emulator/daemon/engine_access.hpp"
#include "transport/cm/connection_manager.hpp"

namespace uroce::emulator {

class GsiLink final : public cm::MadSender {
 public:
  using Receiver = std::function<void(const cm::MadAddress& from, std::span<const uint8_t> mad)>;

  // `gids`: the port's GID table (a MAD leaves from the GID of the destination's address family).
  GsiLink(EngineAccess& engine, boost::asio::io_context& io, std::vector<wire::IpAddress> gids);
  // The port's GID table changed (uroce address add or del).
  void set_gids(std::vector<wire::IpAddress> gids) { gids_ = std::move(gids); }

  // Installs the QP1 handler on the engine; MADs then reach `receiver` on the io_context's thread.
  // Call from that thread once the engine runs (it waits for the engine).
  void start(Receiver receiver);
  void send(const cm::MadAddress& to, const cm::Mad& mad) override;

 private:
  EngineAccess& engine_;
  boost::asio::io_context& io_;
  std::vector<wire::IpAddress> gids_;
  Receiver receiver_;
};

}  // namespace uroce::emulator
