#include "emulator/daemon/verbs_service.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <system_error>

#include <spdlog/spdlog.h>

#include "emulator/protocol/doorbell.hpp"
#include "emulator/protocol/queue_entries.hpp"
#include "emulator/protocol/ring.hpp"
#include "emulator/protocol/shared_region.hpp"
#include "emulator/protocol/verbs_json.hpp"
#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/shared_mappings.hpp"
#include "emulator/daemon/shared_memory.hpp"

namespace uroce::emulator {

using nlohmann::json;
using protocol::RingView;
using protocol::SharedRegion;
using namespace uroce::verbs;

SharedRegion make_ring(const std::string& name, uint32_t capacity, uint32_t entry_size) {
  SharedRegion r = SharedRegion::create(name, protocol::ring_bytes(capacity, entry_size));
  RingView::format(r.data(), capacity, entry_size);
  return r;
}

namespace {

int dup_cloexec(int fd) { return fcntl(fd, F_DUPFD_CLOEXEC, 0); }

// An event pipe: the client reads (blocking, as ibv_get_cq_event / ibv_get_async_event expect unless
// the application makes it non-blocking), the engine writes without ever blocking.
std::pair<int, int> event_pipe() {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw ServiceError(errno, "pipe2 for an event channel failed");
  fcntl(p[1], F_SETFL, fcntl(p[1], F_GETFL) | O_NONBLOCK);
  return {p[0], p[1]};
}

// A completion ring for at least `cqe` entries (a power of two), as create_cq and resize_cq make one, and
// what their replies tell the client about it.
SharedRegion make_cq_ring(uint32_t cqe, uint32_t max_cqe, uint32_t& capacity) {
  if (cqe == 0 || cqe > max_cqe) throw ServiceError(EINVAL, "cqe out of range");
  capacity = protocol::round_up_pow2(cqe);
  return make_ring("uroce-cq", capacity, protocol::completion_entry_size());
}

json cq_ring_reply(uint32_t capacity) {
  return {{"cqe", capacity},
          {"ring_bytes", protocol::ring_bytes(capacity, protocol::completion_entry_size())},
          {"entry_size", protocol::completion_entry_size()}};
}

}  // namespace

VerbsService::VerbsService(EngineAccess& engine, PortDescription port, transport::DeviceLimits limits, int wake_fd,
                           int status_fd)
    : engine_(engine), port_(std::move(port)), limits_(limits), wake_fd_(wake_fd), status_fd_(status_fd) {
  handlers_ = {{"open_device", &VerbsService::open_device},
               {"query_device", &VerbsService::query_device},
               {"query_port", &VerbsService::query_port},
               {"alloc_pd", &VerbsService::alloc_pd},
               {"dealloc_pd", &VerbsService::dealloc_pd},
               {"reg_mr", &VerbsService::reg_mr},
               {"rereg_mr", &VerbsService::rereg_mr},
               {"dereg_mr", &VerbsService::dereg_mr},
               {"odp_ranges", &VerbsService::odp_ranges},
               {"alloc_dm", &VerbsService::alloc_dm},
               {"free_dm", &VerbsService::free_dm},
               {"reg_dm_mr", &VerbsService::reg_dm_mr},
               {"import_pd", &VerbsService::import_pd},
               {"import_mr", &VerbsService::import_mr},
               {"import_dm", &VerbsService::import_dm},
               {"alloc_mw", &VerbsService::alloc_mw},
               {"dealloc_mw", &VerbsService::dealloc_mw},
               {"create_comp_channel", &VerbsService::create_comp_channel},
               {"destroy_comp_channel", &VerbsService::destroy_comp_channel},
               {"create_cq", &VerbsService::create_cq},
               {"resize_cq", &VerbsService::resize_cq},
               {"destroy_cq", &VerbsService::destroy_cq},
               {"open_xrcd", &VerbsService::open_xrcd},
               {"open_qp", &VerbsService::open_qp},
               {"close_xrcd", &VerbsService::close_xrcd},
               {"create_srq", &VerbsService::create_srq},
               {"modify_srq", &VerbsService::modify_srq},
               {"destroy_srq", &VerbsService::destroy_srq},
               {"post_srq_ops", &VerbsService::post_srq_ops},
               {"resolve_neighbour", &VerbsService::resolve_neighbour},
               {"create_ah", &VerbsService::create_ah},
               {"destroy_ah", &VerbsService::destroy_ah},
               {"create_qp", &VerbsService::create_qp},
               {"modify_qp", &VerbsService::modify_qp},
               {"query_qp", &VerbsService::query_qp},
               {"destroy_qp", &VerbsService::destroy_qp},
               {"attach_mcast", &VerbsService::attach_mcast},
               {"detach_mcast", &VerbsService::detach_mcast},
               {"create_flow", &VerbsService::create_flow},
               {"create_wq", &VerbsService::create_wq},
               {"modify_wq", &VerbsService::modify_wq},
               {"destroy_wq", &VerbsService::destroy_wq},
               {"create_rwq_ind_table", &VerbsService::create_rwq_ind_table},
               {"destroy_rwq_ind_table", &VerbsService::destroy_rwq_ind_table},
               {"destroy_flow", &VerbsService::destroy_flow},
               {"stats", &VerbsService::stats}};
}

VerbsService::~VerbsService() {
  while (!sessions_.empty()) close_session(sessions_.begin()->first);
}

void VerbsService::open_session(uint64_t id, pid_t pid, uid_t uid) {
  Session& s = sessions_[id];
  s.pid = pid;
  s.uid = uid;
  spdlog::info("client {} connected (pid {}, uid {})", id, pid, uid);
}

VerbsService::Session& VerbsService::session(uint64_t id) {
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) throw ServiceError(EINVAL, "unknown session");
  return it->second;
}

json VerbsService::handle(uint64_t id, const json& request, std::vector<int>& fds, const std::vector<int>& received,
                          pid_t caller) {
  Session& s = session(id);
  received_ = &received;
  caller_ = caller;
  const auto op = request.find("op");
  if (op == request.end() || !op->is_string()) throw ServiceError(EINVAL, "request without an op");
  const auto h = handlers_.find(op->get<std::string>());
  if (h == handlers_.end()) throw ServiceError(EOPNOTSUPP, "unknown op " + op->get<std::string>());
  try {
    return (this->*(h->second))(s, id, request, fds);
  } catch (const json::exception& e) {
    for (int fd : fds) close(fd);
    fds.clear();
    throw ServiceError(EINVAL, std::string("bad request: ") + e.what());
  } catch (const std::invalid_argument& e) {
    for (int fd : fds) close(fd);
    fds.clear();
    throw ServiceError(EINVAL, std::string("bad request: ") + e.what());
  }
}

void VerbsService::engine_call(const std::string& what, const std::function<int(EngineContext&)>& fn) {
  int rc = 0;
  engine_.run_on_engine([&](EngineContext& c) { rc = fn(c); });
  if (rc != 0) throw ServiceError(rc, what + " failed");
}

json VerbsService::open_device(Session& s, uint64_t id, const json& r, std::vector<int>& fds) {
  const bool doorbell = r.value("doorbell", false);  // checked before anything is set up
  const bool attach = r.value("attach", false);
  if (s.async_write_fd >= 0 && !attach) throw ServiceError(EBUSY, "device already open in this session");
  if (s.async_write_fd < 0 && attach) throw ServiceError(EINVAL, "no device open in this session to attach to");
  if (attach) {
    // Another context on the session's objects (ibv_import_device): the same async event pipe, which
    // either context may read, as contexts that share a uverbs file share its async event file.
    fds.push_back(dup_cloexec(s.async_read_fd));
  } else {
    const auto [rd, wr] = event_pipe();
    s.async_write_fd = wr;
    s.async_read_fd = dup_cloexec(rd);
    // Captured through a plain variable: clang before 16 cannot capture a structured binding.
    const int write_end = wr;
    engine_.run_on_engine([&](EngineContext& c) { c.queues.set_event_pipe(id, write_end); });
    fds.push_back(rd);
  }
  fds.push_back(dup_cloexec(wake_fd_));
  fds.push_back(dup_cloexec(status_fd_));
  json names = {"async_events", "wake", "engine_status"};
  // A client that rings a session doorbell (protocol/doorbell.hpp) gets its page, and the engine then
  // looks at its rings only when it rings; a client that does not ask has its rings scanned every turn.
  // An attached context rings the session's page, if it has one.
  if (doorbell && !attach) {
    SharedRegion page = protocol::make_session_doorbell();
    fds.push_back(page.dup_fd());
    s.doorbell_fd = page.dup_fd();
    engine_.run_on_engine([&](EngineContext& c) { c.queues.attach_doorbell(id, std::move(page)); });
    names.push_back("doorbell");
  } else if (doorbell && s.doorbell_fd >= 0) {
    fds.push_back(dup_cloexec(s.doorbell_fd));
    names.push_back("doorbell");
  }
  json reply = query_device(s, id, {}, fds);
  reply["daemon_pid"] = getpid();
  reply["fds"] = names;
  return reply;
}

json VerbsService::query_device(Session&, uint64_t, const json&, std::vector<int>&) {
  json gids = json::array();
  for (const auto& g : port_.gids) gids.push_back(g);
  return {{"device_name", port_.device_name},
          {"dev_name", port_.dev_name()},
          {"port_name", port_.port_name},
          {"mac", port_.mac},
          {"gids", gids},
          {"gid_generation", gid_generation_},
          {"limits", limits_},
          {"active_mtu", uint32_t(port_.active_mtu)},
          {"ip_mtu", port_.ip_mtu},
          {"link_up", port_.link_state ? port_.link_state() : port_.link_up},
          {"max_dm_size", device_memory_bytes}};
}

json VerbsService::query_port(Session& s, uint64_t id, const json& r, std::vector<int>& fds) {
  return query_device(s, id, r, fds);
}

json VerbsService::alloc_pd(Session& s, uint64_t, const json&, std::vector<int>&) {
  uint32_t pd = 0;
  engine_call("alloc_pd", [&](EngineContext& c) { return c.device.alloc_pd(pd); });
  s.pds.insert(pd);
  return {{"pd", pd}};
}

json VerbsService::dealloc_pd(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t pd = need_u32(r, "pd");
  require_owned(s.pds, pd, "protection domain");
  engine_call("dealloc_pd", [&](EngineContext& c) { return c.device.dealloc_pd(pd); });
  s.pds.erase(pd);
  return json::object();
}

// `pid`, held for its regions: the handle its other regions share, or a new one if it has none or the
// process it held has ended (a new process with the same pid, joined to the session, is not that one).
std::shared_ptr<const ProcessHandle> VerbsService::process_of(Session& s, pid_t pid) {
  std::erase_if(s.processes, [](const auto& p) { return p.second.expired(); });
  if (auto held = s.processes[pid].lock(); held && held->alive()) return held;
  try {
    auto process = std::make_shared<const ProcessHandle>(pid);
    s.processes[pid] = process;
    return process;
  } catch (const std::system_error& e) {
    throw ServiceError(e.code().value(), e.what());
  }
}

// The region's memory: the memfd the client moved its pages onto (sent with the request, "shared_offset"
// says where the region starts in it); else the file under the client's shared mapping of the range when
// the daemon can map it too (SysV shared memory, shared anonymous memory: shared_mappings.hpp); else the
// client's own address range [addr, addr+length), reached with process_vm_readv/writev on its pid (the
// kernel checks the credentials). An on-demand region is always the last: each access goes through the
// client's page tables as they are then.
std::shared_ptr<transport::MemoryBackend> VerbsService::memory_for(Session& s, const json& r, uint64_t addr,
                                                                   uint64_t length) {
  if (wants_on_demand(r) && r.contains("shared_offset")) {
    throw ServiceError(EINVAL, "an on-demand region cannot be shared pages");
  }
  if (!r.contains("shared_offset")) {
    const pid_t pid = caller_ != 0 ? caller_ : s.pid;
    if (!wants_on_demand(r)) {
      if (std::optional<SharedMapping> m = open_shared_mapping(pid, addr, length)) {
        try {
          return std::make_shared<SharedMemory>(m->file.get(), m->offset, length, s.liveness,
                                                m->fixed_size ? SharedMemory::Size::fixed : SharedMemory::Size::sealed);
        } catch (const std::runtime_error& e) {
          spdlog::debug("region at {:#x}: {}; reached with process_vm_*", addr, e.what());
        }
      }
    }
    return std::make_shared<ProcessMemory>(process_of(s, pid), addr, length, s.liveness);
  }
  if (received_ == nullptr || received_->size() != 1) throw ServiceError(EINVAL, "shared region without its memfd");
  try {
    return std::make_shared<SharedMemory>(received_->front(), need_u64(r, "shared_offset"), length, s.liveness);
  } catch (const SharedMemory::MapFailed& e) {
    // Out of mappings (each region takes one: shared_memory.cpp): the region is still in the client's address
    // space, where process_vm_* reaches it, more slowly.
    if (e.error != ENOMEM) throw ServiceError(e.error, e.what());
    static std::once_flag warned;
    std::call_once(warned, [] {
      spdlog::warn("registered regions use half of vm.max_map_count's mappings: further ones are reached with "
                   "process_vm_* (slower); raising vm.max_map_count lifts this");
    });
    return std::make_shared<ProcessMemory>(process_of(s, caller_ != 0 ? caller_ : s.pid), addr, length, s.liveness);
  } catch (const std::runtime_error& e) {
    throw ServiceError(EINVAL, e.what());
  }
}

VerbsService::RegionRequest VerbsService::region_request(Session& s, const json& r) {
  RegionRequest q;
  q.pd = need_u32(r, "pd");
  require_owned(s.pds, q.pd, "protection domain");
  q.addr = need_u64(r, "addr");
  q.length = need_u64(r, "length");
  q.iova = r.value("iova", q.addr);
  q.on_demand = wants_on_demand(r);
  q.access = need_u32(r, "access") | (q.on_demand ? uint32_t(verbs::access_on_demand) : 0u);
  check_region_range(q.on_demand, q.addr, q.length, q.iova);
  q.memory = memory_for(s, r, q.addr, q.length);
  return q;
}

json VerbsService::reg_mr(Session& s, uint64_t id, const json& r, std::vector<int>&) {
  const RegionRequest q = region_request(s, r);
  uint32_t key = 0;
  engine_call("reg_mr", [&](EngineContext& c) {
    if (int e = c.device.reg_mr(q.pd, q.iova, q.length, q.access, q.memory, 0, key)) return e;
    c.queues.attach_mr(id, key);  // so that no other session's BIND_MW can name it
    return 0;
  });
  s.mrs.insert(key);
  note_on_demand(s, key, q);
  return {{"lkey", key}, {"rkey", key}};
}

json VerbsService::rereg_mr(Session& s, uint64_t id, const json& r, std::vector<int>&) {
  const uint32_t key = need_u32(r, "key");
  require_owned(s.mrs, key, "memory region");
  if (s.dm_regions.contains(key)) throw ServiceError(EINVAL, "a device memory region cannot be re-registered");
  const RegionRequest q = region_request(s, r);
  // Whether the application asked for a new translation (IBV_REREG_MR_CHANGE_TRANSLATION); a client that
  // does not say gets new keys, the safe answer.
  const bool translation = r.value("translation", true);
  uint32_t new_key = 0;
  engine_call("rereg_mr", [&](EngineContext& c) {
    if (int e = c.device.rereg_mr(key, q.pd, q.iova, q.length, q.access, q.memory, 0, translation, new_key)) {
      return e;
    }
    c.queues.detach_mr(key);
    c.queues.attach_mr(id, new_key);
    return 0;
  });
  s.mrs.erase(key);
  s.on_demand.erase(key);
  s.mrs.insert(new_key);
  note_on_demand(s, new_key, q);
  return {{"lkey", new_key}, {"rkey", new_key}};
}

json VerbsService::dereg_mr(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t key = need_u32(r, "key");
  require_owned(s.mrs, key, "memory region");
  // EINVAL while memory windows are bound to the region (the transport's rule, as rxe's).
  engine_call("dereg_mr", [&](EngineContext& c) {
    if (int e = c.device.dereg_mr(key)) return e;
    c.queues.detach_mr(key);
    return 0;
  });
  s.mrs.erase(key);
  s.on_demand.erase(key);
  forget_dm_region(s, key);
  return json::object();
}

json VerbsService::create_comp_channel(Session& s, uint64_t, const json&, std::vector<int>& fds) {
  const auto [rd, wr] = event_pipe();
  const uint32_t channel = next_channel_++;
  s.channels[channel].write_fd = wr;
  fds.push_back(rd);
  return {{"channel", channel}};
}

json VerbsService::destroy_comp_channel(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t channel = need_u32(r, "channel");
  const auto it = s.channels.find(channel);
  if (it == s.channels.end()) throw ServiceError(EINVAL, "no such completion channel");
  // A CQ still signalling it would write to a closed fd: refuse, as ibv_destroy_comp_channel does (EBUSY).
  for (const auto& [cq, ch] : s.cq_channel) {
    if (ch == channel) throw ServiceError(EBUSY, "completion channel still has CQs");
  }
  close(it->second.write_fd);
  s.channels.erase(it);
  return json::object();
}

json VerbsService::create_cq(Session& s, uint64_t id, const json& r, std::vector<int>& fds) {
  const uint32_t cqe = need_u32(r, "cqe");
  int channel_fd = -1;
  const uint32_t channel = opt_u32(r, "channel", 0);
  if (channel != 0) {
    const auto it = s.channels.find(channel);
    if (it == s.channels.end()) throw ServiceError(EINVAL, "no such completion channel");
    channel_fd = it->second.write_fd;
  }
  uint32_t capacity = 0;
  SharedRegion region = make_cq_ring(cqe, limits_.max_cqe, capacity);
  const int client_fd = region.dup_fd();
  uint32_t cqn = 0;
  try {
    engine_call("create_cq", [&](EngineContext& c) {
      if (int e = c.device.create_cq(capacity, cqn)) return e;
      c.queues.attach_cq(id, cqn, {std::move(region), channel_fd});
      return 0;
    });
  } catch (...) {
    close(client_fd);  // the client's copy of a ring that will never exist
    throw;
  }
  s.cqs.insert(cqn);
  if (channel != 0) s.cq_channel[cqn] = channel;
  fds.push_back(client_fd);
  json reply = cq_ring_reply(capacity);
  reply["cq"] = cqn;
  return reply;
}

// The CQ gets a new ring (a mapping cannot grow in place under the client); the engine moves what the
// client has not polled onto it. The client maps the new ring and drops the old one.
json VerbsService::resize_cq(Session& s, uint64_t, const json& r, std::vector<int>& fds) {
  const uint32_t cqn = need_u32(r, "cq");
  require_owned(s.cqs, cqn, "completion queue");
  uint32_t capacity = 0;
  SharedRegion region = make_cq_ring(need_u32(r, "cqe"), limits_.max_cqe, capacity);
  const int client_fd = region.dup_fd();
  try {
    engine_call("resize_cq", [&](EngineContext& c) {
      // The work the client posted before asking is taken and run first, as a NIC would have run it by
      // now: the resize then counts the completions it made against the new size (rdma-core's
      // test_resize_cq posts sends and at once shrinks the CQ below their completions: EINVAL).
      c.queues.drain_work(c.now);
      c.device.run(c.now);
      return c.queues.resize_cq(cqn, std::move(region));
    });
  } catch (...) {
    close(client_fd);
    throw;
  }
  fds.push_back(client_fd);
  return cq_ring_reply(capacity);
}

json VerbsService::destroy_cq(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t cqn = need_u32(r, "cq");
  require_owned(s.cqs, cqn, "completion queue");
  engine_call("destroy_cq", [&](EngineContext& c) {
    if (int e = c.device.destroy_cq(cqn)) return e;
    c.queues.detach_cq(cqn);
    return 0;
  });
  s.cqs.erase(cqn);
  s.cq_channel.erase(cqn);
  return json::object();
}

json VerbsService::create_srq(Session& s, uint64_t id, const json& r, std::vector<int>& fds) {
  const uint32_t pd = need_u32(r, "pd");
  require_owned(s.pds, pd, "protection domain");
  const uint32_t max_wr = need_u32(r, "max_wr"), max_sge = need_u32(r, "max_sge");
  const uint32_t limit = opt_u32(r, "srq_limit", 0);
  if (max_wr == 0 || max_wr > limits_.max_srq_wr || max_sge == 0 || max_sge > limits_.max_sge) {
    throw ServiceError(EINVAL, "SRQ size out of range");
  }
  // An XRC SRQ (IBV_SRQT_XRC) is in a domain the session opened and completes to a CQ of its own; so does
  // a tag matching one (IBV_SRQT_TM), which has no domain.
  const uint32_t xrcd = opt_u32(r, "xrcd", 0), xrc_cq = opt_u32(r, "cq", 0);
  if (xrcd != 0) {
    require_owned(s.xrcds, xrcd, "XRC domain");
    require_owned(s.cqs, xrc_cq, "completion queue");
  }
  const std::optional<TmSrqRequest> tm = tm_srq_request(s, r);
  if (tm && xrcd != 0) throw ServiceError(EINVAL, "an SRQ is XRC or tag matching, not both");
  const uint32_t capacity = protocol::round_up_pow2(max_wr);
  const uint32_t entry = protocol::recv_entry_size(max_sge);
  SharedRegion region = make_ring("uroce-srq", capacity, entry);
  const int client_fd = region.dup_fd();
  uint32_t srqn = 0;
  try {
    engine_call("create_srq", [&](EngineContext& c) {
      int e = 0;
      if (tm) {
        e = c.device.create_tm_srq(pd, tm->cq, capacity, max_sge, limit, tm->max_num_tags, tm->max_ops, srqn);
      } else if (xrcd != 0) {
        e = c.device.create_xrc_srq(pd, xrcd, xrc_cq, capacity, max_sge, limit, srqn);
      } else {
        e = c.device.create_srq(pd, capacity, max_sge, limit, srqn);
      }
      if (e != 0) return e;
      c.queues.attach_srq(id, srqn, {std::move(region), max_sge});
      return 0;
    });
  } catch (...) {
    close(client_fd);
    throw;
  }
  s.srqs.insert(srqn);
  if (xrcd != 0) {
    xrc_srq_domains_[srqn] = xrcd;
    ++xrcds_.at(xrcd).srqs;
  }
  fds.push_back(client_fd);
  return {{"srq", srqn}, {"max_wr", capacity}, {"max_sge", max_sge}, {"ring_bytes", protocol::ring_bytes(capacity, entry)},
          {"entry_size", entry}};
}

json VerbsService::modify_srq(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t srqn = need_u32(r, "srq");
  require_owned(s.srqs, srqn, "shared receive queue");
  const uint32_t limit = need_u32(r, "srq_limit");
  engine_call("modify_srq", [&](EngineContext& c) { return c.device.modify_srq(srqn, limit); });
  return json::object();
}

json VerbsService::destroy_srq(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t srqn = need_u32(r, "srq");
  require_owned(s.srqs, srqn, "shared receive queue");
  engine_call("destroy_srq", [&](EngineContext& c) {
    if (int e = c.device.destroy_srq(srqn)) return e;
    c.queues.detach_srq(srqn);
    return 0;
  });
  s.srqs.erase(srqn);
  forget_xrc_srq(srqn);
  return json::object();
}

// Linux resolves a RoCE destination's MAC before it makes an address handle or gives a connected QP its
// address vector (ib_resolve_eth_dmac), and waits for it. The client waits the same way, asking this until
// the answer is yes (client::Context::wait_for_neighbour); each ask starts ARP or ND if none runs. What
// rdma_resolve_ip refuses at once is refused here too: a source GID the port lacks or of the other family
// (EINVAL), a destination with no route (ENETUNREACH).
json VerbsService::resolve_neighbour(Session&, uint64_t, const json& r, std::vector<int>&) {
  const AddressVector av = r.at("ah_attr").get<AddressVector>();
  if (av.sgid_index >= port_.gids.size() || port_.gids[av.sgid_index].is_zero() ||
      port_.gids[av.sgid_index].is_v4() != av.dgid.is_v4()) {
    throw ServiceError(EINVAL, "source GID index " + std::to_string(av.sgid_index) + " cannot reach " +
                                   wire::to_string(av.dgid));
  }
  const NeighbourState state = ask_neighbour(engine_, av.dgid);
  if (state == NeighbourState::no_route) throw ServiceError(ENETUNREACH, "no route to " + wire::to_string(av.dgid));
  return {{"known", state == NeighbourState::known}};
}

json VerbsService::create_ah(Session& s, uint64_t id, const json& r, std::vector<int>&) {
  const uint32_t pd = need_u32(r, "pd");
  require_owned(s.pds, pd, "protection domain");
  const AddressVector av = r.at("ah_attr").get<AddressVector>();
  uint32_t ahn = 0;
  engine_call("create_ah", [&](EngineContext& c) {
    if (int e = c.device.create_ah(pd, av, ahn)) return e;
    c.queues.attach_ah(id, ahn);  // so that no other session's UD send can name it
    return 0;
  });
  s.ahs.insert(ahn);
  return {{"ah", ahn}};
}

json VerbsService::destroy_ah(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t ahn = need_u32(r, "ah");
  require_owned(s.ahs, ahn, "address handle");
  engine_call("destroy_ah", [&](EngineContext& c) {
    if (int e = c.device.destroy_ah(ahn)) return e;
    c.queues.detach_ah(ahn);
    return 0;
  });
  s.ahs.erase(ahn);
  return json::object();
}

json VerbsService::create_qp(Session& s, uint64_t id, const json& r, std::vector<int>& fds) {
  transport::QpInitAttr init;
  init.type = QpType(need_u32(r, "qp_type"));
  if (init.type == QpType::raw_packet) require_net_raw(s, "a raw packet QP");
  init.sq_sig_all = r.value("sq_sig_all", false);
  init.cap = r.at("cap").get<QpCap>();
  // XRC: an initiator has a send queue only; a target has neither queue, only its domain. An RSS QP has
  // neither either, only its PD and indirection table (work_queues.cpp).
  const bool target = init.type == QpType::xrc_recv, initiator = init.type == QpType::xrc_send;
  const bool rss = r.contains("ind_table");
  if (rss) {
    rss_request(s, r, init);
  } else if (target) {
    init.xrcd = need_u32(r, "xrcd");
    require_owned(s.xrcds, init.xrcd, "XRC domain");
    init.cap = {};
  } else {
    init.pd = need_u32(r, "pd");
    init.send_cq = need_u32(r, "send_cq");
    require_owned(s.pds, init.pd, "protection domain");
    require_owned(s.cqs, init.send_cq, "completion queue");
  }
  if (!target && !initiator && !rss) {
    init.recv_cq = need_u32(r, "recv_cq");
    init.srq = opt_u32(r, "srq", 0);
    require_owned(s.cqs, init.recv_cq, "completion queue");
    if (init.srq != 0) require_owned(s.srqs, init.srq, "shared receive queue");
  }
  const bool own_recv = !target && !initiator && !rss && init.srq == 0;
  QpCap& cap = init.cap;
  if (cap.max_send_wr > limits_.max_qp_wr || cap.max_recv_wr > limits_.max_qp_wr || cap.max_send_sge > limits_.max_sge ||
      cap.max_recv_sge > limits_.max_sge || cap.max_inline_data > limits_.max_inline_data) {
    throw ServiceError(EINVAL, "QP capabilities beyond the device's");
  }
  // Queues are rings of a power-of-two size; the QP gets what it asked for, rounded up, as a NIC does.
  uint32_t send_entry = 0;
  SharedRegion send;
  if (!target && !rss) {
    cap.max_send_wr = protocol::round_up_pow2(std::max(cap.max_send_wr, 1u));
    cap.max_send_sge = std::max(cap.max_send_sge, 1u);
    // As rxe (rxe_qp_init_req): inline data may use the room of the SGEs a slot holds anyway, so a QP
    // asked for no inline data still takes max_send_sge * 16 bytes inline (rdma_xclient sends 16 bytes
    // inline on a QP created with one SGE and max_inline_data 0).
    cap.max_inline_data = std::min(limits_.max_inline_data,
                                   std::max<uint32_t>(cap.max_inline_data, cap.max_send_sge * sizeof(protocol::WireSge)));
    send_entry = protocol::send_entry_size(cap.max_send_sge, cap.max_inline_data);
    send = make_ring("uroce-sq", cap.max_send_wr, send_entry);
  }
  SharedRegion recv;
  uint32_t recv_entry = 0;
  if (own_recv) {
    cap.max_recv_wr = protocol::round_up_pow2(std::max(cap.max_recv_wr, 1u));
    cap.max_recv_sge = std::max(cap.max_recv_sge, 1u);
    recv_entry = protocol::recv_entry_size(cap.max_recv_sge);
    recv = make_ring("uroce-rq", cap.max_recv_wr, recv_entry);
  } else {
    cap.max_recv_wr = cap.max_recv_sge = 0;
  }
  std::vector<int> client_fds;
  if (!target && !rss) client_fds.push_back(send.dup_fd());
  if (own_recv) client_fds.push_back(recv.dup_fd());
  uint32_t qpn = 0;
  try {
    engine_call("create_qp", [&](EngineContext& c) {
      if (int e = c.device.create_qp(init, qpn)) return e;
      engine::QpQueues q{std::move(send), std::move(recv), cap.max_send_sge, cap.max_inline_data, cap.max_recv_sge,
                         init.send_cq};
      c.queues.attach_qp(id, qpn, std::move(q));
      return 0;
    });
  } catch (...) {
    for (int fd : client_fds) close(fd);
    throw;
  }
  s.qps.insert(qpn);
  if (target) add_target(s, qpn, init.xrcd);
  fds.insert(fds.end(), client_fds.begin(), client_fds.end());
  json reply = {{"qp_num", qpn}, {"cap", cap}};
  if (!target && !rss) {
    reply["send_ring_bytes"] = protocol::ring_bytes(cap.max_send_wr, send_entry);
    reply["send_entry_size"] = send_entry;
  }
  if (own_recv) {
    reply["recv_ring_bytes"] = protocol::ring_bytes(cap.max_recv_wr, recv_entry);
    reply["recv_entry_size"] = recv_entry;
  }
  return reply;
}

json VerbsService::modify_qp(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t qpn = need_u32(r, "qp_num");
  require_owned(s.qps, qpn, "queue pair");
  const QpAttr attr = r.at("attr").get<QpAttr>();
  const uint32_t mask = need_u32(r, "attr_mask");
  engine_call("modify_qp", [&](EngineContext& c) {
    const int rc = c.device.modify_qp(qpn, attr, mask, c.now);
    if (rc == 0 && (mask & verbs::attr_state) && attr.qp_state == verbs::QpState::reset) c.queues.reset_qp(qpn);
    return rc;
  });
  return json::object();
}

json VerbsService::query_qp(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t qpn = need_u32(r, "qp_num");
  require_owned(s.qps, qpn, "queue pair");
  QpAttr attr;
  engine_call("query_qp", [&](EngineContext& c) { return c.device.query_qp(qpn, attr); });
  return {{"attr", attr}};
}

json VerbsService::destroy_qp(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t qpn = need_u32(r, "qp_num");
  require_owned(s.qps, qpn, "queue pair");
  if (s.xrc_qp_handles.contains(qpn)) {  // an XRC target: one handle closes
    release_target(s, qpn, 1);
    return json::object();
  }
  destroy_qp_now(qpn);
  s.qps.erase(qpn);
  return json::object();
}

void VerbsService::destroy_qp_now(uint32_t qpn) {
  engine_call("destroy_qp", [&](EngineContext& c) {
    if (int e = c.device.destroy_qp(qpn)) return e;
    c.queues.detach_qp(qpn);
    return 0;
  });
}

// ibv_attach_mcast / ibv_detach_mcast. The LID is not sent: on an Ethernet port the kernel does not check
// it either (is_valid_mcast_lid). The engine follows the device's set of groups with its multicast filter
// and IGMP membership (Engine::sync_multicast_groups).
json VerbsService::attach_mcast(Session& s, uint64_t, const json& r, std::vector<int>&) {
  membership(s, r, "attach_mcast", &transport::Device::attach_mcast);
  return json::object();
}

json VerbsService::detach_mcast(Session& s, uint64_t, const json& r, std::vector<int>&) {
  membership(s, r, "detach_mcast", &transport::Device::detach_mcast);
  return json::object();
}

void VerbsService::membership(Session& s, const json& r, const std::string& what,
                              int (transport::Device::*change)(uint32_t, const wire::IpAddress&)) {
  const uint32_t qpn = need_u32(r, "qp_num");
  require_owned(s.qps, qpn, "queue pair");
  const auto gid = r.at("gid").get<wire::IpAddress>();
  engine_call(what, [&](EngineContext& c) { return (c.device.*change)(qpn, gid); });
}

json VerbsService::stats(Session&, uint64_t, const json&, std::vector<int>&) {
  json out;
  engine_.run_on_engine([&](EngineContext& c) {
    out["device"] = c.device.counters();
    out["device"]["flow_rules"] = c.device.flow_count();  // a gauge: the rules in force now
    json qps = json::object();
    c.device.for_each_qp_counters([&](uint32_t qpn, const transport::QpCounters& q) {
      const auto naks = [](const std::array<uint64_t, 5>& n) {
        return json{{"psn_sequence_error", n[0]}, {"invalid_request", n[1]}, {"remote_access_error", n[2]},
                    {"remote_operational_error", n[3]}, {"other", n[4]}};
      };
      qps[std::to_string(qpn)] = {{"tx_packets", q.tx_packets},
                                  {"tx_payload_bytes", q.tx_payload_bytes},
                                  {"rx_packets", q.rx_packets},
                                  {"rx_bytes", q.rx_bytes},
                                  {"tx_retransmitted", q.tx_retransmitted},
                                  {"rx_duplicates", q.rx_duplicates},
                                  {"rx_out_of_sequence", q.rx_out_of_sequence},
                                  {"timeouts", q.timeouts},
                                  {"rnr_naks_sent", q.rnr_naks_sent},
                                  {"rnr_naks_received", q.rnr_naks_received},
                                  {"naks_sent", naks(q.naks_sent)},
                                  {"naks_received", naks(q.naks_received)},
                                  {"rx_ecn_ce", q.rx_ecn_ce},
                                  {"cnp_sent", q.cnp_sent},
                                  {"rx_cnp", q.rx_cnp},
                                  {"rate_cuts", q.rate_cuts}};
    });
    out["qp"] = qps;
    const auto& q = c.queues.counters();
    out["queues"] = {{"send_posted", q.send_posted},   {"recv_posted", q.recv_posted},
                     {"malformed_wr", q.malformed_wr}, {"completions", q.completions},
                     {"events_sent", q.events_sent},   {"events_lost", q.events_lost}};
    c.report_counters(out);
  });
  out["sessions"] = sessions_.size();
  return out;
}

void VerbsService::announce_shutdown() {
  const protocol::AsyncEventRecord fatal{uint32_t(EventType::device_fatal), 0};
  for (auto& [id, s] : sessions_) {
    if (s.async_write_fd >= 0) {
      [[maybe_unused]] ssize_t n = write(s.async_write_fd, &fatal, sizeof fatal);
    }
  }
}

void VerbsService::port_link_changed(bool up) {
  const EventType type = up ? EventType::port_active : EventType::port_err;
  engine_.run_on_engine([&](EngineContext& c) { c.queues.broadcast_port_event(type, 1); });
}

// Order matters: QPs first (they reference CQs, SRQs, PDs and, through their work requests, MRs and
// windows; a type 2 window is unbound with the QP that bound it), then SRQs, CQs, AHs, memory windows
// (deallocating one unbinds it: a region with a window bound cannot be deregistered), MRs, PDs — the order
// in which the verbs let an application destroy them.
void VerbsService::destroy_everything(Session& s) {
  // XRC target QPs first, by handle: one that another session holds lives on, and moves to it.
  while (!s.xrc_qp_handles.empty()) {
    const auto [qpn, handles] = *s.xrc_qp_handles.begin();
    try {
      release_target(s, qpn, handles);
    } catch (const ServiceError& e) {
      spdlog::warn("client {}: XRC target QP {:#x} not destroyed: {}", s.pid, qpn, e.what());
      s.xrc_qp_handles.erase(qpn);
      s.qps.erase(qpn);
    }
  }
  const std::set<uint32_t> qps = s.qps, srqs = s.srqs, cqs = s.cqs, ahs = s.ahs, mws = s.mws, mrs = s.mrs,
                           pds = s.pds, flows = s.flows, tables = s.ind_tables, wqs = s.wqs;
  engine_.run_on_engine([&](EngineContext& c) {
    for (uint32_t f : flows) c.device.destroy_flow(f);  // first: a QP with rules cannot go
    for (uint32_t q : qps) {
      c.device.destroy_qp(q);
      c.queues.detach_qp(q);
    }
    for (uint32_t t : tables) c.device.destroy_rwq_ind_table(t);  // after the RSS QPs that use them
    for (uint32_t w : wqs) {
      c.device.destroy_wq(w);
      c.queues.detach_srq(w);
    }
    for (uint32_t q : srqs) {
      c.device.destroy_srq(q);
      c.queues.detach_srq(q);
    }
    for (uint32_t q : cqs) {
      c.device.destroy_cq(q);
      c.queues.detach_cq(q);
    }
    for (uint32_t a : ahs) {
      c.device.destroy_ah(a);
      c.queues.detach_ah(a);
    }
    for (uint32_t w : mws) {
      c.device.dealloc_mw(w);
      c.queues.detach_mw(w);
    }
    for (uint32_t m : mrs) {
      if (int e = c.device.dereg_mr(m)) {
        spdlog::warn("client {}: memory region {:#x} not deregistered (errno {})", s.pid, m, e);
      }
      c.queues.detach_mr(m);
    }
    for (uint32_t p : pds) c.device.dealloc_pd(p);
  });
  for (uint32_t q : srqs) forget_xrc_srq(q);
  // XRC domains last: their SRQs are gone, and target QPs another session holds keep theirs.
  while (!s.xrcds.empty()) {
    try {
      release_xrcd(s, s.xrcds.begin()->first);
    } catch (const ServiceError& e) {
      // Only this session's objects can keep its last open busy, and they are gone; should one remain,
      // the domain is left to the device rather than the cleanup stopping here.
      spdlog::warn("client {}: XRC domain {} not closed: {}", s.pid, s.xrcds.begin()->first, e.what());
      s.xrcds.erase(s.xrcds.begin());
    }
  }
  s.flows.clear();
  s.ind_tables.clear();
  s.wqs.clear();
  s.qps.clear();
  s.srqs.clear();
  s.cqs.clear();
  s.ahs.clear();
  s.mws.clear();
  s.mrs.clear();
  s.pds.clear();
  // Device memory after the regions on it.
  s.dm_regions.clear();
  while (!s.dms.empty()) release_dm(s, s.dms.begin());
}

void VerbsService::close_session(uint64_t id) {
  const auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  s.liveness->alive.store(false, std::memory_order_release);
  const size_t objects =
      s.qps.size() + s.cqs.size() + s.srqs.size() + s.mws.size() + s.mrs.size() + s.pds.size() + s.ahs.size() +
      s.dms.size();
  destroy_everything(s);
  engine_.run_on_engine([&](EngineContext& c) {
    c.queues.set_event_pipe(id, -1);
    c.queues.detach_session(id);
  });
  for (int fd : {s.async_write_fd, s.async_read_fd, s.doorbell_fd}) {
    if (fd >= 0) close(fd);
  }
  for (auto& [n, ch] : s.channels) close(ch.write_fd);
  spdlog::info("client {} (pid {}) gone; {} objects it left were freed", id, s.pid, objects);
  sessions_.erase(it);
}

}  // namespace uroce::emulator
