// libFuzzer target: hostile control requests into the verbs service (emulator/daemon/verbs_service.hpp), the
// rdma_cm service (emulator/daemon/cm_service.hpp) and the port's addresses (port_address_service.hpp: the GID
// table changing, with empty entries, under the other two), what any local process may send uroced. The input
// is turned into a sequence of requests from two sessions: an op (every one the services have, or an
// unknown one), then fields named as the handlers name them, each given a value of any JSON type (numbers
// biased towards the handles earlier answers gave, so that requests reach deep into the handlers),
// sometimes with a descriptor attached. Checks: no crash and no undefined behaviour (the sanitizers); every
// failure is a ServiceError with an errno, never another exception (which the control server would turn
// into "internal error"); no descriptor is left open once the sessions close, and none is handed out by a
// failed request.
#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "emulator/daemon/cm_service.hpp"
#include "emulator/daemon/engine_access.hpp"
#include "emulator/daemon/port_address_service.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "emulator/engine/queue_service.hpp"
#include "emulator/protocol/doorbell.hpp"
#include "emulator/protocol/shared_region.hpp"
#include "tests/fuzz/fuzz_input.hpp"
#include "transport/device.hpp"
#include "transport/sim/device_endpoint.hpp"
#include "transport/sim/sim_network.hpp"

using namespace uroce;
using nlohmann::json;

namespace {

const char* const ops[] = {
    "open_device", "query_device", "query_port", "alloc_pd", "dealloc_pd", "reg_mr", "rereg_mr", "dereg_mr",
    "odp_ranges", "alloc_dm", "free_dm", "reg_dm_mr", "import_pd", "import_mr", "import_dm", "alloc_mw",
    "dealloc_mw", "create_comp_channel", "destroy_comp_channel", "create_cq", "resize_cq", "destroy_cq",
    "open_xrcd", "open_qp", "close_xrcd", "create_srq", "modify_srq", "destroy_srq", "post_srq_ops",
    "resolve_neighbour", "create_ah", "destroy_ah", "create_qp", "modify_qp", "query_qp", "destroy_qp", "attach_mcast",
    "detach_mcast", "create_flow", "destroy_flow", "create_wq", "modify_wq", "destroy_wq", "create_rwq_ind_table",
    "destroy_rwq_ind_table", "stats", "no_such_op",
    // rdma_cm's (CmService::handles: every "cm_" op goes there, as the control adapter sends it)
    "cm_create_channel", "cm_destroy_channel", "cm_get_event", "cm_create_id", "cm_destroy_id", "cm_migrate_id",
    "cm_bind", "cm_resolve_addr", "cm_resolve_route", "cm_listen", "cm_set_option", "cm_query", "cm_stats",
    "cm_connect", "cm_accept", "cm_reject", "cm_establish", "cm_notify", "cm_disconnect", "cm_init_qp_attr",
    "cm_join_multicast", "cm_leave_multicast", "cm_route", "cm_no_such_op",
    // the port's addresses (PortAddressService::handles)
    "port_address_add", "port_address_del", "port_addresses"};

// Every field a handler reads, at the top level ...
const char* const fields[] = {
    "access", "addr", "ah", "attr_mask", "channel", "cq", "cqe", "dm", "key", "length", "log_align_req", "max_sge",
    "max_wr", "mw", "offset", "pd", "qp_num", "qp_type", "recv_cq", "send_cq", "shared_offset", "srq", "srq_limit",
    "type", "xrcd", "ah_attr", "attach", "attr", "cap", "create", "doorbell", "exclusive", "file", "gid", "iova",
    "on_demand", "sges", "sq_sig_all", "translation", "write", "qp", "mgid", "comp_vector", "solicited_only",
    "flow", "port", "wq", "wqs", "state", "ind_table", "rx_hash_fields", "rx_hash_key", "tm", "ops",
    "cm_id", "port_space", "dst", "src", "dst_port", "src_port", "timeout_ms", "backlog", "name", "value",
    "private_data", "responder_resources", "initiator_depth", "retry_count", "rnr_retry_count", "mc", "join_flags",
    "address"};
// ... and inside "attr", "ah_attr" and "cap" (emulator/protocol/verbs_json.cpp), a flow rule's "attr"
// and its specs (emulator/protocol/flow_json.cpp), create_srq's "tm" and a list operation of post_srq_ops
// (emulator/protocol/tag_op_json.cpp).
const char* const inner_fields[] = {
    "qp_state", "cur_qp_state", "path_mtu", "qkey", "rq_psn", "sq_psn", "dest_qp_num", "qp_access_flags",
    "pkey_index", "max_rd_atomic", "max_dest_rd_atomic", "min_rnr_timer", "port_num", "timeout", "retry_cnt",
    "rnr_retry", "en_sqd_async_notify", "rate_limit", "max_burst_sz", "dgid", "sgid_index", "flow_label", "hop_limit", "traffic_class", "sl",
    "max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data", "type", "priority", "flags",
    "specs", "dst_mac", "dst_mac_mask", "src_mac", "ether_type", "ether_type_mask", "vlan_tag", "src_ip",
    "dst_ip_mask", "proto", "tos_mask", "next_hdr", "dst_port", "src_port_mask", "max_num_tags", "max_ops",
    "wr_id", "opcode", "unexpected_cnt", "handle", "recv_wr_id", "tag", "mask", "sg_list"};
// Strings the handlers look for (a flow spec's type), beside random ones.
const char* const words[] = {"eth", "ipv4", "ipv6", "tcp", "udp", "drop", "init", "rtr", "rts", "tos", "reuseaddr",
                             "afonly", "ack_timeout"};
// Addresses for rdma_cm's "addr", "dst" and "src": the port's own (10.0.0.1), a neighbour, a wildcard, loopback,
// link-local, multicast, another family, and not an address at all.
const char* const addresses[] = {"10.0.0.1", "10.0.0.2", "0.0.0.0", "::", "127.0.0.1", "::1", "fe80::1",
                                 "224.0.0.251", "ff02::1", "fd00::1", "10.0.0.1/24", ""};
// rdma_cm's port spaces (RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IB) and one it refuses (RDMA_PS_IPOIB).
const uint32_t port_spaces[] = {0x0106, 0x0111, 0x013f, 0x0002};
// The fields of a tag matching SRQ's "tm" and of a post_srq_ops operation.
const char* const tm_fields[] = {"max_num_tags", "max_ops"};
const char* const tag_op_fields[] = {"wr_id", "opcode", "flags", "unexpected_cnt", "handle", "recv_wr_id", "tag",
                                     "mask", "sg_list"};
// What the tag matching requests read (and the CQ a TM SRQ needs), and reg_mr, all given half the time: names
// picked at random from sixty would seldom make a TM SRQ, post_srq_ops would never get past its SRQ, and
// reg_mr would seldom name a mapping.
struct OpFields {
  const char* op;
  std::vector<const char*> fields;
};
const OpFields op_fields[] = {{"create_cq", {"cqe"}},
                              {"reg_mr", {"pd", "addr", "length", "access"}},
                              {"create_srq", {"pd", "max_wr", "max_sge", "cq", "tm"}},
                              {"post_srq_ops", {"srq", "ops"}},
                              {"cm_create_id", {"channel", "port_space", "qp_type"}},
                              {"cm_bind", {"cm_id", "addr", "port"}},
                              {"cm_resolve_addr", {"cm_id", "dst", "src", "src_port", "dst_port", "timeout_ms"}},
                              {"cm_listen", {"cm_id", "backlog", "port"}},
                              {"cm_connect", {"cm_id", "qp_num", "qp_type", "private_data", "responder_resources"}},
                              {"cm_accept", {"cm_id", "qp_num", "private_data", "initiator_depth"}},
                              {"cm_migrate_id", {"cm_id", "channel"}},
                              {"cm_set_option", {"cm_id", "name", "value"}},
                              {"cm_join_multicast", {"cm_id", "addr", "join_flags"}},
                              {"cm_leave_multicast", {"cm_id", "mc"}},
                              {"cm_init_qp_attr", {"cm_id", "state"}},
                              {"cm_get_event", {"channel"}},
                              {"cm_route", {"dst"}},
                              {"port_address_add", {"address"}},
                              {"port_address_del", {"address"}}};
// Of those, the members that name an object and those that are counts or codes: half the time they get a
// handle, or a number below 20, rather than a value of any kind.
bool names_object(const std::string& name) {
  return name == "pd" || name == "cq" || name == "srq" || name == "handle" || name == "channel" || name == "cm_id" ||
         name == "mc";
}
bool is_count(const std::string& name) {
  return name == "cqe" || name == "max_wr" || name == "max_sge" || name == "max_num_tags" || name == "max_ops" ||
         name == "opcode" || name == "flags" || name == "unexpected_cnt" || name == "backlog" ||
         name == "qp_type" || name == "responder_resources" || name == "initiator_depth" || name == "value";
}

// Shared memory of this process that reg_mr may name, made once (LLVMFuzzerInitialize): the daemon maps what it
// can of it itself (emulator/daemon/shared_mappings.hpp) and must refuse the rest. A SysV segment, shared
// anonymous memory, a sealed and an unsealed memfd mapped shared, a SysV segment attached read-only.
std::vector<uint64_t> shared_mappings;
constexpr size_t shared_mapping_size = 1 << 16;

void map_shared_memory() {
  const auto add = [](void* p) {  // (shmat fails with MAP_FAILED's value too)
    if (p != MAP_FAILED) shared_mappings.push_back(reinterpret_cast<uint64_t>(p));
  };
  for (const int flags : {0, SHM_RDONLY}) {
    const int id = shmget(IPC_PRIVATE, shared_mapping_size, IPC_CREAT | 0600);
    if (id < 0) continue;
    add(shmat(id, nullptr, flags));
    shmctl(id, IPC_RMID, nullptr);  // gone when detached: at exit
  }
  add(mmap(nullptr, shared_mapping_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  for (const bool sealed : {true, false}) {
    const int fd = memfd_create("uroce-fuzz-shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) continue;
    if (ftruncate(fd, shared_mapping_size) != 0) {
      close(fd);
      continue;
    }
    if (sealed) fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
    add(mmap(nullptr, shared_mapping_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);  // the mapping keeps it
  }
}

template <size_t N>
constexpr size_t count(const char* const (&)[N]) {
  return N;
}

using fuzz::Reader;

// Numbers the service answered with (object handles, keys), for requests to name.
std::vector<uint64_t> handles = {0, 1};

void note_handles(const json& reply) {
  if (reply.is_object()) {
    for (const auto& [name, value] : reply.items()) {
      if (value.is_number_unsigned() && handles.size() < 256) handles.push_back(value.get<uint64_t>());
      if (name == "handles" && value.is_array()) {  // post_srq_ops' ADD handles, for a DEL to name
        for (const json& h : value) {
          if (h.is_number_unsigned() && handles.size() < 256) handles.push_back(h.get<uint64_t>());
        }
      }
    }
  }
}

json value(Reader& in, int depth);

json object(Reader& in, int depth, bool inner);

// An object of up to five of `names`, each with a value of any kind (or of its shape: shaped).
template <size_t N>
json object_of(Reader& in, int depth, const char* const (&names)[N]);

// The tag matching requests' members, shaped as their handlers read them more often than chance would make
// them: "ops" an array of operation objects, "sg_list" an array of [addr, length, lkey] triples (of any
// values), "tm" an object of max_num_tags and max_ops.
json shaped(Reader& in, int depth, const std::string& name) {
  if (name == "tm") return object_of(in, depth + 1, tm_fields);
  json a = json::array();
  for (unsigned i = in.byte() % 4; i > 0; --i) {
    if (name == "ops") {
      a.push_back(object_of(in, depth + 1, tag_op_fields));
    } else {
      const json lkey = in.byte() % 2 == 0 ? json(handles[in.byte() % handles.size()]) : value(in, depth + 1);
      a.push_back(json::array({value(in, depth + 1), value(in, depth + 1), lkey}));
    }
  }
  return a;
}

json member(Reader& in, int depth, const std::string& name) {
  if ((name == "ops" || name == "sg_list" || name == "tm") && depth < 3 && in.byte() % 2 == 0) {
    return shaped(in, depth, name);
  }
  if (names_object(name) && in.byte() % 2 == 0) return handles[in.byte() % handles.size()];
  if (name == "addr" && !shared_mappings.empty() && in.byte() % 2 == 0) {  // in, near or past the end of one
    return shared_mappings[in.byte() % shared_mappings.size()] + in.word(2) * 2;
  }
  if (is_count(name) && in.byte() % 2 == 0) return in.byte() % 20;
  if ((name == "addr" || name == "dst" || name == "src" || name == "address") && in.byte() % 2 == 0) {
    return addresses[in.byte() % std::size(addresses)];
  }
  if (name == "port_space" && in.byte() % 2 == 0) return port_spaces[in.byte() % std::size(port_spaces)];
  if ((name == "port" || name == "dst_port" || name == "src_port") && in.byte() % 2 == 0) return 7000 + in.byte() % 4;
  if (name == "name" && in.byte() % 2 == 0) return words[6 + in.byte() % 7];
  return value(in, depth + 1);
}

template <size_t N>
json object_of(Reader& in, int depth, const char* const (&names)[N]) {
  json o = json::object();
  for (unsigned i = in.byte() % 6; i > 0; --i) {
    const std::string name = names[in.byte() % N];
    o[name] = member(in, depth, name);
  }
  return o;
}

json object(Reader& in, int depth, bool inner) {
  return inner ? object_of(in, depth, inner_fields) : object_of(in, depth, fields);
}

json value(Reader& in, int depth) {
  switch (in.byte() % 12) {
    case 0:
    case 1:
    case 2: return handles[in.byte() % handles.size()];
    case 3: return in.word(1);
    case 4: return in.word(4);
    case 5: return in.word(8);
    case 6: return -int64_t(in.word(4)) - 1;
    case 7: return in.byte() % 2 == 0;
    case 8:
      if (in.byte() % 2 == 0) return words[in.byte() % count(words)];
      return std::string(in.byte() % 20, char('0' + in.byte() % 75));
    case 9: return depth < 3 ? object(in, depth, true) : json(nullptr);
    case 10: {
      json a = json::array();
      for (unsigned i = in.byte() % 4; i > 0 && depth < 3; --i) a.push_back(value(in, depth + 1));
      return a;
    }
    default: return 1.5 * double(in.word(2));
  }
}

size_t open_descriptors() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

class InlineEngine final : public emulator::EngineAccess {
 public:
  InlineEngine(transport::Device& device, emulator::engine::QueueService& queues) : context_{device, queues, 0} {}
  void run_on_engine(const std::function<void(emulator::EngineContext&)>& fn) override { fn(context_); }

 private:
  emulator::EngineContext context_;
};

// A device on a simulated network behind a verbs service, as the daemon has one behind its control socket.
struct Served {
  Served() {
    node = net.add_node({.addresses = {address}});
    device = std::make_unique<transport::Device>(net.sink(node), transport::DeviceLimits{});
    device->set_gids({address});
    endpoint = std::make_unique<sim::DeviceEndpoint>(*device);
    net.set_endpoint(node, *endpoint);
    queues = std::make_unique<emulator::engine::QueueService>(*device);
    engine = std::make_unique<InlineEngine>(*device, *queues);
    wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    status = emulator::protocol::SharedRegion::create("uroce-fuzz-status", sizeof(emulator::protocol::EngineStatus));
    emulator::PortDescription port;
    port.port_name = "sim";
    port.gids = {address};
    service = std::make_unique<emulator::VerbsService>(*engine, port, transport::DeviceLimits{}, wake_fd, status.fd());
    cm = std::make_unique<emulator::CmService>(*engine, io, port);
    cm->start();  // QP1's handler (the engine runs inline here)
    // As uroced wires it: a change goes to both services (the inline engine keeps nothing of it).
    addresses = std::make_unique<emulator::PortAddressService>(
        *engine, port.gids, emulator::net::Routes(), getuid(),
        [this](const std::vector<wire::IpAddress>& gids, uint32_t generation) {
          service->set_gids(gids, generation);
          cm->set_gids(gids);
        });
  }
  ~Served() {
    cm.reset();       // first: closing its sessions still needs the engine and the device
    service.reset();
    close(wake_fd);
  }

  wire::IpAddress address = wire::IpAddress::from_v4(0x0a000001);
  sim::SimNetwork net{1};
  sim::NodeId node;
  std::unique_ptr<transport::Device> device;
  std::unique_ptr<sim::DeviceEndpoint> endpoint;
  std::unique_ptr<emulator::engine::QueueService> queues;
  std::unique_ptr<InlineEngine> engine;
  int wake_fd = -1;
  emulator::protocol::SharedRegion status;
  std::unique_ptr<emulator::VerbsService> service;
  boost::asio::io_context io;  // the CM's timers: never run (no request waits for one)
  std::unique_ptr<emulator::CmService> cm;
  std::unique_ptr<emulator::PortAddressService> addresses;
};

}  // namespace

// The service logs every session and refusal: millions of lines that would only slow the fuzzer down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  map_shared_memory();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const size_t descriptors_before = open_descriptors();
  {
    Served s;
    handles = {0, 1};
    s.service->open_session(1, getpid(), getuid());
    s.service->open_session(2, getpid(), getuid());
    Reader in(data, size);
    for (int requests = 0; in.more() && requests < 64; ++requests) {
      const uint64_t session = 1 + in.byte() % 2;
      json request = object(in, 0, false);
      request["op"] = ops[in.byte() % count(ops)];
      for (const OpFields& f : op_fields) {
        if (request["op"] == f.op && in.byte() % 2 == 0) {
          for (const char* name : f.fields) request[name] = member(in, 0, name);
        }
      }
      // What a client may attach: a memfd (shared pages, an XRC domain's file), or something else.
      std::vector<int> received;
      switch (in.byte() % 4) {
        case 0: received.push_back(memfd_create("uroce-fuzz", MFD_CLOEXEC)); break;
        case 1: received.push_back(eventfd(0, EFD_CLOEXEC)); break;
        default: break;
      }
      if (!received.empty() && received[0] >= 0 && in.byte() % 2 == 0) {
        if (ftruncate(received[0], 1 << 16) != 0) {
          // An eventfd cannot be sized: it goes as it is.
        }
      }
      // Through text, as the control server hands requests over (a non-negative number parses unsigned).
      const json parsed = json::parse(request.dump());
      std::vector<int> fds;
      try {
        const std::string op = parsed.value("op", std::string());
        if (emulator::CmService::handles(op)) {
          note_handles(s.cm->handle(session, parsed, fds, received));
        } else if (emulator::PortAddressService::handles(op)) {
          // (session 2 as another user, who may only look)
          note_handles(s.addresses->handle(session == 1 ? getuid() : getuid() + 1, parsed));
        } else {
          note_handles(s.service->handle(session, parsed, fds, received));
        }
      } catch (const emulator::ServiceError& e) {
        if (e.error <= 0 || !fds.empty()) __builtin_trap();  // an errno, and no descriptor handed out
      }
      for (int fd : fds) close(fd);
      for (int fd : received) {
        if (fd >= 0) close(fd);
      }
    }
    s.cm->close_session(1);
    s.cm->close_session(2);
    s.service->close_session(1);
    s.service->close_session(2);
  }
  if (open_descriptors() != descriptors_before) __builtin_trap();  // a descriptor leaked
  return 0;
}
