// Plugs the verbs service into the control server: sessions become service sessions, requests become
// verbs, ServiceErrors become error replies with their errno.
//
// A connection may also join another's session instead of opening one: a child made by fork() that uses
// its parent's device context, as a child shares its parent's uverbs file in Linux. The hello that
// opens a session is answered with a token; a hello that presents the session's number and token (and
// comes from the same user) joins it. Requests on a joined connection act on the session's objects; the
// session ends when the last of its connections closes, as a uverbs context when its last file is closed.
//
// A connection may also import a session (ibv_import_device): its hello says "import" and carries a
// descriptor of another connection's socket, the client's end. Holding that descriptor is the authority,
// as holding a uverbs file is in Linux, whichever process it was passed to. To know which connection a
// client end belongs to, every client shows its own end with its hello (the hello's first descriptor).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "emulator/control/handler.hpp"
#include "emulator/daemon/cm_service.hpp"
#include "emulator/daemon/port_address_service.hpp"
#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

class ControlAdapter final : public control::Handler {
 public:
  explicit ControlAdapter(VerbsService& service) : service_(service) {}
  // rdma_cm requests ("cm_*") go to `cm` once it is set.
  void set_cm_service(CmService* cm) { cm_ = cm; }
  // The port's addresses ("port_address*": uroce address) to `addresses` once it is set.
  void set_port_addresses(PortAddressService* addresses) { addresses_ = addresses; }
  void on_hello(control::Session& session, const nlohmann::json& request, control::Reply& reply) override;
  void handle(control::Session& session, const nlohmann::json& request, control::Reply& reply) override;
  void on_close(control::Session& session) override;

 private:
  struct Opened {
    std::string token;
    uid_t uid = 0;
    uint32_t connections = 1;  // its own and those that joined it
  };
  using SocketId = std::pair<dev_t, ino_t>;
  void join(control::Session& session, const nlohmann::json& join, control::Reply& reply);
  void import(control::Session& session, control::Reply& reply);
  // The connection becomes one more of session `target`'s.
  void attach_to(control::Session& session, uint64_t target, control::Reply& reply);
  // Notes the client's end of the connection, shown as the hello's first descriptor (if it shows one).
  void remember_client_end(control::Session& session);
  // The session a connection's requests act on: its own, or the one it joined.
  uint64_t effective(uint64_t connection) const;

  VerbsService& service_;
  CmService* cm_ = nullptr;
  PortAddressService* addresses_ = nullptr;
  std::map<uint64_t, Opened> opened_;    // sessions, by the connection that opened them
  std::map<uint64_t, uint64_t> joined_;  // connection -> the session it joined
  std::map<SocketId, uint64_t> client_ends_;   // a client's end of a connection -> that connection
  std::map<uint64_t, SocketId> client_end_of_;  // and back, to forget it when the connection closes
};

}  // namespace uroce::emulator
