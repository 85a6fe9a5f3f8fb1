// rdma_cm, served to clients over the control socket: what the kernel's rdma_cm and ucma do for a real
// RoCE NIC. Clients (the librdmacm shim) create IDs and event channels, bind, resolve addresses and
// routes, listen, connect, accept, reject, disconnect; the IB connection manager (transport/cm) speaks
// REQ/REP/RTU/REJ/DREQ/DREP with the peer over QP1 (GsiLink), and what it reports becomes rdma_cm events
// queued on the clients' channels (an eventfd per channel counts them; cm_get_event takes one).
//
// Runs on the control thread, like VerbsService: no locks. The CM's timers run on an asio timer.
// Operations and events: docs/control-protocol.md ("rdma_cm").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "emulator/daemon/cm_ids.hpp"
#include "emulator/daemon/gsi_link.hpp"
#include "emulator/daemon/local_port_range.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "transport/cm/connection_manager.hpp"
#include "transport/cm/rdma_cm_header.hpp"

namespace uroce::emulator {

// The Q_Key of RDMA_PS_UDP IDs: their QPs and the datagrams they exchange, SIDR and multicast alike.
inline constexpr uint32_t rdma_udp_qkey = 0x01234567;  // RDMA_UDP_QKEY

// An unsigned 32-bit member of a request; ServiceError(EINVAL) if missing or of another type.
uint32_t need_field(const nlohmann::json& request, const char* key);
// An IP address member (text); ServiceError(EINVAL) if missing or not an address.
wire::IpAddress need_ip(const nlohmann::json& request, const char* key);
// The request's "private_data" (hex, may be absent: empty); ServiceError(EINVAL) if not hex or longer
// than `room` bytes.
std::vector<uint8_t> private_data(const nlohmann::json& request, size_t room);

class CmService {
 public:
  // `port_range_file`: where the ephemeral port range is read at each bind to port 0 (local_port_range.hpp).
  CmService(EngineAccess& engine, boost::asio::io_context& io, PortDescription port,
            std::string port_range_file = kLocalPortRangeFile);
  ~CmService();

  // Starts QP1 (waits for the engine: post it to the io_context before the engine runs).
  void start();

  static bool handles(const std::string& op) { return op.rfind("cm_", 0) == 0; }
  // One cm_* request of `session`; descriptors to pass back go to `fds`, and `received` are those that came
  // with it (still the caller's). Throws ServiceError.
  nlohmann::json handle(uint64_t session, const nlohmann::json& request, std::vector<int>& fds,
                        std::span<const int> received = {});
  // The client is gone: its IDs are destroyed (their connections closed on the wire) and its channels.
  void close_session(uint64_t session);
  // The daemon is stopping, as a device being removed: every ID on the device (bound to one of the port's
  // addresses; not a wildcard, unbound or loopback one) gets RDMA_CM_EVENT_DEVICE_REMOVAL, as Linux's
  // rdma_cm gives it (cma_process_remove). A client that asks for it once the daemon has gone makes it
  // itself (verbs_shim/rdmacm/events.cpp).
  void announce_removal();
  // The port's GID table changed (PortAddressService): what IDs bind to, resolve from and send MADs from.
  void set_gids(std::vector<wire::IpAddress> gids);

  const cm::CmCounters& counters() const { return cm_.counters(); }

 private:
  using Handler = nlohmann::json (CmService::*)(uint64_t, const nlohmann::json&, std::vector<int>&);

  // Requests (cm_service.cpp).
  nlohmann::json create_channel(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_channel(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json get_event(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json create_id(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json destroy_id(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json migrate_id(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json bind(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json resolve_addr(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json resolve_route(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json listen(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json set_option(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json query(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json route(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);  // (cm_address.cpp)
  nlohmann::json stats(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  // Connections (cm_connect.cpp).
  nlohmann::json connect(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json accept(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json reject(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json establish(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json notify(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json disconnect(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json init_qp_attr(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);

  // What the CM reports (cm_connect.cpp).
  void on_mad(const cm::MadAddress& from, std::span<const uint8_t> mad);
  void after_cm();  // handles the CM's events, then re-arms the timer
  void on_cm_event(const cm::CmEvent& e);
  void on_connect_request(const cm::CmEvent& e);
  void arm_timer();
  // The listening ID a REQ or SIDR_REQ for `service_id` goes to, by the address in rdma_cm's header at the
  // front of its private data (exact address first, then a wildcard of the right family); 0 if none (or
  // no header). `ip` receives the header.
  uint32_t find_listener(uint64_t service_id, std::span<const uint8_t> private_data, cm::IpHeader& ip) const;
  // A new passive ID for a request that `listener` takes (the fields both REQ and SIDR_REQ give).
  uint32_t new_passive_id(uint32_t listener, uint32_t comm_id, const cm::IpHeader& ip, uint16_t port);
  // The CONNECT_REQUEST event of passive ID `n`, less its connection parameters (`conn` or `ud`).
  nlohmann::json connect_request_event(uint32_t n) const;

  // UD IDs (RDMA_PS_UDP): Service ID Resolution instead of a connection (cm_datagram.cpp).
  // RDMA_PS_UDP is UD; RDMA_PS_IB carries any QP type, UD (IBV_QPT_UD, 4) among them, as in Linux's cma.
  static bool is_datagram(const CmId& id) {
    return id.port_space == wire::rdma_cm_ps_udp || (id.port_space == wire::rdma_cm_ps_ib && id.qp_type == 4);
  }
  nlohmann::json connect_datagram(CmId& id, const nlohmann::json& r);
  nlohmann::json accept_datagram(CmId& id, const nlohmann::json& r);
  nlohmann::json reject_datagram(CmId& id, const nlohmann::json& r);
  nlohmann::json datagram_qp_attr(const std::string& state) const;
  void on_sidr_request(const cm::CmEvent& e);
  void on_sidr_response(uint32_t id, const cm::CmEvent& e);

  // rdma_resolve_addr waits for the peer's link-layer address (cm_address.cpp).
  void resolve_neighbour(uint32_t id, cm::Nanos timeout);
  void arm_address_timer();
  void poll_address_queries();

    // Multicast on UD IDs: rdma_join_multicast / rdma_leave_multicast (cm_multicast.cpp).
  nlohmann::json join_multicast(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);
  nlohmann::json leave_multicast(uint64_t s, const nlohmann::json& r, std::vector<int>& fds);

  CmId& id_of(uint64_t session, const nlohmann::json& r);
  uint32_t find_by_comm_id(uint32_t comm_id) const;
  void queue_event(uint32_t id, RdmaCmEvent type, int status, nlohmann::json extra = nlohmann::json::object());
  void destroy(uint32_t id);
  // Takes `port` (0: an ephemeral one) in the ID's port space for `id`; EADDRINUSE if taken.
  void take_port(uint32_t id, uint16_t port);
  // A port of the ephemeral range in `id`'s port space that is free or can be shared with `id`;
  // EADDRNOTAVAIL if none is left.
  uint16_t ephemeral_port(const CmId& id);
  // Whether `id` can take a port `holders` hold (cma_port_is_unique): it differs from each of them in
  // destination port, source address or destination address.
  bool can_share_port(const CmId& id, const std::vector<uint32_t>& holders) const;
  bool is_local(const wire::IpAddress& a) const;
  uint8_t sgid_index(const wire::IpAddress& a) const;
  uint8_t service_level_of(const CmId& id) const { return cm::service_level_of_tos(id.tos, port_.egress_qos_map); }
  cm::Nanos now() const;

  EngineAccess& engine_;
  boost::asio::io_context& io_;
  PortDescription port_;
  GsiLink gsi_;
  cm::ConnectionManager cm_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer address_timer_;         // polls address_queries_ while any is pending
  bool address_timer_armed_ = false;
  std::map<uint32_t, cm::Nanos> address_queries_;  // IDs in addr_query -> when they give up
  std::mt19937 rng_;
  std::map<std::string, Handler> handlers_;
  std::span<const int> received_;  // the descriptors that came with the request being handled
  std::map<uint32_t, CmId> ids_;
  std::map<uint32_t, CmChannel> channels_;
  std::map<std::pair<uint16_t, uint16_t>, std::vector<uint32_t>> ports_;  // (port space, port) -> IDs bound
  std::map<uint64_t, int> listens_;  // service ID -> listening IDs on it (the CM listens once)
  uint32_t next_id_ = 1;
  uint32_t next_channel_ = 1;
  std::string port_range_file_;
  uint16_t next_ephemeral_ = 0;  // where the next search for a free ephemeral port starts
  uint32_t next_membership_ = 1;
};

}  // namespace uroce::emulator
