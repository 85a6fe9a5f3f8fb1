#include "test_handler.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>

namespace uroce::emulator::control::testing {
namespace {

constexpr std::size_t kMemfdBytes = 4096;

std::string read_text_at_start(int fd) {
  char buffer[256] = {};
  const ssize_t n = ::pread(fd, buffer, sizeof buffer - 1, 0);
  if (n < 0) throw std::runtime_error("pread failed");
  return std::string(buffer, static_cast<std::size_t>(n)).c_str();  // up to the first NUL
}

}  // namespace

void TestHandler::on_open(Session& session) {
  const std::lock_guard lock(mutex_);
  opened_.push_back({session.id(), session.pid()});
  changed_.notify_all();
}

void TestHandler::on_hello(Session&, const nlohmann::json& request, Reply& reply) {
  if (request.value("client", "") == "refuse-me") {
    reply.fail(EPERM, "this client is not welcome");
    return;
  }
  reply.body["capabilities"] = {"echo", "memfd", "eventfd"};
}

void TestHandler::on_close(Session& session) {
  const std::lock_guard lock(mutex_);
  closed_.push_back({session.id(), session.pid()});
  memfds_.erase(session.id());
  eventfds_.erase(session.id());
  changed_.notify_all();
}

void TestHandler::handle(Session& session, const nlohmann::json& request, Reply& reply) {
  answer(session, request.at("op").get<std::string>(), request, reply);
}

void TestHandler::answer(Session& session, const std::string& op, const nlohmann::json& request, Reply& reply) {
  if (op == "echo") {
    reply.body["data"] = request.value("data", nlohmann::json());
  } else if (op == "whoami") {
    reply.body = {{"pid", session.pid()}, {"uid", session.uid()}, {"gid", session.gid()},
                  {"session", session.id()}, {"client", session.client_name()}};
  } else if (op == "memfd") {
    UniqueFd memfd(::memfd_create("uroce-test", MFD_CLOEXEC));
    if (!memfd || ::ftruncate(memfd.get(), kMemfdBytes) != 0) throw std::runtime_error("memfd failed");
    const std::lock_guard lock(mutex_);
    memfds_[session.id()] = UniqueFd(::fcntl(memfd.get(), F_DUPFD_CLOEXEC, 0));
    reply.body["size"] = kMemfdBytes;
    reply.attach(std::move(memfd));
  } else if (op == "read_memfd") {
    const std::lock_guard lock(mutex_);
    reply.body["text"] = read_text_at_start(memfds_.at(session.id()).get());
  } else if (op == "eventfd") {
    UniqueFd event(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    const eventfd_t initial = request.value("initial", 0u);
    if (!event || ::eventfd_write(event.get(), initial) != 0) throw std::runtime_error("eventfd failed");
    const std::lock_guard lock(mutex_);
    eventfds_[session.id()] = UniqueFd(::fcntl(event.get(), F_DUPFD_CLOEXEC, 0));
    reply.attach(std::move(event));
  } else if (op == "read_eventfd") {
    eventfd_t value = 0;
    const std::lock_guard lock(mutex_);
    if (::eventfd_read(eventfds_.at(session.id()).get(), &value) != 0) value = 0;
    reply.body["value"] = value;
  } else if (op == "read_received") {
    // The texts at the start of every descriptor the client sent; the server keeps none of them.
    nlohmann::json texts = nlohmann::json::array();
    bool all_close_on_exec = true;
    for (const UniqueFd& fd : session.received_fds()) {
      texts.push_back(read_text_at_start(fd.get()));
      all_close_on_exec = all_close_on_exec && (::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC) != 0;
    }
    reply.body["texts"] = texts;
    reply.body["close_on_exec"] = all_close_on_exec;
  } else if (op == "event_then_reply") {
    session.send_event({{"event", "tick"}, {"n", 1}});
    reply.body["done"] = true;
  } else if (op == "broadcast") {
    server->broadcast({{"event", "news"}, {"text", request.value("text", "")}});
  } else if (op == "fail") {
    reply.fail(ENOENT, "no such thing");
  } else if (op == "throw") {
    throw std::runtime_error("the handler broke");
  } else {
    reply.fail(EOPNOTSUPP, "unknown op " + op);
  }
}

std::vector<SessionRecord> TestHandler::opened() const {
  const std::lock_guard lock(mutex_);
  return opened_;
}

std::vector<SessionRecord> TestHandler::closed() const {
  const std::lock_guard lock(mutex_);
  return closed_;
}

std::size_t TestHandler::closes_of(pid_t pid) const {
  const std::lock_guard lock(mutex_);
  std::size_t count = 0;
  for (const SessionRecord& record : closed_) count += record.pid == pid ? 1 : 0;
  return count;
}

bool TestHandler::wait_until(const Condition& done, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return done(opened_, closed_); });
}

}  // namespace uroce::emulator::control::testing
