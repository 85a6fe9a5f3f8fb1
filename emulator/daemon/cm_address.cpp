// rdma_resolve_addr's wait for the peer, as Linux's rdma_cm waits (addr.c): the ID's ADDR_RESOLVED comes
// once the port knows the destination's MAC (ARP for IPv4, neighbour discovery for IPv6), and a peer that
// does not answer within the caller's timeout_ms gives ADDR_ERROR with status -ETIMEDOUT (rping: "cma event
// RDMA_CM_EVENT_ADDR_ERROR, error -110"), instead of a connection that fails when the REQ's retries run out
// a hundred seconds later. Our own addresses and multicast groups need no resolution. A destination beyond
// the port's subnets is resolved through its gateway (the engine asks for the gateway's MAC); with no
// gateway there is no route, and ADDR_ERROR comes at once with -ENETUNREACH.
//
// The caches live on the engine thread, which sends the requests and hears the answers; the CM polls them
// (one engine call per poll for every pending query) every address_poll_interval while queries pend.
#include <cerrno>

#include <spdlog/spdlog.h>

#include "emulator/daemon/cm_service.hpp"
#include "emulator/daemon/source_gid.hpp"

namespace uroce::emulator {

namespace {

// Linux learns of a neighbour update at once (a netevent); 10 ms of polling is as good for a connection
// set-up, and costs nothing when no query pends.
constexpr std::chrono::milliseconds address_poll_interval{10};

}  // namespace

void CmService::resolve_neighbour(uint32_t n, cm::Nanos timeout) {
  CmId& id = ids_.at(n);
  const NeighbourState state = is_local(id.dst) ? NeighbourState::known : ask_neighbour(engine_, id.dst);
  if (state == NeighbourState::no_route) {
    // Off the link with no gateway: Linux's route lookup fails at once with ENETUNREACH (rping: "cma event
    // RDMA_CM_EVENT_ADDR_ERROR, error -101").
    spdlog::info("rdma_cm: no route to {}", wire::to_string(id.dst));
    id.state = CmIdState::idle;
    queue_event(n, RdmaCmEvent::addr_error, -ENETUNREACH);
    return;
  }
  if (state == NeighbourState::known) {
    id.state = CmIdState::addr_resolved;
    queue_event(n, RdmaCmEvent::addr_resolved, 0);
    return;
  }
  id.state = CmIdState::addr_query;
  address_queries_[n] = now() + timeout;
  arm_address_timer();
}

void CmService::arm_address_timer() {
  if (address_queries_.empty() || address_timer_armed_) return;
  address_timer_armed_ = true;
  address_timer_.expires_after(address_poll_interval);
  address_timer_.async_wait([this](const boost::system::error_code& ec) {
    address_timer_armed_ = false;
    if (!ec) poll_address_queries();
  });
}

void CmService::poll_address_queries() {
  std::vector<std::pair<uint32_t, wire::IpAddress>> pending;
  for (const auto& [n, deadline] : address_queries_) pending.emplace_back(n, ids_.at(n).dst);
  std::vector<bool> known(pending.size());
  engine_.run_on_engine([&](EngineContext& c) {
    for (size_t i = 0; i < pending.size(); ++i) known[i] = c.neighbour_known(pending[i].second);
  });
  const cm::Nanos t = now();
  for (size_t i = 0; i < pending.size(); ++i) {
    const uint32_t n = pending[i].first;
    CmId& id = ids_.at(n);
    if (known[i]) {
      id.state = CmIdState::addr_resolved;
      queue_event(n, RdmaCmEvent::addr_resolved, 0);
    } else if (t >= address_queries_.at(n)) {
      spdlog::info("rdma_cm: {} did not answer address resolution in time", wire::to_string(id.dst));
      id.state = CmIdState::idle;  // bound, as Linux leaves an ID whose query failed
      queue_event(n, RdmaCmEvent::addr_error, -ETIMEDOUT);
    } else {
      continue;
    }
    address_queries_.erase(n);
  }
  arm_address_timer();
}

// How this port would reach `dst`, without starting anything: "local" (one of its own addresses), "link"
// (on one of its subnets), "gateway" (through a router) or "none" (no address of dst's family, or no route).
// A program with several devices asks each daemon, and rdma_cm places an ID that is not bound to an address
// on the device that reaches the destination best, as Linux's route lookup picks the netdev.
nlohmann::json CmService::route(uint64_t, const nlohmann::json& r, std::vector<int>&) {
  const wire::IpAddress dst = need_ip(r, "dst");
  if (is_local(dst)) return {{"route", "local"}};
  if (!source_gid_index(port_.gids, dst)) return {{"route", "none"}};
  bool routed = false;
  bool on_link = false;
  engine_.run_on_engine([&](EngineContext& c) {
    routed = c.has_route(dst);
    on_link = routed && c.on_link(dst);
  });
  return {{"route", !routed ? "none" : on_link ? "link" : "gateway"}};
}

}  // namespace uroce::emulator
