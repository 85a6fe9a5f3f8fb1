// Plugs the verbs service into the control server: sessions become service sessions, requests become
// verbs, ServiceErrors become error replies with their errno.
//
// A connection may also join another's session instead of opening one: a child made by fork() that uses
// its parent's device context, as a child shares its parent's uverbs file in Linux. The hello that
// opens a session is answered with a token; a hello that presents the session's number and token (and
// comes from the same user) joins it. Requests on a joined connection act on the session's objects; the
// session ends when the last of its connections closes, as a uverbs context when its last file is closed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "emulator/control/handler.hpp"
#include "emulator/daemon/cm_service.hpp"
#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

class ControlAdapter final : public control::Handler {
 public:
  explicit ControlAdapter(VerbsService& service) : service_(service) {}
  // rdma_cm requests ("cm_*") go to `cm` once it is set.
  void set_cm_service(CmService* cm) { cm_ = cm; }
  void on_hello(control::Session& session, const nlohmann::json& request, control::Reply& reply) override;
  void handle(control::Session& session, const nlohmann::json& request, control::Reply& reply) override;
  void on_close(control::Session& session) override;

 private:
  struct Opened {
    std::string token;
    uid_t uid = 0;
    uint32_t connections = 1;  // its own and those that joined it
  };
  void join(control::Session& session, const nlohmann::json& join, control::Reply& reply);
  // The session a connection's requests act on: its own, or the one it joined.
  uint64_t effective(uint64_t connection) const;

  VerbsService& service_;
  CmService* cm_ = nullptr;
  std::map<uint64_t, Opened> opened_;    // sessions, by the connection that opened them
  std::map<uint64_t, uint64_t> joined_;  // connection -> the session it joined
};

}  // namespace uroce::emulator
