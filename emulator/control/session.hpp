// One client connection of the control server: who the peer is (SO_PEERCRED), reading its requests,
// and a queue of outgoing messages (responses and events) that waits for room when the peer is slow.
//
// All of it runs on the io_context's thread. Reads wait for readiness with Asio and then call recvmsg
// themselves, because Asio has no way to receive SCM_RIGHTS descriptors.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/generic/seq_packet_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "emulator/control/datagram.hpp"
#include "emulator/control/unique_fd.hpp"

namespace uroce::emulator::control {

class Handler;
class Reply;

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  using ClosedCallback = std::function<void(std::uint64_t session_id)>;

  Session(boost::asio::io_context& io, UniqueFd connection, std::uint64_t id, PeerCredentials peer,
          Handler& handler, ClosedCallback on_closed);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::uint64_t id() const { return id_; }
  pid_t pid() const { return peer_.pid; }
  uid_t uid() const { return peer_.uid; }
  gid_t gid() const { return peer_.gid; }
  const PeerCredentials& peer() const { return peer_; }
  // The "client" name the peer gave in its hello (empty before it).
  const std::string& client_name() const { return client_name_; }
  bool said_hello() const { return said_hello_; }
  bool is_open() const { return !closed_; }

  // The descriptors that came with the request being handled (empty outside Handler::handle).
  std::vector<UniqueFd>& received_fds() { return received_fds_; }

  // Queues an unsolicited message, an object with a string "event" member (std::invalid_argument
  // otherwise). Dropped with a log line if it encodes to more than kMaxMessageBytes; ignored once closed.
  void send_event(const nlohmann::json& event, std::vector<UniqueFd> fds = {});

  // Calls Handler::on_open and starts reading. Called once, by the server.
  void start();
  // Ends the session: no more reads or writes, Handler::on_close, removal from the server. Idempotent.
  void close(const std::string& reason);

 private:
  struct Outgoing {
    std::string text;
    std::vector<UniqueFd> fds;
  };

  void wait_readable();
  void read_available();
  void handle_datagram(ReceivedDatagram datagram);
  void answer_hello(const nlohmann::json& request, const nlohmann::json& id);
  void run_handler(const std::string& op, const nlohmann::json& request, Reply& reply);
  void send_reply(const nlohmann::json& id, Reply& reply);
  // Answers with an error; when `then_close`, the session ends once the answer is out (or could not be).
  void refuse(const nlohmann::json& id, int error_number, const std::string& text, bool then_close = false);
  void enqueue(const nlohmann::json& message, std::vector<UniqueFd> fds);
  void enqueue_encoded(std::string text, std::vector<UniqueFd> fds);
  // close() for a peer that broke the protocol: logged as a warning.
  void drop(const std::string& violation);
  void flush();

  boost::asio::generic::seq_packet_protocol::socket socket_;
  const std::uint64_t id_;
  const PeerCredentials peer_;
  Handler& handler_;
  ClosedCallback on_closed_;

  std::string client_name_;
  bool said_hello_ = false;
  bool closed_ = false;
  bool waiting_writable_ = false;
  std::string close_after_flush_;  // non-empty: the violation to drop the session for once the queue is out
  std::vector<UniqueFd> received_fds_;
  std::deque<Outgoing> outgoing_;
};

}  // namespace uroce::emulator::control
