// The verbs shim's own objects: each wraps a real <infiniband/verbs.h> struct as its first member, so the
// pointer an application holds (struct ibv_cq *, ...) converts back to ours with a cast. The client
// library (emulator/client) does the talking to uroced; this layer only converts.
#pragma once

#include <infiniband/verbs.h>

#include <arpa/inet.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "emulator/client/logger.hpp"

#include "emulator/client/context.hpp"

// verbs.h turns some entry points into macros that call inline wrappers; the shim defines the real ones.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

// Only what libibverbs exports leaves the library (the version script does the rest).
#define SHIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::shim {

namespace client = emulator::client;

// The shim's log: the program's stderr, at $UROCE_LOG_LEVEL (emulator/client/logger.hpp).
inline spdlog::logger& shim_log() { return client::logger(); }

struct Device {
  ibv_device dev;        // must stay first: applications hold &dev
  uint64_t guid_be = 0;  // node GUID, network order (EUI-64 from the port's MAC)
  std::string socket;    // the uroced serving this device
  int index = 0;         // ibv_get_device_index: the order in which this process first saw it
};

struct Cq;
struct Qp;
struct Srq;

// The port's GID table as the daemon last gave it (gid_table()).
struct GidCache {
  std::mutex lock;
  uint32_t generation = 0;  // of the table below, as the daemon gave it (EngineStatus::gid_generation)
  std::vector<wire::IpAddress> gids;  // an empty entry is the zero address
};

struct Context {
  verbs_context vctx;    // must stay first; ibv_context is its last member
  client::Context* impl; // owned
  Device* device;
  nlohmann::json info;   // uroced's open_device reply: limits, gids, active_mtu, mac, ...
  std::mutex* objects_lock;  // guards the number -> object maps used to resolve events
  std::map<uint32_t, Cq*>* cqs;
  // A multimap: one context can hold several handles on one XRC target (its own and ibv_open_qp's, or
  // two opens). Events name the QP by number, and go to its oldest handle here.
  std::multimap<uint32_t, Qp*>* qps;
  std::map<uint32_t, Srq*>* srqs;
  int owned_cmd_fd = -1;  // ibv_import_device's descriptor, closed with the context
  GidCache* gid_cache;
};

// The port's GID table (an empty entry: the zero address). Read from the daemon again whenever its GID
// generation moved (uroce address add or del), so that a query sees the new table right after the change,
// IBV_EVENT_GID_CHANGE read or not, as ibv_query_gid reads the kernel's table each time.
std::vector<wire::IpAddress> gid_table(const Context& c);

// A thread domain (ibv_alloc_td; parent_domain.cpp).
struct Td {
  ibv_td td;  // must stay first: applications hold &td
  std::atomic<uint32_t> parents{0};  // the parent domains naming it: ibv_dealloc_td is EBUSY until they go
};

struct Pd {
  ibv_pd pd;  // handle = uroced's PD number; a parent domain's is its protection domain's
  // Set only on a parent domain (ibv_alloc_parent_domain; parent_domain.cpp): the protection domain it
  // stands for, and what the application gave with it.
  Pd* protection_domain = nullptr;
  Td* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t) = nullptr;
  void (*free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  void* pd_context = nullptr;
  // On a protection domain, the parent domains over it; on a parent domain, the QPs, SRQs, CQs and work
  // queues made with it. ibv_dealloc_pd is EBUSY while any remain, as with mlx5.
  std::atomic<uint32_t> users{0};
};

// The access bits uroced's transport knows (LOCAL_WRITE .. ZERO_BASED); the rest (relaxed ordering and
// the like) are hints a real NIC may ignore too. IBV_ACCESS_ON_DEMAND is not a transport matter: it
// decides how the daemon reaches the pages (pd_mr.cpp), and stays in Mr::access for rereg.
constexpr unsigned transport_access = 0x3f;

struct Mr {
  ibv_mr mr;  // handle = lkey, the key uroced deregisters by
  unsigned access;  // kept for ibv_rereg_mr without IBV_REREG_MR_CHANGE_ACCESS
};

struct CompChannel {
  ibv_comp_channel channel;
  std::unique_ptr<client::CompletionChannel> impl;
};

struct Cq {
  // ibv_cq_ex begins with ibv_cq's fields, so one object serves both APIs (ibv_cq_ex_to_cq is a cast).
  // cq_ex comes first: value-initialising a Cq zeroes all of it.
  union {
    ibv_cq_ex cq_ex;
    ibv_cq cq;
  };
  std::unique_ptr<client::CompletionQueue> impl;
  std::mutex lock;      // the ring is single-consumer; held from start_poll to end_poll (cq_ex.cpp)
  std::mutex arm_lock;  // ibv_req_notify_cq against ibv_resize_cq swapping the ring
  emulator::protocol::CompletionEntry current{};  // the completion the ibv_cq_ex poll stands on
  Pd* parent = nullptr;  // the parent domain it was made with (IBV_CQ_INIT_ATTR_MASK_PD), held
  // Events handed to the application (under the context's objects_lock): destroy waits for their acks.
  uint32_t comp_events_reported = 0, async_events_reported = 0;
};

struct Srq {
  ibv_srq srq;
  std::unique_ptr<client::SharedReceiveQueue> impl;
  std::mutex lock;
  bool xrc = false;  // an XRC SRQ: its number (ibv_get_srq_num) is what initiators name
  bool tm = false;   // a tag matching SRQ: ibv_post_srq_ops works on it (tag_matching.cpp)
  Pd* parent = nullptr;  // held when made with a parent domain
  uint32_t events_reported = 0;  // async events handed out (under objects_lock): destroy waits for their acks
};

// An XRC domain (ibv_open_xrcd): the ibv_xrcd applications see, then uroced's number for it.
struct Xrcd {
  ibv_xrcd xrcd;
  uint32_t number = 0;
};
inline uint32_t xrcd_number(const ibv_xrcd* x) { return reinterpret_cast<const Xrcd*>(x)->number; }

// The ibv_wr_* batch being built on a QP created with send_ops_flags (qp_ex.cpp).
struct WrBuilder;
struct WrBuilderDeleter {
  void operator()(WrBuilder* b) const;
};

struct Qp {
  // ibv_qp_ex begins with an ibv_qp (qp_base): one object for both; qp_ex first so that it is all zeroed.
  union {
    ibv_qp_ex qp_ex;
    ibv_qp qp;
  };
  std::unique_ptr<client::QueuePair> impl;
  std::mutex send_lock, recv_lock;  // each ring is single-producer; send_lock held from wr_start to wr_complete
  bool sq_sig_all = false;
  std::unique_ptr<WrBuilder, WrBuilderDeleter> wr;  // only on QPs with the ibv_wr_* API
  Pd* parent = nullptr;  // held when made with a parent domain
  uint32_t events_reported = 0;  // async events handed out (under objects_lock): destroy waits for their acks
};

// rdma-core's rule (ibv_get_async_event(3), ibv_get_cq_event(3)): destroying a QP, CQ or SRQ waits until
// every event handed out for it has been acknowledged, so that a thread still handling one (DAPL's async
// thread runs its callback on the QP's endpoint between get and ack) never meets freed memory. `reported` is
// read after the object left the context's tables, so no event can be handed out for it any more.
inline void wait_for_acks(pthread_mutex_t* mutex, pthread_cond_t* cond, const uint32_t* completed, uint32_t reported) {
  pthread_mutex_lock(mutex);
  while (*completed != reported) pthread_cond_wait(cond, mutex);
  pthread_mutex_unlock(mutex);
}

struct Ah {
  ibv_ah ah;  // handle = uroced's AH number
};

inline Context* to_shim(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) - offsetof(verbs_context, context));
}
inline Device* to_shim(ibv_device* d) { return reinterpret_cast<Device*>(d); }
inline Pd* to_shim(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
inline Mr* to_shim(ibv_mr* m) { return reinterpret_cast<Mr*>(m); }
inline Cq* to_shim(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline Cq* to_shim(ibv_cq_ex* c) { return reinterpret_cast<Cq*>(c); }
inline Qp* to_shim(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }
inline Qp* to_shim(ibv_qp_ex* q) { return reinterpret_cast<Qp*>(q); }
inline Srq* to_shim(ibv_srq* s) { return reinterpret_cast<Srq*>(s); }
inline Ah* to_shim(ibv_ah* a) { return reinterpret_cast<Ah*>(a); }
inline CompChannel* to_shim(ibv_comp_channel* c) { return reinterpret_cast<CompChannel*>(c); }
inline Td* to_shim(ibv_td* t) { return reinterpret_cast<Td*>(t); }

// An object made with `pd` holds it if it is a parent domain, so that the parent domain outlives it;
// nullptr (nothing held) for an ordinary PD. The object gives it back with release_parent when destroyed.
inline Pd* hold_parent(ibv_pd* pd) {
  Pd* p = pd ? to_shim(pd) : nullptr;
  if (p == nullptr || p->protection_domain == nullptr) return nullptr;
  ++p->users;
  return p;
}
inline void release_parent(Pd* parent) {
  if (parent) --parent->users;
}

// Runs a control operation; a ControlError (or anything else thrown) becomes its errno value, which is
// returned (0 on success) and also left in errno, as both verbs conventions need one or the other.
template <class F>
int guarded(const char* what, F&& f) {
  try {
    f();
    return 0;
  } catch (const client::ControlError& e) {
    shim_log().debug("verbs shim: {}: {}", what, e.what());
    errno = e.error_number() ? e.error_number() : EIO;
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (const std::exception& e) {
    shim_log().debug("verbs shim: {}: {}", what, e.what());
    errno = EINVAL;
  }
  return errno;
}

// ibv_wc's imm_data from a ring entry: the immediate in network order, an invalidated rkey as it is (the
// ring carries both as plain values).
inline uint32_t wc_imm_field(const emulator::protocol::CompletionEntry& c) {
  return (c.wc_flags & IBV_WC_WITH_IMM) ? htonl(c.imm_data) : c.imm_data;
}

// Nanoseconds on `clock`. The device's clock (completion timestamps, ibv_query_rt_values_ex) is
// CLOCK_MONOTONIC's: uroced's engine keeps its own time on that scale (emulator/engine/engine_clock.hpp).
inline int64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
constexpr uint64_t device_clock_khz = 1000000;  // 1 GHz: one tick per nanosecond

// An ibv_mr for a region uroced registers (ibv_reg_mr and kin, ibv_reg_dm_mr): `register_it` makes the
// request and returns the keys; `access` is what ibv_rereg_mr keeps. nullptr with errno set on failure.
template <class F>
ibv_mr* new_mr(const char* what, ibv_pd* pd, void* addr, size_t length, unsigned access, F&& register_it) {
  auto* m = new (std::nothrow) Mr{};
  if (m == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  client::MemoryRegion r;
  if (guarded(what, [&] { r = register_it(); })) {
    delete m;  // guarded set errno
    return nullptr;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = r.lkey;
  m->mr.lkey = r.lkey;
  m->mr.rkey = r.rkey;
  m->access = access;
  return &m->mr;
}

// A CQ as ibv_create_cq and ibv_create_cq_ex make it (cq.cpp); nullptr with errno set on failure.
Cq* make_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int comp_vector);
// The ibv_wr_* API (qp_ex.cpp): an errno value if a QP of this type cannot do every operation in
// send_ops_flags; enable_wr_api installs ibv_qp_ex's function pointers on a created QP.
int check_send_ops(ibv_qp_type type, uint64_t send_ops_flags);
int enable_wr_api(Qp& q);

// The port's attributes as both ibv_query_port flavours fill them (device.cpp).
void fill_port_attr(Context& c, ibv_port_attr& a);
// uroce's LIDs, an extension. A RoCE port has no LID: real NICs report 0 and refuse a path without a GRH,
// so programs that exchange LIDs and build paths without one (qperf without -cm1, the pingpongs without
// -g) cannot run on RoCE. uroce's port reports the low 16 bits of its IPv4 address as its LID (0 if they
// are not a unicast LID), and a path without a GRH to such a LID goes to that address in the port's own
// /16 (lid_route: false if dlid is no LID). Paths with a GRH are unchanged; LID 0 is still refused.
uint16_t port_lid(const Context& c);
bool lid_route(const Context& c, uint16_t dlid, wire::IpAddress& dgid);
// Assigned into verbs_context / ibv_context.ops by ibv_open_device.
int query_port_ex(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len);
int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
// The send opcodes the transport carries on a QP type, as a set of send_opcode_bit (which is also
// IBV_QP_EX_WITH_<op> up to TSO: verbs.h numbers both alike there; check_send_ops translates ATOMIC WRITE's).
// No TSO anywhere; ATOMIC WRITE on RC alone (IBTA 1.5 A19); UD only sends; UC neither READs, atomics nor
// SEND with invalidate (IBTA 9.7.4, transport/device.cpp); BIND_MW on RC, UC and XRC initiators, as rxe.
constexpr uint64_t send_opcode_bit(unsigned op) { return op < 64 ? uint64_t(1) << op : 0; }
uint64_t send_opcodes_of(ibv_qp_type type);
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// Writes a chain of receive requests into `ring` (each ring is single-producer: under `lock`) and rings the
// context's doorbell once; a QP's, an SRQ's or a work queue's (wq.cpp).
int post_receive_chain(client::RecvRing& ring, std::mutex& lock, ibv_context* context, ibv_recv_wr* wr,
                       ibv_recv_wr** bad_wr);
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
ibv_srq* create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr);
// A basic SRQ (xrcd 0), an XRC SRQ in domain `xrcd` completing to `cq`, or with `tm` a tag matching SRQ
// completing to `cq`; `attr` gets what it got (qp.cpp).
ibv_srq* new_srq(ibv_pd* pd, void* srq_context, ibv_srq_attr& attr, uint32_t xrcd, ibv_cq* cq,
                 const client::TagMatchingCap* tm = nullptr);
// Memory windows (memory_windows.cpp): the ibv_context_ops slots, and a BIND_MW request's fields written
// into a ring entry (EINVAL without a window, or with a range but no region).
ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type);
int dealloc_mw(ibv_mw* mw);
int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* mw_bind);
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge);
ibv_dm* alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr);  // device_memory.cpp
int free_dm(ibv_dm* dm);
ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned int access);
int bind_entry(emulator::protocol::SendEntry& e, const ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info);
// Packet pacing (qp.cpp): ibv_modify_qp_rate_limit's verbs_context slot, and the capabilities.
int modify_qp_rate_limit(ibv_qp* qp, ibv_qp_rate_limit_attr* attr);
void fill_packet_pacing_caps(ibv_packet_pacing_caps& caps);
// XRC (xrc.cpp).
ibv_xrcd* open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr);
ibv_qp* open_qp(ibv_context* context, ibv_qp_open_attr* attr);
int close_xrcd(ibv_xrcd* xrcd);
int get_srq_num(ibv_srq* srq, uint32_t* srq_num);
// Tag matching (tag_matching.cpp): an SRQ of type IBV_SRQT_TM (create_srq_ex checked its mask), the
// device's tm_caps for ibv_query_device_ex, and the verbs_context slot ibv_post_srq_ops calls.
ibv_srq* create_tm_srq(ibv_srq_init_attr_ex& attr);
void fill_tm_caps(const Context& c, ibv_tm_caps& caps);
void install_tag_matching_ops(verbs_context& v);
// Flow steering (flow.cpp): sets the verbs_context slots ibv_create_flow and ibv_destroy_flow call.
void install_flow_ops(verbs_context& v);
// Receive work queues and indirection tables (wq.cpp), likewise.
void install_work_queue_ops(verbs_context& v);
// Thread domains and parent domains (parent_domain.cpp), likewise.
void install_domain_ops(verbs_context& v);
// ibv_dealloc_pd on a parent domain nothing holds: lets go of its protection domain and thread domain.
void free_parent_domain(Pd* parent);

}  // namespace uroce::shim
