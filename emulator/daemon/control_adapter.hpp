// Plugs the verbs service into the control server: sessions become service sessions, requests become
// verbs, ServiceErrors become error replies with their errno.
#pragma once

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
  VerbsService& service_;
  CmService* cm_ = nullptr;
};

}  // namespace uroce::emulator
