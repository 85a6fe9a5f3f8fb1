// An open uroce device, as an application holds it: the control connection to uroced, the engine's
// doorbell, and the resources created through it. The verbs shim wraps this one-to-one (ibv_context,
// ibv_pd, ibv_mr, ibv_cq, ibv_qp, ...); other C++ programs (the daemon's tests, the throughput tool) use
// it directly.
//
// Control operations throw ControlError (errno + message); data-path operations (post, poll) are on the
// objects' rings and return errno values, touching only shared memory.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/client/control_connection.hpp"
#include "transport/flow/flow_rule.hpp"
#include "emulator/client/queues.hpp"
#include "transport/device.hpp"
#include "transport/verbs/work.hpp"

namespace uroce::emulator::client {

struct MemoryRegion {
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

// An allocation of device memory: its number, the length asked for, and the daemon's pages, mapped.
struct DeviceMemory {
  uint32_t dm = 0;
  uint64_t length = 0;
  protocol::SharedRegion pages;
};

// A memory window: its number (what BIND_MW work requests and dealloc_mw name) and its first rkey.
struct MemoryWindow {
  uint32_t mw = 0;
  uint32_t rkey = 0;
};

struct CompletionQueue {
  uint32_t cqn = 0;
  uint32_t cqe = 0;  // capacity, >= what was asked
  CompletionRing ring;
};

struct SharedReceiveQueue {
  uint32_t srqn = 0;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  RecvRing ring;
};

// A tag matching SRQ's sizes (ibv_srq_init_attr_ex's tm_cap): tagged buffers in its list, list operations
// outstanding.
struct TagMatchingCap {
  uint32_t max_num_tags = 0;
  uint32_t max_ops = 0;
};

// What post_srq_ops did: the handles of the operations carried out, in order (ADD's; 0 for DEL and SYNC),
// and, when one was refused, its errno and why; it is operation handles.size(), and those after it were
// not tried.
struct SrqOpsResult {
  std::vector<uint32_t> handles;
  int error = 0;
  std::string reason;
};

// How long create_ah and modify_qp wait for a destination's MAC: Linux's rdma_addr_find_l2_eth_by_grh.
inline constexpr std::chrono::milliseconds neighbour_wait_limit{1000};

struct QueuePair {
  uint32_t qpn = 0;
  verbs::QpType type = verbs::QpType::rc;
  verbs::QpCap cap;  // what the QP got (queues are rounded up to powers of two)
  SendRing send;                 // not mapped for an XRC target, which has no send queue
  std::optional<RecvRing> recv;  // absent with an SRQ, and for XRC QPs
};

struct CompletionChannel {
  uint32_t id = 0;
  int fd = -1;  // readable: CompletionEventRecord; owned by the channel
  ~CompletionChannel();
};

struct QpCreate {
  uint32_t pd = 0, send_cq = 0, recv_cq = 0, srq = 0;
  uint32_t xrcd = 0;  // XRC target: its domain (it has no PD, CQs or SRQ)
  verbs::QpType type = verbs::QpType::rc;
  verbs::QpCap cap;
  bool sq_sig_all = false;
  // An RSS QP (raw packet): its indirection table and Toeplitz hash; it gets no queues.
  uint32_t ind_table = 0;
  uint64_t rx_hash_fields = 0;
  std::vector<uint8_t> rx_hash_key;
};

class Context {
 public:
  // Connects to uroced (socket: $UROCE_SOCKET or the default) and opens its device.
  static std::unique_ptr<Context> open(const std::string& socket_path = ControlConnection::default_socket_path(),
                                       const std::string& client_name = "liburoce_client");
  // ibv_import_device: another context on the objects of the context whose command descriptor (its
  // control socket, ibv_context::cmd_fd) `cmd_fd` is, in this process or one it was passed from. Its async
  // events are the other's (either context may read them), as with contexts sharing a uverbs file.
  // ControlError EPERM: the descriptor is no open uroce context's.
  static std::unique_ptr<Context> import(int cmd_fd, const std::string& client_name = "liburoce_client");
  ~Context();

  const nlohmann::json& device() const { return device_; }  // what open_device said: limits, GIDs, MTU, ...
  const std::string& socket_path() const { return socket_path_; }  // the daemon's control socket
  transport::DeviceLimits limits() const;
  ControlConnection& control() { return *control_; }
  // Call after posting (a batch of) work requests: wakes the engine if it sleeps.
  void ring_doorbell() const { doorbell_.ring(); }
  bool daemon_shutting_down() const { return doorbell_.daemon_shutting_down(); }
  uint32_t gid_generation() const { return doorbell_.gid_generation(); }
  int async_fd() const { return async_fd_; }  // readable: AsyncEventRecord

  uint32_t alloc_pd();
  void dealloc_pd(uint32_t pd);
  // on_demand (IBV_ACCESS_ON_DEMAND): the pages stay where they are, unpinned and unmoved, and the daemon
  // reaches them through the process's page tables at each access (process_vm_*), so it sees whatever
  // is mapped there then, as a NIC with on-demand paging does. addr 0 with length UINT64_MAX is the
  // whole address space (implicit ODP). Otherwise the pages move onto memory shared with the daemon.
  MemoryRegion reg_mr(uint32_t pd, const void* addr, uint64_t length, uint32_t access,
                      std::optional<uint64_t> iova = {}, bool on_demand = false);
  // `translation`: the application asked for a new address range (the keys then change).
  MemoryRegion rereg_mr(uint32_t key, uint32_t pd, const void* addr, uint64_t length, uint32_t access,
                        bool on_demand = false, bool translation = true);
  // ibv_advise_mr's check: each [lkey, addr, length] lies in an on-demand region of `pd` owned by this
  // session, with local write for a write prefetch. The ranges in this process's address space, in order.
  std::vector<std::pair<uint64_t, uint64_t>> odp_ranges(uint32_t pd, bool for_write,
                                                        const std::vector<std::array<uint64_t, 3>>& sges);
  void dereg_mr(uint32_t key);  // EINVAL while memory windows are bound to the region
  // ibv_import_pd, _mr, _dm: the session's object as the daemon describes it (EINVAL: none such). An
  // imported allocation of device memory is mapped here again.
  void import_pd(uint32_t pd);
  struct ImportedRegion {
    uint32_t key = 0, pd = 0, access = 0;
    uint64_t iova = 0, length = 0;
  };
  ImportedRegion import_mr(uint32_t key);
  DeviceMemory import_dm(uint32_t dm);
  // Device memory (ibv_alloc_dm): the daemon's memory, mapped here for ibv_memcpy_to_dm and _from_dm.
  DeviceMemory alloc_dm(uint64_t length, uint32_t log_align_req);
  void free_dm(uint32_t dm);  // EBUSY while memory regions are registered on it
  // A zero-based region on [offset, offset+length) of device memory `dm` (access must say ZERO_BASED).
  MemoryRegion reg_dm_mr(uint32_t pd, uint32_t dm, uint64_t offset, uint64_t length, uint32_t access);
  // Memory windows (type 1 or 2, as verbs::MwType); they are bound by BIND_MW work requests.
  MemoryWindow alloc_mw(uint32_t pd, verbs::MwType type);
  void dealloc_mw(uint32_t mw);
  std::unique_ptr<CompletionChannel> create_comp_channel();
  void destroy_comp_channel(CompletionChannel& channel);
  std::unique_ptr<CompletionQueue> create_cq(uint32_t cqe, const CompletionChannel* channel = nullptr);
  // Moves the CQ onto a ring of at least `cqe` entries, with the completions not yet polled; the caller
  // must not poll or arm it meanwhile. On failure the CQ is unchanged.
  void resize_cq(CompletionQueue& cq, uint32_t cqe);
  void destroy_cq(CompletionQueue& cq);
  // XRC domains: `file` (>= 0) shares the domain with every process that opens the same file, as
  // ibv_open_xrcd does; `create` and `exclusive` are its O_CREAT and O_EXCL.
  uint32_t open_xrcd(int file, bool create, bool exclusive);
  void close_xrcd(uint32_t xrcd);
  // xrcd != 0: an XRC SRQ in that domain, completing to `cq`.
  std::unique_ptr<SharedReceiveQueue> create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                                                 uint32_t xrcd = 0, uint32_t cq = 0);
  // A tag matching SRQ (IBV_SRQT_TM): its list operations' completions and its QPs' receives go to `cq`.
  std::unique_ptr<SharedReceiveQueue> create_tm_srq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge,
                                                    uint32_t limit, const TagMatchingCap& tm);
  // ibv_post_srq_ops: the list operations, carried out in order up to the first the device refuses
  // (ControlError only when none could be tried: not this session's SRQ, a malformed request).
  SrqOpsResult post_srq_ops(const SharedReceiveQueue& srq, std::span<const verbs::TagOp> ops);
  void modify_srq(SharedReceiveQueue& srq, uint32_t limit);
  void destroy_srq(SharedReceiveQueue& srq);
  // Receive work queues (ibv_create_wq): a receive ring like an SRQ's (its srqn is the WQ's number), whose
  // receives complete to `cq`. state: ibv_wq_state.
  std::unique_ptr<SharedReceiveQueue> create_wq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge);
  void modify_wq(const SharedReceiveQueue& wq, uint32_t state);
  void destroy_wq(const SharedReceiveQueue& wq);
  uint32_t create_rwq_ind_table(const std::vector<uint32_t>& wqs);
  void destroy_rwq_ind_table(uint32_t table);
  // Both wait first for the destination's MAC, as Linux does (wait_for_neighbour): modify_qp when it gives
  // a connected QP (RC, UC, XRC) an address vector.
  uint32_t create_ah(uint32_t pd, const verbs::AddressVector& av);
  void destroy_ah(uint32_t ah);
  std::unique_ptr<QueuePair> create_qp(const QpCreate& attr);
  // ibv_open_qp: another handle on XRC target `qpn` of domain `xrcd` (one this session opened), whoever
  // created it. It has no rings (a target has none); destroy_qp closes this handle only, and the QP goes
  // with the last handle of any session. EINVAL: no such target in that domain, or not our domain.
  std::unique_ptr<QueuePair> open_qp(uint32_t xrcd, uint32_t qpn);
  void modify_qp(QueuePair& qp, const verbs::QpAttr& attr, uint32_t mask);
  verbs::QpAttr query_qp(const QueuePair& qp);
  void destroy_qp(QueuePair& qp);
  void attach_mcast(const QueuePair& qp, const wire::IpAddress& gid);
  void detach_mcast(const QueuePair& qp, const wire::IpAddress& gid);
  // ibv_create_flow / ibv_destroy_flow on raw packet QP `qp`: the rule's handle.
  uint32_t create_flow(const QueuePair& qp, uint8_t port, const transport::flow::FlowRule& rule);
  void destroy_flow(uint32_t flow);
  nlohmann::json stats();
  // Returns once the port knows the link-layer address `av` leads to (ARP, neighbour discovery), starting
  // the resolution if none runs. Throws ControlError ETIMEDOUT if no answer came in
  // neighbour_wait_limit, EINVAL for a source GID that cannot reach the destination, ENETUNREACH when no
  // route leads there: what Linux's ib_resolve_eth_dmac makes ibv_create_ah and ibv_modify_qp fail with.
  void wait_for_neighbour(const verbs::AddressVector& av);

 private:
  // The receive ring a create_srq or create_wq reply describes (its number under `number`), from the
  // descriptor in `fds`; every descriptor in `fds` is closed.
  std::unique_ptr<SharedReceiveQueue> receive_queue_from(const nlohmann::json& reply, const char* number,
                                                         std::vector<int>& fds);
  Context() = default;
  // open_device on the connected control_ ("attach": on the session it imported), and what comes of it.
  void open_device(bool attach);
  MemoryRegion register_memory(nlohmann::json request, const void* addr, uint64_t length, bool on_demand);
  std::unique_ptr<ControlConnection> control_;
  std::string socket_path_;
  nlohmann::json device_;
  Doorbell doorbell_;
  int async_fd_ = -1;
};

}  // namespace uroce::emulator::client
