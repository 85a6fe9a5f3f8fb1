#include "emulator/daemon/control_adapter.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "emulator/control/session.hpp"

namespace uroce::emulator {

void ControlAdapter::on_hello(control::Session& session, const nlohmann::json&, control::Reply& reply) {
  service_.open_session(session.id(), session.pid(), session.uid());
  reply.body["daemon_pid"] = getpid();
}

void ControlAdapter::handle(control::Session& session, const nlohmann::json& request, control::Reply& reply) {
  std::vector<int> fds;
  std::vector<int> received;
  for (const auto& fd : session.received_fds()) received.push_back(fd.get());
  try {
    if (cm_ != nullptr && CmService::handles(request.value("op", std::string()))) {
      reply.body = cm_->handle(session.id(), request, fds);
    } else {
      reply.body = service_.handle(session.id(), request, fds, received);
      // `uroce stats` shows the connection manager's counters beside the device's.
      if (cm_ != nullptr && request.value("op", std::string()) == "stats") {
        reply.body["cm"] = cm_->handle(session.id(), {{"op", "cm_stats"}}, fds);
      }
    }
    for (int fd : fds) reply.attach(control::UniqueFd(fd));
  } catch (const ServiceError& e) {
    for (int fd : fds) close(fd);
    reply.fail(e.error, e.what());
  }
}

void ControlAdapter::on_close(control::Session& session) {
  if (cm_ != nullptr) cm_->close_session(session.id());
  service_.close_session(session.id());
}

}  // namespace uroce::emulator
