// How the control thread reaches the transport: by running a function on the engine thread (which alone
// touches the Device) and waiting for it. Tests implement it by calling the function directly.
#pragma once

#include <cstdint>
#include <functional>

#include <nlohmann/json.hpp>

#include "emulator/engine/queue_service.hpp"
#include "emulator/net/address_autoconf.hpp"
#include "emulator/net/routes.hpp"
#include "transport/device.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator {

struct EngineContext {
  transport::Device& device;
  engine::QueueService& queues;
  transport::Nanos now;
  // Adds what the engine, the port and the network layer counted (for `uroce stats`).
  std::function<void(nlohmann::json&)> report_counters = [](nlohmann::json&) {};
  // Whether the port knows the link-layer address of `ip` (ARP or neighbour discovery); if not, starts
  // finding it. Our own addresses and groups are known at once. rdma_resolve_addr, ibv_create_ah and
  // ibv_modify_qp wait for it, as Linux's do. (Tests' engines know every address.)
  std::function<bool(const wire::IpAddress&)> neighbour_known = [](const wire::IpAddress&) { return true; };
  // Whether the port has a route to `ip`: on the link, or through a configured gateway or a router learned
  // from IPv6 router discovery. (Tests' engines route everything.)
  std::function<bool(const wire::IpAddress&)> has_route = [](const wire::IpAddress&) { return true; };
  // Whether `ip` is on the port's link (one of its subnets, or an IPv6 prefix a router announced on-link),
  // as against through a gateway. (Tests' engines have every address on the link.)
  std::function<bool(const wire::IpAddress&)> on_link = [](const wire::IpAddress&) { return true; };
  // Gives the port a new GID table (an empty entry: the zero address) and routes, the table's generation
  // going to the status page (Engine::set_addresses). (Tests' engines keep nothing.)
  std::function<void(std::vector<wire::IpAddress>, net::Routes, uint32_t)> set_addresses =
      [](std::vector<wire::IpAddress>, net::Routes, uint32_t) {};
  // The addresses stateless autoconfiguration holds valid now (net/address_autoconf.hpp). (Tests' engines
  // have none.)
  std::function<std::vector<net::AutoconfAddress>()> autoconf_addresses = [] {
    return std::vector<net::AutoconfAddress>{};
  };
};

class EngineAccess {
 public:
  virtual ~EngineAccess() = default;
  // Runs `fn` on the engine thread and returns when it has run.
  virtual void run_on_engine(const std::function<void(EngineContext&)>& fn) = 0;
};

enum class NeighbourState : uint8_t { no_route, resolving, known };

// Where the port stands on reaching `ip`, asked on the engine thread: no route to it, its MAC being found
// (ARP or ND started if none runs), or known. What the CM's rdma_resolve_addr and the verbs'
// resolve_neighbour both ask first. A multicast group is always known, route or none: its MAC follows from
// the address, and Linux looks no route up for it either (ib_resolve_eth_dmac, cma_iboe_join_multicast), so
// an address handle for a group joined through rdma_cm works on a port with no gateway.
inline NeighbourState ask_neighbour(EngineAccess& engine, const wire::IpAddress& ip) {
  if (ip.is_multicast()) return NeighbourState::known;
  NeighbourState state = NeighbourState::no_route;
  engine.run_on_engine([&](EngineContext& c) {
    if (c.has_route(ip)) state = c.neighbour_known(ip) ? NeighbourState::known : NeighbourState::resolving;
  });
  return state;
}

}  // namespace uroce::emulator
