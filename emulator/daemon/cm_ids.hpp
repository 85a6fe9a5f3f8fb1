// What uroced's rdma_cm service keeps per client: rdma_cm IDs (as the kernel's rdma_cm keeps struct
// rdma_id_private for each) and event channels. Plain data; cm_service.cpp gives it meaning.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "transport/wire/address.hpp"

namespace uroce::emulator {

// rdma_cma.h's enum rdma_cm_event_type, value for value (the shim checks with static_asserts): the
// daemon does not depend on rdma-core's headers.
enum class RdmaCmEvent : int {
  addr_resolved = 0, addr_error = 1, route_resolved = 2, route_error = 3, connect_request = 4,
  connect_response = 5, connect_error = 6, unreachable = 7, rejected = 8, established = 9,
  disconnected = 10, device_removal = 11, multicast_join = 12, multicast_error = 13, addr_change = 14,
  timewait_exit = 15,
};

// rdma_cm's ID states (Linux: enum rdma_cm_state), the subset this service goes through.
enum class CmIdState : uint8_t {
  idle,             // created, or bound
  addr_query,       // rdma_resolve_addr waits for the peer's link-layer address (cm_address.cpp)
  addr_resolved,
  route_resolved,
  listening,
  connecting,       // active: REQ sent
  connect_request,  // passive: REQ received, the application has not answered
  accepting,        // passive: REP sent, waiting for RTU
  response_received,// active: REP received, the client moves its QP and says establish
  connected,
  disconnected,     // DREQ/DREP done or rejected/unreachable: only destroy is left
};

struct CmId {
  uint64_t session = 0;
  uint32_t channel = 0;
  uint16_t port_space = 0;   // RDMA_PS_TCP ...
  uint8_t qp_type = 2;       // IBV_QPT_RC
  CmIdState state = CmIdState::idle;
  bool bound = false;        // holds src_port in the port table
  wire::IpAddress src;       // our address (all zero: wildcard)
  wire::IpAddress dst;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t comm_id = 0;      // the IB CM connection, 0 before connect / after it is gone
  uint32_t listener = 0;     // passive IDs: the listening ID that made them
  bool reuseaddr = false;
  // Whether a wildcard listener takes connections of its own family only (RDMA_OPTION_ID_AFONLY). As in
  // Linux, binding sets it: 0.0.0.0 is IPv4 only, :: takes both (net.ipv6.bindv6only's default).
  std::optional<bool> afonly;
  uint8_t tos = 0;
  // The service level of the connection (the PCP of its frames on a VLAN): from the TOS when the route is
  // resolved (cm/service_level.hpp), or the one in the peer's REQ.
  uint8_t sl = 0;
  std::optional<uint8_t> ack_timeout;  // rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)

  // The connection as negotiated (what rdma_init_qp_attr reports).
  uint32_t qpn = 0;
  uint32_t remote_qpn = 0;
  uint32_t sq_psn = 0;       // the PSN we send from: the peer's announced starting PSN (its REQ or REP)
  uint32_t rq_psn = 0;       // the PSN we receive from: ours, announced in our REQ or REP
  uint8_t responder_resources = 0;  // RDMA READ/atomics we answer at once (max_dest_rd_atomic)
  uint8_t initiator_depth = 0;      // ones we issue at once (max_rd_atomic)
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t path_mtu = 0;             // IB MTU code
  uint8_t local_ack_timeout = 19;

  // rdma_join_multicast's memberships, by the handle the client names them with: the group's GID.
  std::map<uint32_t, wire::IpAddress> groups;
};

struct CmChannel {
  uint64_t session = 0;
  int fd = -1;                      // eventfd (semaphore): one count per queued event
  std::deque<nlohmann::json> events;
};

}  // namespace uroce::emulator
