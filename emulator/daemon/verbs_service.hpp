// The verbs, served to clients over the control socket: every request a verbs call makes that is not on
// the data path (open the device, create/modify/query/destroy PDs, MRs, memory windows, CQs, SRQs, AHs,
// QPs, completion channels). It owns what each client created: a client names only its own objects, and
// when it goes away everything it held is freed (docs/daemon.md, docs/control-protocol.md).
//
// Runs on the control thread; every touch of the transport goes through EngineAccess.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/daemon/engine_access.hpp"
#include "emulator/daemon/process_memory.hpp"
#include "emulator/protocol/shared_region.hpp"
#include "transport/cm/service_level.hpp"
#include "transport/device.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator {

// A request that failed: the errno the verbs call returns, and a human-readable reason.
struct ServiceError : std::runtime_error {
  ServiceError(int e, const std::string& what) : std::runtime_error(what), error(e) {}
  int error;
};

// What the port looks like to applications (ibv_query_device / ibv_query_port / ibv_query_gid).
struct PortDescription {
  std::string device_name = "uroce0";
  // ibv_device.dev_name, the node under /dev/infiniband that libraries such as UCX look for
  // (daemon/device_node.hpp); a kernel device's is uverbsN.
  std::string dev_name() const { return "uverbs-" + device_name; }
  std::string port_name;           // the DPDK devargs or "loopback"
  wire::MacAddress mac;
  std::vector<wire::IpAddress> gids;
  verbs::Mtu active_mtu = verbs::Mtu::mtu_1024;
  uint32_t ip_mtu = 1500;
  bool link_up = true;
  // The live link state, when set (ibv_query_port reports it): a memif's link comes up only when its peer
  // connects, after start-up, so link_up alone would say "down" for ever (and perftest refuses the port).
  std::function<bool()> link_state;
  // On a VLAN (uroced --egress-qos-map): the priority -> PCP map rdma_cm's SLs come from, as Linux's
  // iboe_tos_to_sl takes them from a VLAN device's egress map. All zero (off a VLAN too): SL 0.
  cm::EgressQosMap egress_qos_map{};
};

// A shared-memory ring of `capacity` entries of `entry_size` bytes, formatted (a queue's, a CQ's).
protocol::SharedRegion make_ring(const std::string& name, uint32_t capacity, uint32_t entry_size);

// Whether process `pid` has CAP_NET_RAW in its effective set (flow_steering.cpp).
bool process_has_net_raw(pid_t pid);

class VerbsService {
 public:
  // `wake_fd`: the engine's eventfd that clients write when they post while it sleeps; `status_fd`: the
  // memfd of its EngineStatus page. Both are duplicated for every client.
  VerbsService(EngineAccess& engine, PortDescription port, transport::DeviceLimits limits, int wake_fd, int status_fd);
  ~VerbsService();

  void open_session(uint64_t session, pid_t pid, uid_t uid);
  // Handles one request; fills `fds` with descriptors to pass back (the caller sends and closes them).
  // `received`: descriptors that came with the request (the caller closes them afterwards; a handler
  // that keeps one duplicates or maps it). `caller`: the process that sent it, when not the one that
  // opened the session (a child that joined its parent's session, ControlAdapter): memory it registers
  // without shared pages is reached in its address space. Throws ServiceError.
  nlohmann::json handle(uint64_t session, const nlohmann::json& request, std::vector<int>& fds,
                        const std::vector<int>& received = {}, pid_t caller = 0);
  // The client is gone: stop touching its memory at once, then destroy everything it held.
  void close_session(uint64_t session);

  size_t session_count() const { return sessions_.size(); }
  // The daemon is stopping: every client gets IBV_EVENT_DEVICE_FATAL on its async event fd, which is how
  // a real device tells applications it is gone.
  void announce_shutdown();
  // The port's link went down or came back (daemon/link_watch.hpp): every open device context gets
  // IBV_EVENT_PORT_ERR or IBV_EVENT_PORT_ACTIVE for port 1, as from a RoCE NIC whose link changed.
  void port_link_changed(bool up);
  // The port's GID table changed (PortAddressService): what open_device and query_device report, and what
  // address vectors are checked against, from now on.
  void set_gids(std::vector<wire::IpAddress> gids, uint32_t generation) {
    port_.gids = std::move(gids);
    gid_generation_ = generation;
  }

 private:
  struct Channel {
    int write_fd = -1;
  };
  // An allocation of device memory (device_memory.cpp): the daemon's memfd, the length asked for, and how
  // many memory regions are registered on it (it cannot be freed while there are).
  struct DeviceMemory {
    protocol::SharedRegion region;
    uint64_t length = 0;
    uint32_t regions = 0;
  };
  // A region registered with IBV_ACCESS_ON_DEMAND, as odp_ranges (ibv_advise_mr) checks it.
  struct OnDemandRegion {
    uint32_t pd = 0;
    uint64_t addr = 0;  // where iova lies in the client's address space
    uint64_t iova = 0;
    uint64_t length = 0;
    uint32_t access = 0;
  };
  struct Session {
    pid_t pid = 0;
    uid_t uid = 0;
    std::shared_ptr<ClientLiveness> liveness = std::make_shared<ClientLiveness>();
    int async_write_fd = -1;
    int async_read_fd = -1;  // kept for contexts that attach (ibv_import_device): each gets a duplicate
    int doorbell_fd = -1;    // the session doorbell page's memfd, likewise (-1: the client rings none)
    std::set<uint32_t> pds, mrs, mws, cqs, srqs, ahs, qps;  // mws: memory windows, by number
    std::set<uint32_t> flows;                               // flow steering rules (ibv_create_flow)
    std::set<uint32_t> wqs, ind_tables;                     // receive work queues, indirection tables
    std::map<uint32_t, Channel> channels;
    std::map<uint32_t, uint32_t> cq_channel;  // CQ -> the completion channel it signals
    std::map<uint32_t, uint32_t> xrcds;       // XRC domain -> how many times this session opened it
    std::map<uint32_t, uint32_t> xrc_qp_handles;  // XRC target QP -> handles held (create_qp, open_qp)
    std::map<uint32_t, OnDemandRegion> on_demand;  // the ODP regions among mrs, by key
    std::map<uint32_t, DeviceMemory> dms;          // device memory, by number
    std::map<uint32_t, uint32_t> dm_regions;       // the device-memory regions among mrs: key -> dm
    // The processes whose memory its process_vm_* regions reach: the session's own, and children made by
    // fork() that joined it. Held while a region needs them (process_of).
    std::map<pid_t, std::weak_ptr<const ProcessHandle>> processes;
  };
  // An XRC domain, shared by every session that opened it. One opened through a file (ibv_open_xrcd with
  // a descriptor) is found again by the file's identity, as the kernel finds it by inode, so that
  // processes that open the same file share the domain.
  // It lives while a session has it open or a target QP is in it (a target QP may outlive every session
  // that opened the domain: ibv_open_qp). Its SRQs belong to sessions that have it open: the last open
  // cannot close while one is in it (EBUSY).
  struct XrcDomain {
    uint32_t opens = 0;    // over all sessions
    uint32_t targets = 0;  // target QPs in it
    uint32_t srqs = 0;     // XRC SRQs in it
    std::optional<std::pair<dev_t, ino_t>> file;
  };
  using Handler = nlohmann::json (VerbsService::*)(Session&, uint64_t, const nlohmann::json&, std::vector<int>&);

  Session& session(uint64_t id);
  nlohmann::json open_device(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json query_device(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json query_port(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json alloc_pd(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json dealloc_pd(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json reg_mr(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json rereg_mr(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json dereg_mr(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json odp_ranges(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json alloc_dm(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json free_dm(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json reg_dm_mr(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  void release_dm(Session& s, std::map<uint32_t, DeviceMemory>::iterator it);
  // ibv_import_pd, _mr, _dm (import_objects.cpp): what a context attached to the session needs to know of
  // an object the session holds. Nothing changes hands: the object stays the session's.
  nlohmann::json import_pd(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json import_mr(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json import_dm(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  void forget_dm_region(Session& s, uint32_t key);
  nlohmann::json alloc_mw(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json dealloc_mw(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json create_comp_channel(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_comp_channel(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json create_cq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json resize_cq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_cq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json open_xrcd(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json close_xrcd(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  void release_xrcd(Session& s, uint32_t xrcd);  // one close: the domain goes with its last user (EBUSY)
  void free_xrcd_if_unused(uint32_t xrcd);
  void forget_xrc_srq(uint32_t srqn);
  nlohmann::json open_qp(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  void add_target(Session& s, uint32_t qpn, uint32_t xrcd);
  // Closes `handles` of the session's handles on target QP `qpn`; the QP goes with the last of all.
  void release_target(Session& s, uint32_t qpn, uint32_t handles);
  std::vector<uint64_t> target_holders(uint32_t qpn) const;
  // Tells the engine which sessions hold target QP `qpn` (its events go to all of them); false if none does.
  bool share_target(uint32_t qpn);
  nlohmann::json create_srq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json modify_srq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_srq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json resolve_neighbour(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json create_ah(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_ah(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json create_qp(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json modify_qp(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json query_qp(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_qp(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json attach_mcast(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json detach_mcast(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json stats(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  // Flow steering (flow_steering.cpp), and the capability it and raw packet QPs need (EPERM without).
  nlohmann::json create_flow(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_flow(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  void require_net_raw(Session& s, const char* what);
  // Receive work queues, indirection tables and RSS QPs (work_queues.cpp).
  nlohmann::json create_wq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json modify_wq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_wq(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json create_rwq_ind_table(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_rwq_ind_table(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);
  // An RSS QP's part of a create_qp request: its PD, table and hash, checked against the session.
  void rss_request(Session& s, const nlohmann::json& r, transport::QpInitAttr& init);
  // Tag matching SRQs (tag_matching.cpp): a create_srq request's "tm" part (none: not a TM SRQ), its CQ
  // the session's, and the list operations of ibv_post_srq_ops.
  struct TmSrqRequest {
    uint32_t cq = 0, max_num_tags = 0, max_ops = 0;
  };
  static std::optional<TmSrqRequest> tm_srq_request(Session& s, const nlohmann::json& r);
  nlohmann::json post_srq_ops(Session& s, uint64_t id, const nlohmann::json& r, std::vector<int>& fds);

  std::shared_ptr<transport::MemoryBackend> memory_for(Session& s, const nlohmann::json& r, uint64_t addr,
                                                       uint64_t length);
  static std::shared_ptr<const ProcessHandle> process_of(Session& s, pid_t pid);
  // What reg_mr and rereg_mr ask for, read and checked once: the PD (the session's), where the region lies
  // in the client and its iova, its access (with the transport's on-demand bit when asked) and the memory
  // that backs it (memory_for).
  struct RegionRequest {
    uint32_t pd = 0;
    uint64_t addr = 0, iova = 0, length = 0;
    uint32_t access = 0;
    bool on_demand = false;
    std::shared_ptr<transport::MemoryBackend> memory;
  };
  RegionRequest region_request(Session& s, const nlohmann::json& r);
  // On-demand regions (on_demand_regions.cpp): whether request r asks for one; the range rule a region
  // must meet; after reg_mr or rereg_mr gave `key`, the session's record of them.
  static bool wants_on_demand(const nlohmann::json& r);
  static void check_region_range(bool on_demand, uint64_t addr, uint64_t length, uint64_t iova);
  static void note_on_demand(Session& s, uint32_t key, const RegionRequest& region);
  // Runs fn on the engine; a non-zero errno from it becomes a ServiceError with `what`.
  void engine_call(const std::string& what, const std::function<int(EngineContext&)>& fn);
  void destroy_everything(Session& s);
  // Destroys QP `qpn` on the engine and detaches its rings (a ServiceError if the device refuses).
  void destroy_qp_now(uint32_t qpn);
  // Attaches or detaches (`change`) the session's QP `qp_num` to/from group `gid`.
  void membership(Session& s, const nlohmann::json& r, const std::string& what,
                  int (transport::Device::*change)(uint32_t, const wire::IpAddress&));

  // The device's memory (ibv_alloc_dm), shared by every client as a NIC's on-chip memory is: 256 KiB, a
  // ConnectX-5's MEMIC. ibv_query_device_ex reports it as max_dm_size.
  static constexpr uint64_t device_memory_bytes = 256 * 1024;
  uint64_t device_memory_in_use_ = 0;
  uint32_t next_dm_ = 1;

  EngineAccess& engine_;
  PortDescription port_;
  uint32_t gid_generation_ = 0;  // of port_.gids (PortAddressService)
  transport::DeviceLimits limits_;
  int wake_fd_;
  int status_fd_;
  std::map<uint64_t, Session> sessions_;
  std::map<std::string, Handler> handlers_;
  uint32_t next_channel_ = 1;
  const std::vector<int>* received_ = nullptr;  // the current request's descriptors
  pid_t caller_ = 0;                             // the current request's process (0: the session's)
  std::map<uint32_t, XrcDomain> xrcds_;
  std::map<std::pair<dev_t, ino_t>, uint32_t> xrcd_files_;
  // XRC target QP -> its domain. Any session that opened the domain may open the QP too (ibv_open_qp); it
  // lives until the last handle of any session goes (the sessions' xrc_qp_handles), as the kernel keeps a
  // shared QP.
  std::map<uint32_t, uint32_t> xrc_targets_;
  std::map<uint32_t, uint32_t> xrc_srq_domains_;  // XRC SRQ -> its domain
};

}  // namespace uroce::emulator
