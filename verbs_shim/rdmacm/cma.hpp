// uroce's librdmacm: the drop-in for rdma-core 44's librdmacm.so.1. Like the real one it sits on
// libibverbs (uroce's shim, first on the library path under uroce-run) for devices, QPs and CQs, and
// leaves connection management to "the kernel", here the rdma_cm service of each device's uroced, reached
// over a control connection of its own to each (emulator/daemon/cm_service.hpp; messages in
// docs/control-protocol.md). Which device an ID is on: placement.cpp.
//
// The objects an application holds (struct rdma_cm_id, rdma_event_channel, rdma_cm_event) are the first
// members of ours, so a pointer converts back with a cast.
#pragma once

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/client/control_connection.hpp"

#define CMA_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::rdmacm {

// One uroced that rdma_cm reaches: a device of ibv_get_device_list (whose ibv_device.dev_path is the daemon's
// socket), opened once as librdmacm opens every device (ucma_init), and a control connection of rdma_cm's own
// to that daemon, opened on first use. Never destroyed: IDs may live until the program exits.
struct Daemon {
  ibv_context* verbs = nullptr;
  // One call to this daemon's rdma_cm service. Throws ControlError.
  nlohmann::json call(nlohmann::json request, std::vector<int>* fds = nullptr, std::span<const int> send = {});
  // The device's protection domain that every ID on it carries (rdma_cm_id::pd), allocated once, as librdmacm
  // allocates one per device: rdma_create_qp and rdma_create_srq without a PD use it, and so do applications
  // that take the ID's (pyverbs' CMID.pd after rdma_resolve_route). Null, errno set, if it cannot be made.
  ibv_pd* protection_domain();
  // True once the daemon closed rdma_cm's connection (it stopped or died), or an event channel saw it hang up.
  bool gone();
  void hung_up();
  // rdma_cm's connection's socket, for an event channel to watch (-1 before the first call).
  int socket();

  std::mutex lock;
  std::unique_ptr<emulator::client::ControlConnection> connection;
  ibv_pd* pd = nullptr;
  bool hangup = false;
};

// The devices' daemons, in the order ibv_get_device_list gives them (UROCE_SOCKET's); throws
// ControlError(ENODEV) if there is none. An ID starts on the first; rdma_bind_addr and rdma_resolve_addr move it
// to the device that has or reaches the address (placement.cpp).
const std::vector<Daemon*>& daemons();
ibv_context* device_context();  // the first device (an ID not bound to one uses it)
std::vector<ibv_context*> all_device_contexts();

// An event channel's fd (what the application polls, and sets O_NONBLOCK on) is an epoll fd of ours. It watches
// `counter`, a semaphore eventfd on which every daemon with an ID on the channel counts its events, and the
// socket of rdma_cm's connection to each such daemon, for its hang-up: a daemon that stops or dies takes its
// device away, and the channel then gives DEVICE_REMOVAL to the IDs that were on it.
struct Channel {
  rdma_event_channel channel;  // must stay first; .fd is the epoll fd
  int counter = -1;            // the eventfd, non-blocking: the epoll fd blocks
  std::mutex lock;
  // The daemons the channel is registered with, and its handle on each: the first daemon's at once, another's
  // when an ID on that daemon first uses the channel (channel_on).
  std::vector<std::pair<Daemon*, uint32_t>> handles;
  size_t next = 0;  // which of them rdma_get_cm_event asks first, in turn, so that none waits behind another
};
// The channel's handle on `d`, registering it there first if needed. Throws ControlError.
uint32_t channel_on(Channel* c, Daemon& d);

struct Id {
  rdma_cm_id id;               // must stay first
  Daemon* daemon = nullptr;    // the daemon the ID is on
  uint32_t handle = 0;         // its handle there
  // A listener on every device (bound to a wildcard address, or to none): its twins on the other daemons, each
  // with the same channel, port and options. Connection requests come from any of them.
  std::vector<std::pair<Daemon*, uint32_t>> twins;
  std::map<std::string, uint32_t> options;  // rdma_set_option's latest values, given again to a twin or a move
  bool bound = false;          // rdma_bind_addr succeeded (or resolve_addr bound it)
  bool removed = false;        // DEVICE_REMOVAL was delivered: its daemon stopped
  bool sync = false;           // created without a channel: calls wait for their event (rdma_create_ep)
  ibv_sa_path_rec path{};      // route.path_rec points here once the route is resolved
  // What the peer asked for in its REQ (passive IDs): the defaults of rdma_accept without parameters.
  uint8_t peer_responder_resources = 0;
  uint8_t peer_initiator_depth = 0;
  bool created_cqs = false;    // rdma_create_qp made the CQs (rdma_create_ep style): destroy them too
  std::unique_ptr<ibv_qp_init_attr> listen_qp_attr;  // rdma_create_ep on a passive ID: for rdma_get_request
  // Held by a call that asks uroced for something and then fills the ID in from the answer (rdma_resolve_addr:
  // verbs, pd and the addresses; rdma_resolve_route: the path; rdma_listen: the port and the twins), and
  // taken by rdma_get_cm_event before it hands out one of the ID's events. uroced may queue the event before
  // the call has its answer, and another thread can take it at once; librdmacm fills the ID in while it
  // processes the event, so an application may use the ID as soon as it has the event. libiscsi's iSER
  // initiator does, on a thread of its own: ibv_alloc_pd(id->verbs) on ADDR_RESOLVED, which crashed now
  // and then on a verbs context not yet set.
  std::mutex filling;
};

struct Event {
  rdma_cm_event event;         // must stay first
  uint8_t private_data[256] = {};
};

inline Id* to_impl(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }
inline Channel* to_impl(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }
inline Event* to_impl(rdma_cm_event* e) { return reinterpret_cast<Event*>(e); }

// A request about the ID, to its daemon. Throws ControlError.
inline nlohmann::json call(const Id* id, nlohmann::json request) { return id->daemon->call(std::move(request)); }

// Which daemon an address belongs to, and which reaches a destination best (placement.cpp): null when the
// program has one device, for a wildcard, loopback or multicast address, or when no daemon has the address or
// a route to it (the first device then answers as it would alone).
Daemon* owner_of(const sockaddr* ip);
Daemon* best_route_to(const sockaddr* dst);
// Moves an ID that is not yet connected or listening to `to`: a new ID there on the same channel, with the same
// options (and the same wildcard address and port, if bound), in place of the old one. Throws ControlError.
void move_id(Id* id, Daemon& to);
// A new listener on every other daemon, for an ID listening on `port` on its own: warns about a daemon where
// that fails (its port taken there) and goes on.
void listen_on_every_device(Id* id, int backlog, uint16_t port);

// Registers / finds / forgets the ID a daemon's handle names (events carry handles; a twin's names its ID).
void remember(Daemon* d, uint32_t handle, Id* id);
Id* find_id(Daemon* d, uint32_t handle);
void forget(Daemon* d, uint32_t handle);
// An ID of channel `c` on the device of `d` (not a twin, not one on no device) that has not had its
// DEVICE_REMOVAL yet, now marked as having had it; null if none is left.
Id* next_removed(Daemon* d, const Channel* c);
// The daemon itself delivered the ID's DEVICE_REMOVAL (it was still answering).
void mark_removed(Id* id);

// Runs f; a ControlError (or any exception) becomes -1 with errno set, the librdmacm convention.
template <class F>
int guarded(F&& f) {
  try {
    return f();
  } catch (const emulator::client::ControlError& e) {
    errno = e.error_number() ? e.error_number() : EIO;
  } catch (const std::bad_alloc&) {
    errno = ENOMEM;
  } catch (const std::exception&) {
    errno = EINVAL;
  }
  return -1;
}

// Text form of a sockaddr's IPv4 or IPv6 address; throws ControlError(EAFNOSUPPORT) for any other family.
std::string ip_text(const sockaddr* a);
// 127.0.0.0/8 or ::1: an address on no RDMA device.
bool is_loopback(const sockaddr* a);
// A sockaddr_in's or sockaddr_in6's port, host order.
uint16_t port_of(const sockaddr* a);
// Fills a sockaddr_in (dotted text) or sockaddr_in6 (text with colons) and its host-order port. `out` must
// have room for a sockaddr_in6 (rdma_addr's members do).
void set_ip(sockaddr* out, const std::string& text, uint16_t port);
// The GID of an address: ::ffff:a.b.c.d for IPv4, the address itself for IPv6.
void set_gid(ibv_gid& gid, const std::string& text);
// A RoCE address handle's attributes (GRH, port 1) from uroced's `dgid`, `sgid_index`, `hop_limit`,
// `traffic_class` and `sl`.
void set_ah_attr(ibv_ah_attr& ah, const nlohmann::json& r);

// A MULTICAST_JOIN or MULTICAST_ERROR event of `id` (uroced's message `m`): gives it the application's
// context and, for a join, attaches the ID's QP to the group (MULTICAST_ERROR if that fails). False if the
// membership was left meanwhile: the event is dropped. (multicast.cpp)
bool take_join_event(Id* id, Event& e, const nlohmann::json& m);
// The ID is destroyed: its memberships go with it (uroced drops its side; the QP's attachments end with
// the QP).
void forget_memberships(const Id* id);

// A synchronous ID's operation waits for its event (ucma_complete): 0, or -1 with errno from its status.
int complete(Id* id);
// Moves the ID's QP to INIT, RTR or RTS with the attributes uroced negotiated (rdma_init_qp_attr);
// `depth` >= 0 replaces max_dest_rd_atomic (RTR) or max_rd_atomic (RTS). 0 if the ID has no QP.
int modify_qp_to(Id* id, ibv_qp_state state, int depth = -1);

}  // namespace uroce::rdmacm
