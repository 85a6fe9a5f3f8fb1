#include "emulator/daemon/gsi_link.hpp"

#include "emulator/daemon/source_gid.hpp"

#include <array>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

namespace uroce::emulator {

GsiLink::GsiLink(EngineAccess& engine, boost::asio::io_context& io, std::vector<wire::IpAddress> gids)
    : engine_(engine), io_(io), gids_(std::move(gids)) {}

void GsiLink::start(Receiver receiver) {
  receiver_ = std::move(receiver);
  engine_.run_on_engine([this](EngineContext& c) {
    c.device.set_gsi_handler([this](const transport::GsiDatagram& d, transport::Nanos) {
      // Engine thread: copy out of the frame (valid only now) and hand over.
      cm::MadAddress from{d.source_gid, d.source_qpn, d.sl};
      cm::Mad mad{};
      std::copy(d.mad.begin(), d.mad.end(), mad.begin());
      boost::asio::post(io_, [this, from, mad] { receiver_(from, mad); });
    });
  });
}

void GsiLink::send(const cm::MadAddress& to, const cm::Mad& mad) {
  verbs::AddressVector av;
  av.dgid = to.gid;
  av.sgid_index = uint8_t(source_gid_index(gids_, to.gid).value_or(0));
  av.service_level = to.sl;
  int rc = 0;
  try {
    engine_.run_on_engine([&](EngineContext& c) { rc = c.device.send_gsi(av, to.qpn, mad); });
  } catch (const std::exception& e) {  // the engine has stopped: the daemon is going away
    spdlog::debug("rdma_cm: MAD not sent: {}", e.what());
    return;
  }
  if (rc != 0) spdlog::warn("rdma_cm: a MAD to {} could not be sent (errno {})", wire::to_string(to.gid), rc);
}

}  // namespace uroce::emulator
