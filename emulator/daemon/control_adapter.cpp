#include "emulator/daemon/control_adapter.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <optional>
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

// A socket's identity (device and inode), as every descriptor of it shows it; none for anything else.
std::optional<std::pair<dev_t, ino_t>> socket_identity(int fd) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return std::pair{st.st_dev, st.st_ino};
}

}  // namespace

void ControlAdapter::on_hello(control::Session& session, const nlohmann::json& request, control::Reply& reply) {
  reply.body["daemon_pid"] = getpid();
  const auto imported = request.find("import");
  if (imported != request.end() && !imported->is_boolean()) return reply.fail(EINVAL, "\"import\" must be a boolean");
  if (const auto j = request.find("join"); j != request.end()) {
    join(session, *j, reply);
  } else if (imported != request.end() && imported->get<bool>()) {
    import(session, reply);
  } else {
    service_.open_session(session.id(), session.pid(), session.uid());
    Opened& o = opened_[session.id()];
    o.token = new_token();
    o.uid = session.uid();
    reply.body["join_token"] = o.token;
  }
  if (!reply.failed()) remember_client_end(session);
}

void ControlAdapter::remember_client_end(control::Session& session) {
  const auto& fds = session.received_fds();
  if (fds.empty()) return;
  const auto end = socket_identity(fds[0].get());
  // The first connection to show an end keeps it: a later one showing the same end got it from that one.
  if (!end || client_ends_.contains(*end)) return;
  client_ends_[*end] = session.id();
  client_end_of_[session.id()] = *end;
}

void ControlAdapter::import(control::Session& session, control::Reply& reply) {
  const auto& fds = session.received_fds();
  const auto end = fds.size() >= 2 ? socket_identity(fds[1].get()) : std::nullopt;
  if (!end) return reply.fail(EBADF, "\"import\" needs a uroce context's command descriptor (the second one)");
  const auto it = client_ends_.find(*end);
  if (it == client_ends_.end() || !opened_.contains(effective(it->second))) {
    spdlog::warn("control: session {} (pid {}) refused: its descriptor is no open uroce context's", session.id(),
                 session.pid());
    return reply.fail(EPERM, "that descriptor is no open uroce context's");
  }
  attach_to(session, effective(it->second), reply);
}

void ControlAdapter::attach_to(control::Session& session, uint64_t target, control::Reply& reply) {
  ++opened_.at(target).connections;
  joined_[session.id()] = target;
  reply.body["joined"] = target;
  spdlog::info("client {} (pid {}) joined client {}", session.id(), session.pid(), target);
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
  attach_to(session, it->first, reply);
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
    const auto op_field = request.find("op");
    const std::string op = op_field != request.end() && op_field->is_string() ? op_field->get<std::string>() : "";
    if (cm_ != nullptr && CmService::handles(op)) {
      reply.body = cm_->handle(id, request, fds, received);
    } else if (addresses_ != nullptr && PortAddressService::handles(op)) {
      reply.body = addresses_->handle(session.uid(), request);  // (the connection's own user)
    } else {
      reply.body = service_.handle(id, request, fds, received, caller);
      // `uroce stats` shows the connection manager's counters beside the device's.
      if (cm_ != nullptr && op == "stats") {
        reply.body["cm"] = cm_->handle(id, {{"op", "cm_stats"}}, fds);
      }
    }
    for (int fd : fds) reply.attach(control::UniqueFd(fd));
  } catch (const ServiceError& e) {
    for (int fd : fds) close(fd);
    reply.fail(e.error, e.what());
  } catch (const std::bad_alloc&) {
    // The daemon is out of memory, or of mappings (vm.max_map_count): the request failed, and says so.
    for (int fd : fds) close(fd);
    reply.fail(ENOMEM, "uroced is out of memory");
  }
}

void ControlAdapter::on_close(control::Session& session) {
  uint64_t id = session.id();
  if (const auto e = client_end_of_.find(id); e != client_end_of_.end()) {
    client_ends_.erase(e->second);
    client_end_of_.erase(e);
  }
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
