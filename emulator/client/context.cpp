#include "emulator/client/context.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "emulator/client/shared_pages.hpp"
#include "emulator/protocol/doorbell.hpp"
#include "emulator/protocol/flow_json.hpp"
#include "emulator/protocol/tag_op_json.hpp"
#include "emulator/protocol/verbs_json.hpp"

namespace uroce::emulator::client {

using nlohmann::json;

namespace {

// Descriptors come back in the order the daemon documents for each op; a reply with fewer is a broken
// daemon, not something to index past.
int take_fd(std::vector<int>& fds, size_t index) {
  if (index >= fds.size()) throw ControlError(EPROTO, "uroced's reply lacks a descriptor it promised");
  return std::exchange(fds[index], -1);
}

void close_rest(std::vector<int>& fds) {
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
}

// An allocation of device memory as alloc_dm and import_dm describe it, its memfd mapped.
DeviceMemory map_device_memory(const json& reply, std::vector<int>& fds) {
  DeviceMemory dm;
  try {
    dm.dm = reply.at("dm").get<uint32_t>();
    dm.length = reply.at("length").get<uint64_t>();
    dm.pages = protocol::SharedRegion::attach(take_fd(fds, 0), reply.at("size").get<size_t>());
  } catch (...) {
    close_rest(fds);
    throw;
  }
  close_rest(fds);
  return dm;
}

}  // namespace

CompletionChannel::~CompletionChannel() {
  if (fd >= 0) close(fd);
}

std::unique_ptr<Context> Context::open(const std::string& socket_path, const std::string& client_name) {
  std::unique_ptr<Context> c(new Context);
  c->control_ = ControlConnection::connect(socket_path, client_name);
  c->socket_path_ = socket_path;
  c->open_device(false);
  return c;
}

std::unique_ptr<Context> Context::import(int cmd_fd, const std::string& client_name) {
  std::unique_ptr<Context> c(new Context);
  c->socket_path_ = ControlConnection::daemon_path_of(cmd_fd);
  c->control_ = ControlConnection::connect(c->socket_path_, client_name, cmd_fd);
  c->open_device(true);
  return c;
}

void Context::open_device(bool attach) {
  std::vector<int> fds;
  // "doorbell": this client bumps a session doorbell word whenever it posts (protocol/doorbell.hpp); a
  // daemon that knows it sends the page as a fourth descriptor, and one that does not scans our rings.
  device_ = control_->call({{"op", "open_device"}, {"doorbell", true}, {"attach", attach}}, &fds);
  try {
    async_fd_ = take_fd(fds, 0);
    const int wake = take_fd(fds, 1);
    const int status = take_fd(fds, 2);
    protocol::SharedRegion status_page = protocol::SharedRegion::attach(status, sizeof(protocol::EngineStatus));
    protocol::SharedRegion session;
    const json names = device_.value("fds", json::array());
    if (std::find(names.begin(), names.end(), "doorbell") != names.end()) {
      session = protocol::SharedRegion::attach(take_fd(fds, 3), sizeof(protocol::SessionDoorbell));
    }
    doorbell_ = Doorbell(std::move(status_page), wake, std::move(session));
  } catch (...) {
    close_rest(fds);
    throw;
  }
  close_rest(fds);
  // The daemon reads and writes registered memory with process_vm_readv/writev. Where Yama restricts
  // ptrace to descendants, that needs our consent (harmless elsewhere).
  const long daemon = device_.value("daemon_pid", 0L);
  if (daemon > 0) prctl(PR_SET_PTRACER, daemon, 0, 0, 0);
}

Context::~Context() {
  if (async_fd_ >= 0) close(async_fd_);
}

transport::DeviceLimits Context::limits() const { return device_.at("limits").get<transport::DeviceLimits>(); }

uint32_t Context::alloc_pd() { return control_->call({{"op", "alloc_pd"}}).at("pd").get<uint32_t>(); }

void Context::dealloc_pd(uint32_t pd) { control_->call({{"op", "dealloc_pd"}, {"pd", pd}}); }

// One registry per process: pages are moved once, whichever context registers them. Never destroyed: its
// destructor would copy every registered page back into private memory at exit, and a fork() up to the
// process's last instant must still find it.
SharedPages& shared_pages() {
  static SharedPages* pages = new SharedPages;
  return *pages;
}

// reg_mr and rereg_mr alike: the region's pages go onto a memfd shared with the daemon when they can
// (sent with the request), else the daemon reaches them with process_vm_*. An on-demand region is never
// moved: moving is pinning, and the point of ODP is that the mapping under the region may change.
MemoryRegion Context::register_memory(nlohmann::json request, const void* addr, uint64_t length, bool on_demand) {
  request["addr"] = reinterpret_cast<uint64_t>(addr);
  request["length"] = length;
  if (on_demand) request["on_demand"] = true;
  const std::optional<SharedSpan> shared = on_demand ? std::nullopt : shared_pages().share(addr, length);
  json reply;
  if (shared) {
    request["shared_offset"] = shared->offset;
    const int fd = shared->fd;
    reply = control_->call(request, std::span<const int>(&fd, 1), nullptr);
  } else {
    reply = control_->call(request);
  }
  return {reply.at("lkey").get<uint32_t>(), reply.at("rkey").get<uint32_t>()};
}

MemoryRegion Context::reg_mr(uint32_t pd, const void* addr, uint64_t length, uint32_t access,
                             std::optional<uint64_t> iova, bool on_demand) {
  json r = {{"op", "reg_mr"}, {"pd", pd}, {"access", access}};
  if (iova) r["iova"] = *iova;
  return register_memory(std::move(r), addr, length, on_demand);
}

MemoryRegion Context::rereg_mr(uint32_t key, uint32_t pd, const void* addr, uint64_t length, uint32_t access,
                               bool on_demand, bool translation) {
  return register_memory(
      {{"op", "rereg_mr"}, {"key", key}, {"pd", pd}, {"access", access}, {"translation", translation}}, addr,
      length, on_demand);
}

std::vector<std::pair<uint64_t, uint64_t>> Context::odp_ranges(uint32_t pd, bool for_write,
                                                               const std::vector<std::array<uint64_t, 3>>& sges) {
  json list = json::array();
  for (const auto& s : sges) list.push_back({s[0], s[1], s[2]});
  const json reply = control_->call({{"op", "odp_ranges"}, {"pd", pd}, {"write", for_write}, {"sges", list}});
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& r : reply.at("ranges")) ranges.emplace_back(r.at(0).get<uint64_t>(), r.at(1).get<uint64_t>());
  return ranges;
}

void Context::dereg_mr(uint32_t key) { control_->call({{"op", "dereg_mr"}, {"key", key}}); }

MemoryWindow Context::alloc_mw(uint32_t pd, verbs::MwType type) {
  const json reply = control_->call({{"op", "alloc_mw"}, {"pd", pd}, {"type", uint32_t(type)}});
  return {reply.at("mw").get<uint32_t>(), reply.at("rkey").get<uint32_t>()};
}

void Context::dealloc_mw(uint32_t mw) { control_->call({{"op", "dealloc_mw"}, {"mw", mw}}); }

DeviceMemory Context::alloc_dm(uint64_t length, uint32_t log_align_req) {
  std::vector<int> fds;
  const json reply =
      control_->call({{"op", "alloc_dm"}, {"length", length}, {"log_align_req", log_align_req}}, &fds);
  return map_device_memory(reply, fds);
}

void Context::free_dm(uint32_t dm) { control_->call({{"op", "free_dm"}, {"dm", dm}}); }

void Context::import_pd(uint32_t pd) { control_->call({{"op", "import_pd"}, {"pd", pd}}); }

Context::ImportedRegion Context::import_mr(uint32_t key) {
  const json r = control_->call({{"op", "import_mr"}, {"key", key}});
  return {r.at("key").get<uint32_t>(), r.at("pd").get<uint32_t>(), r.at("access").get<uint32_t>(),
          r.at("iova").get<uint64_t>(), r.at("length").get<uint64_t>()};
}

DeviceMemory Context::import_dm(uint32_t number) {
  std::vector<int> fds;
  const json reply = control_->call({{"op", "import_dm"}, {"dm", number}}, &fds);
  return map_device_memory(reply, fds);
}

MemoryRegion Context::reg_dm_mr(uint32_t pd, uint32_t dm, uint64_t offset, uint64_t length, uint32_t access) {
  const json reply = control_->call({{"op", "reg_dm_mr"}, {"pd", pd}, {"dm", dm}, {"offset", offset},
                                     {"length", length}, {"access", access}});
  return {reply.at("lkey").get<uint32_t>(), reply.at("rkey").get<uint32_t>()};
}

std::unique_ptr<CompletionChannel> Context::create_comp_channel() {
  std::vector<int> fds;
  const json reply = control_->call({{"op", "create_comp_channel"}}, &fds);
  auto ch = std::make_unique<CompletionChannel>();
  ch->fd = take_fd(fds, 0);
  close_rest(fds);
  ch->id = reply.at("channel").get<uint32_t>();
  return ch;
}

void Context::destroy_comp_channel(CompletionChannel& channel) {
  control_->call({{"op", "destroy_comp_channel"}, {"channel", channel.id}});
}

std::unique_ptr<CompletionQueue> Context::create_cq(uint32_t cqe, const CompletionChannel* channel) {
  std::vector<int> fds;
  json r = {{"op", "create_cq"}, {"cqe", cqe}};
  if (channel != nullptr) r["channel"] = channel->id;
  const json reply = control_->call(r, &fds);
  auto cq = std::make_unique<CompletionQueue>();
  cq->cqn = reply.at("cq").get<uint32_t>();
  cq->cqe = reply.at("cqe").get<uint32_t>();
  cq->ring = CompletionRing(take_fd(fds, 0), reply.at("ring_bytes").get<size_t>(), cq->cqe);
  close_rest(fds);
  return cq;
}

void Context::resize_cq(CompletionQueue& cq, uint32_t cqe) {
  std::vector<int> fds;
  const json reply = control_->call({{"op", "resize_cq"}, {"cq", cq.cqn}, {"cqe", cqe}}, &fds);
  // The daemon has already moved the CQ: from here on only the new ring is written.
  const uint32_t capacity = reply.at("cqe").get<uint32_t>();
  cq.ring = CompletionRing(take_fd(fds, 0), reply.at("ring_bytes").get<size_t>(), capacity);
  cq.cqe = capacity;
  close_rest(fds);
}

void Context::destroy_cq(CompletionQueue& cq) { control_->call({{"op", "destroy_cq"}, {"cq", cq.cqn}}); }

uint32_t Context::open_xrcd(int file, bool create, bool exclusive) {
  json request = {{"op", "open_xrcd"}, {"file", file >= 0}, {"create", create}, {"exclusive", exclusive}};
  const json reply = file >= 0 ? control_->call(request, std::span<const int>(&file, 1), nullptr) : control_->call(request);
  return reply.at("xrcd").get<uint32_t>();
}

void Context::close_xrcd(uint32_t xrcd) { control_->call({{"op", "close_xrcd"}, {"xrcd", xrcd}}); }

namespace {

json srq_request(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit) {
  return {{"op", "create_srq"}, {"pd", pd}, {"max_wr", max_wr}, {"max_sge", max_sge}, {"srq_limit", limit}};
}

}  // namespace

std::unique_ptr<SharedReceiveQueue> Context::create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                                                        uint32_t xrcd, uint32_t cq) {
  std::vector<int> fds;
  json request = srq_request(pd, max_wr, max_sge, limit);
  if (xrcd != 0) {
    request["xrcd"] = xrcd;
    request["cq"] = cq;
  }
  return receive_queue_from(control_->call(request, &fds), "srq", fds);
}

std::unique_ptr<SharedReceiveQueue> Context::create_tm_srq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge,
                                                           uint32_t limit, const TagMatchingCap& tm) {
  std::vector<int> fds;
  json request = srq_request(pd, max_wr, max_sge, limit);
  request["cq"] = cq;
  request["tm"] = {{"max_num_tags", tm.max_num_tags}, {"max_ops", tm.max_ops}};
  return receive_queue_from(control_->call(request, &fds), "srq", fds);
}

SrqOpsResult Context::post_srq_ops(const SharedReceiveQueue& srq, std::span<const verbs::TagOp> ops) {
  json list = json::array();
  for (const verbs::TagOp& op : ops) list.push_back(op);
  const json reply = control_->call({{"op", "post_srq_ops"}, {"srq", srq.srqn}, {"ops", list}});
  SrqOpsResult result;
  result.handles = reply.at("handles").get<std::vector<uint32_t>>();
  const auto failed = reply.find("failed");
  if (failed != reply.end()) {
    result.error = failed->at("errno").get<int>();
    result.reason = failed->value("error", std::string());
  }
  // Every operation carried out, or those before one refused with an errno: anything else is a broken daemon.
  const bool whole = failed == reply.end() && result.handles.size() == ops.size();
  const bool cut = failed != reply.end() && result.error > 0 && result.handles.size() < ops.size();
  if (!whole && !cut) throw ControlError(EPROTO, "uroced's post_srq_ops reply does not match the request");
  return result;
}

std::unique_ptr<SharedReceiveQueue> Context::receive_queue_from(const json& reply, const char* number,
                                                                std::vector<int>& fds) {
  auto q = std::make_unique<SharedReceiveQueue>();
  try {
    q->srqn = reply.at(number).get<uint32_t>();
    q->max_wr = reply.at("max_wr").get<uint32_t>();
    q->max_sge = reply.at("max_sge").get<uint32_t>();
    q->ring = RecvRing(take_fd(fds, 0), reply.at("ring_bytes").get<size_t>(), q->max_wr,
                       reply.at("entry_size").get<uint32_t>(), q->max_sge);
  } catch (...) {
    close_rest(fds);
    throw;
  }
  q->ring.use_doorbell(doorbell_.session_word());
  close_rest(fds);
  return q;
}

void Context::modify_srq(SharedReceiveQueue& srq, uint32_t limit) {
  control_->call({{"op", "modify_srq"}, {"srq", srq.srqn}, {"srq_limit", limit}});
}

void Context::destroy_srq(SharedReceiveQueue& srq) { control_->call({{"op", "destroy_srq"}, {"srq", srq.srqn}}); }

std::unique_ptr<SharedReceiveQueue> Context::create_wq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge) {
  std::vector<int> fds;
  const json reply = control_->call(
      {{"op", "create_wq"}, {"pd", pd}, {"cq", cq}, {"max_wr", max_wr}, {"max_sge", max_sge}}, &fds);
  return receive_queue_from(reply, "wq", fds);
}

void Context::modify_wq(const SharedReceiveQueue& wq, uint32_t state) {
  control_->call({{"op", "modify_wq"}, {"wq", wq.srqn}, {"state", state}});
}

void Context::destroy_wq(const SharedReceiveQueue& wq) { control_->call({{"op", "destroy_wq"}, {"wq", wq.srqn}}); }

uint32_t Context::create_rwq_ind_table(const std::vector<uint32_t>& wqs) {
  return control_->call({{"op", "create_rwq_ind_table"}, {"wqs", wqs}}).at("ind_table").get<uint32_t>();
}

void Context::destroy_rwq_ind_table(uint32_t table) {
  control_->call({{"op", "destroy_rwq_ind_table"}, {"ind_table", table}});
}

// Linux resolves a RoCE destination's MAC before it makes an address handle or gives a connected QP an
// address vector, and waits for it (ib_resolve_eth_dmac -> rdma_addr_find_l2_eth_by_grh: 1000 ms, then
// ETIMEDOUT, the "Failed to modify QP to RTR: Connection timed out" of a peer nobody answers for). Waiting
// here as well means a first burst never waits parked behind ARP with the rest of it dropped (a UD burst
// just after ibv_create_ah lost datagrams that way), and an unreachable peer fails at set-up, not with
// retry-exceeded completions seconds later. The daemon cannot hold a reply back, so the client asks again:
// at once, then after 50 us, doubling to 10 ms (ARP between two uroceds takes well under a millisecond; an
// asleep engine answers within 0.5 ms).
void Context::wait_for_neighbour(const verbs::AddressVector& av) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + neighbour_wait_limit;
  auto pause = std::chrono::microseconds(50);
  while (!control_->call({{"op", "resolve_neighbour"}, {"ah_attr", av}}).at("known").get<bool>()) {
    if (Clock::now() >= deadline) {
      throw ControlError(ETIMEDOUT, "no answer from " + wire::to_string(av.dgid) + " to address resolution");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10'000));
  }
}

uint32_t Context::create_ah(uint32_t pd, const verbs::AddressVector& av) {
  wait_for_neighbour(av);
  return control_->call({{"op", "create_ah"}, {"pd", pd}, {"ah_attr", av}}).at("ah").get<uint32_t>();
}

void Context::destroy_ah(uint32_t ah) { control_->call({{"op", "destroy_ah"}, {"ah", ah}}); }

std::unique_ptr<QueuePair> Context::create_qp(const QpCreate& a) {
  std::vector<int> fds;
  json r = {{"op", "create_qp"}, {"pd", a.pd},       {"send_cq", a.send_cq},       {"recv_cq", a.recv_cq},
            {"srq", a.srq},      {"qp_type", uint32_t(a.type)}, {"sq_sig_all", a.sq_sig_all}, {"cap", a.cap}};
  const bool target = a.type == verbs::QpType::xrc_recv;
  if (target) r["xrcd"] = a.xrcd;
  if (a.ind_table != 0) {
    r["ind_table"] = a.ind_table;
    r["rx_hash_fields"] = a.rx_hash_fields;
    r["rx_hash_key"] = a.rx_hash_key;
  }
  const json reply = control_->call(r, &fds);
  auto qp = std::make_unique<QueuePair>();
  try {
    qp->qpn = reply.at("qp_num").get<uint32_t>();
    qp->type = a.type;
    qp->cap = reply.at("cap").get<verbs::QpCap>();
    if (reply.contains("send_ring_bytes")) {  // not an XRC target's, not an RSS QP's
      qp->send = SendRing(take_fd(fds, 0), reply.at("send_ring_bytes").get<size_t>(), qp->cap.max_send_wr,
                          reply.at("send_entry_size").get<uint32_t>(), qp->cap.max_send_sge, qp->cap.max_inline_data);
      qp->send.use_doorbell(doorbell_.session_word());
    }
    if (reply.contains("recv_ring_bytes")) {
      qp->recv.emplace(take_fd(fds, 1), reply.at("recv_ring_bytes").get<size_t>(), qp->cap.max_recv_wr,
                       reply.at("recv_entry_size").get<uint32_t>(), qp->cap.max_recv_sge);
      qp->recv->use_doorbell(doorbell_.session_word());
    }
  } catch (...) {
    close_rest(fds);
    control_->call({{"op", "destroy_qp"}, {"qp_num", qp->qpn}});
    throw;
  }
  close_rest(fds);
  return qp;
}

std::unique_ptr<QueuePair> Context::open_qp(uint32_t xrcd, uint32_t qpn) {
  const json reply = control_->call({{"op", "open_qp"}, {"xrcd", xrcd}, {"qp_num", qpn}});
  auto qp = std::make_unique<QueuePair>();
  qp->qpn = reply.at("qp_num").get<uint32_t>();
  qp->type = verbs::QpType::xrc_recv;
  return qp;
}

void Context::modify_qp(QueuePair& qp, const verbs::QpAttr& attr, uint32_t mask) {
  // Only connected QPs resolve their destination here, as in Linux's _ib_modify_qp; a UD QP takes none.
  if ((mask & verbs::attr_av) && qp.type != verbs::QpType::ud) wait_for_neighbour(attr.ah_attr);
  control_->call({{"op", "modify_qp"}, {"qp_num", qp.qpn}, {"attr", attr}, {"attr_mask", mask}});
}

verbs::QpAttr Context::query_qp(const QueuePair& qp) {
  return control_->call({{"op", "query_qp"}, {"qp_num", qp.qpn}}).at("attr").get<verbs::QpAttr>();
}

void Context::destroy_qp(QueuePair& qp) { control_->call({{"op", "destroy_qp"}, {"qp_num", qp.qpn}}); }

void Context::attach_mcast(const QueuePair& qp, const wire::IpAddress& gid) {
  control_->call({{"op", "attach_mcast"}, {"qp_num", qp.qpn}, {"gid", gid}});
}

void Context::detach_mcast(const QueuePair& qp, const wire::IpAddress& gid) {
  control_->call({{"op", "detach_mcast"}, {"qp_num", qp.qpn}, {"gid", gid}});
}

uint32_t Context::create_flow(const QueuePair& qp, uint8_t port, const transport::flow::FlowRule& rule) {
  return control_->call({{"op", "create_flow"}, {"qp_num", qp.qpn}, {"port", port}, {"attr", rule}})
      .at("flow")
      .get<uint32_t>();
}

void Context::destroy_flow(uint32_t flow) { control_->call({{"op", "destroy_flow"}, {"flow", flow}}); }

json Context::stats() { return control_->call({{"op", "stats"}}); }

}  // namespace uroce::emulator::client
