#include "emulator/daemon/control_adapter.hpp"

#include <unistd.h>

#include <random>

#include <spdlog/spdlog.h>

#include "emulator/control/session.hpp"

namespace uroce::emulator {

namespace {

// 128 random bits, in hex: what a connection must show to join a session it did not open.
std::string new_token() {
  std::random_device random;
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", random());
  return token;
}

}  // namespace

void ControlAdapter::on_hello(control::Session& session, const nlohmann::json& request, control::Reply& reply) {
  reply.body["daemon_pid"] = getpid();
  if (const auto j = request.find("join"); j != request.end()) return join(session, *j, reply);
  service_.open_session(session.id(), session.pid(), session.uid());
  Opened& o = opened_[session.id()];
  o.token = new_token();
  o.uid = session.uid();
  reply.body["join_token"] = o.token;
}

void ControlAdapter::join(control::Session& session, const nlohmann::json& join, control::Reply& reply) {
  const auto number = join.find("session");
  const auto token = join.find("token");
  if (!join.is_object() || number == join.end() || !number->is_number_unsigned() || token == join.end() ||
      !token->is_string()) {
    return reply.fail(EINVAL, "\"join\" needs a session number and its token");
  }
  const auto it = opened_.find(number->get<uint64_t>());
  if (it == opened_.end() || it->second.token != token->get<std::string>() || it->second.uid != session.uid()) {
    spdlog::warn("control: session {} (pid {}) refused: no session {} with that token for uid {}", session.id(),
                 session.pid(), number->dump(), session.uid());
    return reply.fail(EPERM, "no such session to join");
  }
  ++it->second.connections;
  joined_[session.id()] = it->first;
  reply.body["joined"] = it->first;
  spdlog::info("client {} (pid {}) joined client {}", session.id(), session.pid(), it->first);
}

uint64_t ControlAdapter::effective(uint64_t connection) const {
  const auto it = joined_.find(connection);
  return it == joined_.end() ? connection : it->second;
}

void ControlAdapter::handle(control::Session& session, const nlohmann::json& request, control::Reply& reply) {
  std::vector<int> fds;
  std::vector<int> received;
  for (const auto& fd : session.received_fds()) received.push_back(fd.get());
  const uint64_t id = effective(session.id());
  const pid_t caller = id == session.id() ? 0 : session.pid();
  try {
    if (cm_ != nullptr && CmService::handles(request.value("op", std::string()))) {
      reply.body = cm_->handle(id, request, fds);
    } else {
      reply.body = service_.handle(id, request, fds, received, caller);
      // `uroce stats` shows the connection manager's counters beside the device's.
      if (cm_ != nullptr && request.value("op", std::string()) == "stats") {
        reply.body["cm"] = cm_->handle(id, {{"op", "cm_stats"}}, fds);
      }
    }
    for (int fd : fds) reply.attach(control::UniqueFd(fd));
  } catch (const ServiceError& e) {
    for (int fd : fds) close(fd);
    reply.fail(e.error, e.what());
  }
}

void ControlAdapter::on_close(control::Session& session) {
  uint64_t id = session.id();
  if (const auto j = joined_.find(id); j != joined_.end()) {
    id = j->second;
    joined_.erase(j);
  }
  const auto o = opened_.find(id);
  if (o == opened_.end()) return;  // closed before its hello
  if (--o->second.connections != 0) return;
  opened_.erase(o);
  if (cm_ != nullptr) cm_->close_session(id);
  service_.close_session(id);
}

}  // namespace uroce::emulator
