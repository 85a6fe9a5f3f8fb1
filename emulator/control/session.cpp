#include "emulator/control/session.hpp"

#include <cerrno>
#include <cstring>
#include <exception>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "emulator/control/handler.hpp"
#include "emulator/control/messages.hpp"
#include "emulator/control/protocol.hpp"

namespace uroce::emulator::control {
namespace {

// A peer that stops reading must not make the daemon's memory grow without bound (events keep coming):
// past this many unsent messages it is dropped.
constexpr std::size_t kMaxQueuedMessages = 1024;
// Messages read per readiness wake-up before yielding to other sessions.
constexpr int kReadBurst = 16;

const boost::asio::generic::seq_packet_protocol kProtocol(AF_UNIX, SOCK_SEQPACKET);

}  // namespace

Session::Session(boost::asio::io_context& io, UniqueFd connection, std::uint64_t id, PeerCredentials peer,
                 Handler& handler, ClosedCallback on_closed)
    : socket_(io, kProtocol, connection.release()),
      id_(id),
      peer_(peer),
      handler_(handler),
      on_closed_(std::move(on_closed)) {}

void Session::start() {
  spdlog::info("control: session {} opened (pid {}, uid {}, gid {})", id_, peer_.pid, peer_.uid, peer_.gid);
  try {
    handler_.on_open(*this);
  } catch (const std::exception& e) {
    close(std::string("the handler refused the connection: ") + e.what());
    return;
  }
  if (!closed_) wait_readable();
}

void Session::close(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  // The server's registry may hold the last reference; stay alive until this function returns.
  auto keep_alive = shared_from_this();
  spdlog::info("control: session {} (pid {}) closed: {}", id_, peer_.pid, reason);
  boost::system::error_code ignored;
  socket_.close(ignored);  // also cancels the pending waits: their handlers see closed_ and return
  outgoing_.clear();
  received_fds_.clear();
  try {
    handler_.on_close(*this);
  } catch (const std::exception& e) {
    spdlog::error("control: session {}: on_close threw: {}", id_, e.what());
  }
  if (on_closed_) on_closed_(id_);
}

void Session::drop(const std::string& violation) {
  if (closed_) return;
  spdlog::warn("control: session {} (pid {}) dropped for a protocol violation: {}", id_, peer_.pid, violation);
  close("dropped: " + violation);
}

void Session::wait_readable() {
  socket_.async_wait(boost::asio::socket_base::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& error) {
                       if (self->closed_) return;
                       if (error) {
                         self->close("wait for input failed: " + error.message());
                         return;
                       }
                       self->read_available();
                     });
}

void Session::read_available() {
  // A session condemned for a protocol violation reads nothing more; it ends once its answer is out.
  const auto reading = [this] { return !closed_ && close_after_flush_.empty(); };
  for (int i = 0; i < kReadBurst && reading(); ++i) {
    ReceiveResult received = receive_datagram(socket_.native_handle(), Blocking::dont_wait);
    switch (received.status) {
      case IoStatus::done:
        handle_datagram(std::move(received.datagram));
        break;
      case IoStatus::would_block:
        wait_readable();
        return;
      case IoStatus::peer_closed:
        close("the peer closed the connection");
        return;
      case IoStatus::failed:
        close(std::string("receive failed: ") + std::strerror(received.error));
        return;
    }
  }
  // Burst used up: let other sessions run; the wait completes at once if more is queued.
  if (reading()) wait_readable();
}

void Session::handle_datagram(ReceivedDatagram datagram) {
  // Framing violations: the peer is not a client library speaking the protocol. Its descriptors (those
  // the kernel delivered) are closed when `datagram` goes out of scope.
  if (datagram.control_truncated) {
    refuse(nullptr, E2BIG,
           "too many file descriptors (at most " + std::to_string(kMaxFds) + ") or truncated ancillary data",
           true);
    return;
  }
  if (datagram.text_truncated) {
    refuse(nullptr, EMSGSIZE, "message longer than " + std::to_string(kMaxMessageBytes) + " bytes", true);
    return;
  }

  const nlohmann::json request = nlohmann::json::parse(datagram.text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) {
    refuse(nullptr, EBADMSG, "not a valid UTF-8 JSON text");
    return;
  }
  const CheckedRequest checked = check_request(request);
  if (checked.error) {
    refuse(checked.id, checked.error->error_number, checked.error->text);
    return;
  }
  if (checked.op == "hello") {
    received_fds_ = std::move(datagram.fds);  // a hello may carry descriptors too (the handler's business)
    answer_hello(request, checked.id);
    received_fds_.clear();
    return;
  }
  if (!said_hello_) {
    refuse(checked.id, EPROTO, "the first request must be \"hello\"");
    return;
  }

  received_fds_ = std::move(datagram.fds);
  Reply reply;
  run_handler(checked.op, request, reply);
  received_fds_.clear();  // the ones the handler did not take
  send_reply(checked.id, reply);
}

void Session::answer_hello(const nlohmann::json& request, const nlohmann::json& id) {
  if (said_hello_) {
    refuse(id, EPROTO, "\"hello\" was already done on this connection");
    return;
  }
  const auto client = request.find("client");
  if (client != request.end() && !client->is_string()) {
    refuse(id, EBADMSG, "\"client\" must be a string");
    return;
  }
  Reply reply;
  reply.body = {{"v", kProtocolVersion},
                {"server", "uroced"},
                {"session", id_},
                {"capabilities", nlohmann::json::array()}};
  run_handler("hello", request, reply);
  if (!reply.failed()) {
    said_hello_ = true;
    client_name_ = client != request.end() ? client->get<std::string>() : std::string("unnamed");
    spdlog::info("control: session {} (pid {}) is client '{}'", id_, peer_.pid, client_name_);
  }
  send_reply(id, reply);
}

void Session::run_handler(const std::string& op, const nlohmann::json& request, Reply& reply) {
  try {
    if (op == "hello") {
      handler_.on_hello(*this, request, reply);
    } else {
      handler_.handle(*this, request, reply);
    }
  } catch (const std::exception& e) {
    spdlog::error("control: session {}: handler failed on \"{}\": {}", id_, op, e.what());
    reply.fail(EIO, "internal error in uroced on \"" + op + "\": " + e.what());
  } catch (...) {
    spdlog::error("control: session {}: handler failed on \"{}\" with a non-standard exception", id_, op);
    reply.fail(EIO, "internal error in uroced on \"" + op + "\"");
  }
}

void Session::send_reply(const nlohmann::json& id, Reply& reply) {
  if (closed_) return;  // the handler may have closed the session
  if (reply.failed()) {
    spdlog::debug("control: session {}: request {} failed: {}", id_, id.dump(), reply.error_text());
    enqueue(error_response(id, reply.error_number(), reply.error_text()), {});
    return;
  }
  if (!reply.body.is_object()) {
    spdlog::error("control: session {}: the handler's reply to request {} is not an object", id_, id.dump());
    enqueue(error_response(id, EIO, "internal error in uroced: malformed reply"), {});
    return;
  }
  if (reply.fds().size() > kMaxFds) {
    spdlog::error("control: session {}: the reply to request {} has {} descriptors (at most {})", id_,
                  id.dump(), reply.fds().size(), kMaxFds);
    enqueue(error_response(id, EIO, "internal error in uroced: too many descriptors in the reply"), {});
    return;
  }
  std::string response = encode(success_response(id, std::move(reply.body)));
  if (response.size() > kMaxMessageBytes) {
    spdlog::error("control: session {}: the reply to request {} is longer than {} bytes", id_, id.dump(),
                  kMaxMessageBytes);
    enqueue(error_response(id, EMSGSIZE, "the reply is too long for one message"), {});
    return;
  }
  enqueue_encoded(std::move(response), std::move(reply.fds()));
}

void Session::refuse(const nlohmann::json& id, int error_number, const std::string& text, bool then_close) {
  spdlog::warn("control: session {} (pid {}): refused a message: {}", id_, peer_.pid, text);
  enqueue(error_response(id, error_number, text), {});
  if (then_close && !closed_) {
    close_after_flush_ = text;
    if (outgoing_.empty()) drop(close_after_flush_);
  }
}

void Session::send_event(const nlohmann::json& event, std::vector<UniqueFd> fds) {
  if (!is_event(event)) throw std::invalid_argument("an event is an object with a string \"event\" member");
  if (closed_) return;
  std::string text = encode(event);
  if (text.size() > kMaxMessageBytes || fds.size() > kMaxFds) {
    spdlog::error("control: session {}: event {} dropped: too long or too many descriptors", id_,
                  event["event"].get<std::string>());
    return;
  }
  enqueue_encoded(std::move(text), std::move(fds));
}

void Session::enqueue(const nlohmann::json& message, std::vector<UniqueFd> fds) {
  enqueue_encoded(encode(message), std::move(fds));
}

// Messages are encoded once: a reply's size is checked on the text that is then sent.
void Session::enqueue_encoded(std::string text, std::vector<UniqueFd> fds) {
  if (closed_) return;
  if (outgoing_.size() >= kMaxQueuedMessages) {
    drop("the peer does not read its messages (" + std::to_string(kMaxQueuedMessages) + " unsent)");
    return;
  }
  outgoing_.push_back({std::move(text), std::move(fds)});
  if (!waiting_writable_) flush();
}

void Session::flush() {
  while (!outgoing_.empty() && !closed_) {
    const Outgoing& next = outgoing_.front();
    std::vector<int> raw_fds;
    for (const UniqueFd& fd : next.fds) raw_fds.push_back(fd.get());
    const SendResult sent = send_datagram(socket_.native_handle(), next.text, raw_fds, Blocking::dont_wait);
    if (sent.status == IoStatus::would_block) {
      waiting_writable_ = true;
      socket_.async_wait(boost::asio::socket_base::wait_write,
                         [self = shared_from_this()](const boost::system::error_code& error) {
                           self->waiting_writable_ = false;
                           if (self->closed_) return;
                           if (error) {
                             self->close("wait for room to send failed: " + error.message());
                             return;
                           }
                           self->flush();
                         });
      return;
    }
    if (sent.status != IoStatus::done) {
      close(sent.status == IoStatus::peer_closed ? std::string("the peer closed the connection")
                                                 : std::string("send failed: ") + std::strerror(sent.error));
      return;
    }
    outgoing_.pop_front();  // closes our copies of the descriptors: the peer has its own now
  }
  if (!closed_ && !close_after_flush_.empty()) drop(close_after_flush_);
}

}  // namespace uroce::emulator::control
