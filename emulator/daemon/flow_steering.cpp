// ibv_create_flow and ibv_destroy_flow, and who may create raw packet QPs: the requests that give a raw
// packet QP the frames the port receives (transport/flow/flow_table.hpp says how frames are steered).
//
// As in the kernel, both need CAP_NET_RAW in the calling process (ib_uverbs_create_qp for
// IBV_QPT_RAW_PACKET, ib_uverbs_ex_create_flow): such a QP sends any frame on the port, and a rule takes
// frames meant for the port's own stack (ARP, RoCE) or a sniffer sees all of them. uroced reads the
// capability from /proc/PID/status, where the kernel reports the caller's effective set.
#include <cerrno>
#include <fstream>
#include <string>

#include <spdlog/spdlog.h>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "emulator/protocol/flow_json.hpp"

namespace uroce::emulator {

using nlohmann::json;

namespace {

constexpr unsigned cap_net_raw = 13;  // linux/capability.h

}  // namespace

bool process_has_net_raw(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    try {
      return (std::stoull(line.substr(7), nullptr, 16) >> cap_net_raw) & 1;
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;  // gone, or no such line: no capability can be shown
}

void VerbsService::require_net_raw(Session& s, const char* what) {
  const pid_t pid = caller_ != 0 ? caller_ : s.pid;
  if (!process_has_net_raw(pid)) {
    throw ServiceError(EPERM, std::string(what) + " needs CAP_NET_RAW, as on a kernel RDMA device");
  }
}

// {"qp_num", "port", "attr": the rule (flow_json.hpp)} -> {"flow": handle}.
json VerbsService::create_flow(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t qpn = need_u32(r, "qp_num");
  require_owned(s.qps, qpn, "queue pair");
  if (opt_u32(r, "port", 1) != 1) throw ServiceError(EINVAL, "no such port");
  transport::flow::FlowRule rule;
  try {
    rule = r.at("attr").get<transport::flow::FlowRule>();
  } catch (const std::exception& e) {
    throw ServiceError(EINVAL, std::string("bad flow attribute: ") + e.what());
  }
  require_net_raw(s, "a flow steering rule");
  uint32_t handle = 0;
  engine_call("create_flow", [&](EngineContext& c) { return c.device.create_flow(qpn, std::move(rule), handle); });
  s.flows.insert(handle);
  spdlog::debug("client {}: flow rule {} on QP {:#x}: {}", s.pid, handle, qpn, r.at("attr").dump());
  return {{"flow", handle}};
}

json VerbsService::destroy_flow(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t handle = need_u32(r, "flow");
  require_owned(s.flows, handle, "flow");
  engine_call("destroy_flow", [&](EngineContext& c) { return c.device.destroy_flow(handle); });
  s.flows.erase(handle);
  return json::object();
}

}  // namespace uroce::emulator
