// Receive work queues, indirection tables and RSS QPs, served (transport/qp/work_queues.cpp has the
// device's side): ibv_create_wq makes a receive ring the client posts to as to an SRQ's, and whose
// receives complete to the work queue's own CQ; ibv_create_rwq_ind_table lists the session's work queues;
// an RSS QP names a table of the session and a Toeplitz key. Like raw packet QPs, RSS QPs need CAP_NET_RAW.
#include <unistd.h>

#include <cerrno>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "emulator/protocol/queue_entries.hpp"

namespace uroce::emulator {

using nlohmann::json;

// {"pd", "cq", "max_wr", "max_sge"} -> the ring, as create_srq answers, with "wq".
json VerbsService::create_wq(Session& s, uint64_t id, const json& r, std::vector<int>& fds) {
  const uint32_t pd = need_u32(r, "pd"), cq = need_u32(r, "cq");
  require_owned(s.pds, pd, "protection domain");
  require_owned(s.cqs, cq, "completion queue");
  const uint32_t max_wr = need_u32(r, "max_wr"), max_sge = need_u32(r, "max_sge");
  if (max_wr == 0 || max_wr > limits_.max_srq_wr || max_sge == 0 || max_sge > limits_.max_sge) {
    throw ServiceError(EINVAL, "work queue size out of range");
  }
  const uint32_t capacity = protocol::round_up_pow2(max_wr);
  const uint32_t entry = protocol::recv_entry_size(max_sge);
  protocol::SharedRegion region = make_ring("uroce-wq", capacity, entry);
  const int client_fd = region.dup_fd();
  uint32_t wqn = 0;
  try {
    engine_call("create_wq", [&](EngineContext& c) {
      if (int e = c.device.create_wq(pd, cq, capacity, max_sge, wqn)) return e;
      c.queues.attach_srq(id, wqn, {std::move(region), max_sge});
      return 0;
    });
  } catch (...) {
    close(client_fd);
    throw;
  }
  s.wqs.insert(wqn);
  fds.push_back(client_fd);
  return {{"wq", wqn},
          {"max_wr", capacity},
          {"max_sge", max_sge},
          {"ring_bytes", protocol::ring_bytes(capacity, entry)},
          {"entry_size", entry}};
}

// {"wq", "state": ibv_wq_state} -> {}.
json VerbsService::modify_wq(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t wqn = need_u32(r, "wq");
  require_owned(s.wqs, wqn, "work queue");
  const uint32_t state = need_u32(r, "state");
  if (state > uint32_t(transport::WqState::error)) throw ServiceError(EINVAL, "no such work queue state");
  engine_call("modify_wq", [&](EngineContext& c) { return c.device.modify_wq(wqn, transport::WqState(state)); });
  return json::object();
}

json VerbsService::destroy_wq(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t wqn = need_u32(r, "wq");
  require_owned(s.wqs, wqn, "work queue");
  engine_call("destroy_wq", [&](EngineContext& c) {
    if (int e = c.device.destroy_wq(wqn)) return e;
    c.queues.detach_srq(wqn);
    return 0;
  });
  s.wqs.erase(wqn);
  return json::object();
}

// {"wqs": [work queue, ...]} (2^n of the session's) -> {"ind_table"}.
json VerbsService::create_rwq_ind_table(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const json& list = r.at("wqs");
  if (!list.is_array()) throw ServiceError(EINVAL, "wqs: an array expected");
  std::vector<uint32_t> wqs;
  for (const json& w : list) {
    if (!w.is_number_unsigned() || w.get<uint64_t>() > UINT32_MAX) throw ServiceError(EINVAL, "not a work queue");
    wqs.push_back(w.get<uint32_t>());
    require_owned(s.wqs, wqs.back(), "work queue");
  }
  uint32_t table = 0;
  engine_call("create_rwq_ind_table", [&](EngineContext& c) { return c.device.create_rwq_ind_table(wqs, table); });
  s.ind_tables.insert(table);
  return {{"ind_table", table}};
}

json VerbsService::destroy_rwq_ind_table(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t table = need_u32(r, "ind_table");
  require_owned(s.ind_tables, table, "indirection table");
  engine_call("destroy_rwq_ind_table", [&](EngineContext& c) { return c.device.destroy_rwq_ind_table(table); });
  s.ind_tables.erase(table);
  return json::object();
}

void VerbsService::rss_request(Session& s, const json& r, transport::QpInitAttr& init) {
  if (init.type != verbs::QpType::raw_packet) throw ServiceError(EINVAL, "only raw packet QPs hash (RSS)");
  init.pd = need_u32(r, "pd");
  require_owned(s.pds, init.pd, "protection domain");
  init.ind_table = need_u32(r, "ind_table");
  require_owned(s.ind_tables, init.ind_table, "indirection table");
  init.rx_hash_fields = need_u64(r, "rx_hash_fields");
  const json& key = r.at("rx_hash_key");
  if (!key.is_array() || key.size() > 256) throw ServiceError(EINVAL, "rx_hash_key: an array of bytes expected");
  for (const json& b : key) {
    if (!b.is_number_unsigned() || b.get<uint64_t>() > 0xff) throw ServiceError(EINVAL, "rx_hash_key: not a byte");
    init.rx_hash_key.push_back(uint8_t(b.get<uint64_t>()));
  }
  init.cap = {};
}

}  // namespace uroce::emulator
