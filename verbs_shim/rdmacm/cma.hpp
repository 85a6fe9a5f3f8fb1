// uroce's librdmacm: the drop-in for rdma-core 44's librdmacm.so.1. Like the real one it sits on
// libibverbs (uroce's shim, first on the library path under uroce-run) for devices, QPs and CQs, and
// leaves connection management to "the kernel", here uroced's rdma_cm service, reached over its own
// control connection (emulator/daemon/cm_service.hpp; messages in docs/control-protocol.md).
//
// The objects an application holds (struct rdma_cm_id, rdma_event_channel, rdma_cm_event) are the first
// members of ours, so a pointer converts back with a cast.
#pragma once

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/client/control_connection.hpp"

#define CMA_EXPORT extern "C" __attribute__((visibility("default")))

namespace uroce::rdmacm {

struct Channel {
  rdma_event_channel channel;  // must stay first; .fd is the daemon's eventfd
  uint32_t handle = 0;
};

struct Id {
  rdma_cm_id id;               // must stay first
  uint32_t handle = 0;
  bool sync = false;           // created without a channel: calls wait for their event (rdma_create_ep)
  ibv_sa_path_rec path{};      // route.path_rec points here once the route is resolved
  // What the peer asked for in its REQ (passive IDs): the defaults of rdma_accept without parameters.
  uint8_t peer_responder_resources = 0;
  uint8_t peer_initiator_depth = 0;
  bool created_cqs = false;    // rdma_create_qp made the CQs (rdma_create_ep style): destroy them too
  std::unique_ptr<ibv_qp_init_attr> listen_qp_attr;  // rdma_create_ep on a passive ID: for rdma_get_request
};

struct Event {
  rdma_cm_event event;         // must stay first
  uint8_t private_data[256] = {};
};

inline Id* to_impl(rdma_cm_id* id) { return reinterpret_cast<Id*>(id); }
inline Channel* to_impl(rdma_event_channel* c) { return reinterpret_cast<Channel*>(c); }
inline Event* to_impl(rdma_cm_event* e) { return reinterpret_cast<Event*>(e); }

// The process's connection to uroced for rdma_cm (opened on first use) and the verbs devices, opened
// once through libibverbs as librdmacm does (ucma_init). Throws ControlError.
emulator::client::ControlConnection& control();
nlohmann::json call(nlohmann::json request, std::vector<int>* fds = nullptr);
ibv_context* device_context();  // uroce's device (the first one), opened once
// The device's protection domain that every ID bound to it carries (rdma_cm_id::pd), allocated once, as
// librdmacm allocates one per device: rdma_create_qp and rdma_create_srq without a PD use it, and so do
// applications that take the ID's (pyverbs' CMID.pd after rdma_resolve_route). Null, errno set, if it
// cannot be made.
ibv_pd* device_pd();
std::vector<ibv_context*> all_device_contexts();

// Registers / finds / forgets the ID a daemon handle names (events carry handles).
void remember(Id* id);
Id* find_id(uint32_t handle);
void forget(uint32_t handle);

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
