#include "emulator/daemon/port_address_service.hpp"

#include <unistd.h>

#include <algorithm>
#include <bitset>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "emulator/daemon/source_gid.hpp"
#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

using nlohmann::json;

namespace {

// A source GID index is 8 bits, and the device reports at most 255 entries.
constexpr size_t max_gids = 255;

std::string address_text(const json& request) {
  const auto a = request.find("address");
  if (a == request.end() || !a->is_string()) throw ServiceError(EINVAL, "\"address\" must be an address");
  return a->get<std::string>();
}

// What may not be a port's address: no station could send to it, or it is not one station's.
void check_unicast(const wire::IpAddress& ip, const std::string& text) {
  const bool broadcast = ip.is_v4() && ip.v4() == 0xffffffff;
  if (is_wildcard(ip) || is_loopback(ip) || broadcast || ip.is_multicast()) {
    throw ServiceError(EINVAL, text + " cannot be a port's address");
  }
}

// The routes' subnets replaced by `subnets`, their gateways kept (Routes throws std::invalid_argument if one is
// then off the link).
net::Routes with_subnets(const net::Routes& routes, std::vector<net::Subnet> subnets) {
  std::vector<wire::IpAddress> gateways;
  for (const bool v4 : {true, false}) {
    if (const auto g = routes.gateway(v4)) gateways.push_back(*g);
  }
  return net::Routes(std::move(subnets), std::move(gateways));
}

bool has(const std::vector<wire::IpAddress>& list, const wire::IpAddress& ip) {
  return std::find(list.begin(), list.end(), ip) != list.end();
}

}  // namespace

PortAddressService::PortAddressService(EngineAccess& engine, std::vector<wire::IpAddress> gids, net::Routes routes,
                                       uid_t owner, OnChange on_change)
    : engine_(engine), gids_(std::move(gids)), routes_(std::move(routes)), owner_(owner),
      on_change_(std::move(on_change)) {}

bool PortAddressService::handles(const std::string& op) {
  return op == "port_address_add" || op == "port_address_del" || op == "port_addresses";
}

json PortAddressService::handle(uid_t caller, const json& request) {
  const std::string op = request.value("op", std::string());
  if (op == "port_addresses") return list();
  // As changing a netdev's addresses takes CAP_NET_ADMIN: here root, or whoever runs the NIC.
  if (caller != 0 && caller != owner_) {
    throw ServiceError(EPERM, "only root and the user uroced runs as (uid " + std::to_string(owner_) +
                                  ") may change the port's addresses");
  }
  return op == "port_address_add" ? add(request) : del(request);
}

json PortAddressService::add(const json& request) {
  const std::string text = address_text(request);
  const auto subnet = net::parse_subnet(text);
  if (!subnet) throw ServiceError(EINVAL, "\"" + text + "\" is not an address with an optional prefix length");
  check_unicast(subnet->address, text);
  const size_t index = add_subnet(*subnet);
  spdlog::info("port address {} added: GID {}", net::to_string(*subnet), index);
  return {{"gid_index", index}};
}

size_t PortAddressService::add_subnet(const net::Subnet& subnet) {
  if (std::find(gids_.begin(), gids_.end(), subnet.address) != gids_.end()) {
    throw ServiceError(EEXIST, wire::to_string(subnet.address) + " is already the port's");
  }
  // The first free entry, as the kernel's GID cache fills its table: empty, and named by no QP or address
  // handle. One still named (its address removed while a QP used it) stays out of use until it is let go,
  // as Linux keeps such an entry pending deletion: else that QP would go on from the new address. Past the
  // end if none is free, with empty entries between if the ones just past the end are still named.
  std::bitset<256> in_use;
  engine_.run_on_engine([&](EngineContext& c) { in_use = c.device.source_gids_in_use(); });
  std::vector<wire::IpAddress> gids = gids_;
  const auto free = [&](size_t i) { return !in_use.test(i) && (i >= gids.size() || gids[i].is_zero()); };
  size_t index = 0;
  while (index < max_gids && !free(index)) ++index;
  if (index == max_gids) throw ServiceError(ENOSPC, "the GID table is full");
  if (index >= gids.size()) gids.resize(index + 1);
  gids[index] = subnet.address;
  std::vector<net::Subnet> subnets = routes_.subnets();
  subnets.push_back(subnet);
  apply(std::move(gids), with_subnets(routes_, std::move(subnets)));  // (a valid prefix: parsed)
  return index;
}

json PortAddressService::del(const json& request) {
  const std::string text = address_text(request);
  const auto ip = wire::parse_ip(text);
  if (!ip) throw ServiceError(EINVAL, "\"" + text + "\" is not an address");
  const size_t index = remove_address(*ip);
  // An address SLAAC formed and the administrator removed comes back only once its prefix has lapsed and
  // been advertised anew (follow_autoconf).
  if (std::erase(autoconf_, *ip) != 0) withdrawn_.push_back(*ip);
  spdlog::info("port address {} removed: GID {} is empty", wire::to_string(*ip), index);
  return {{"gid_index", index}};
}

size_t PortAddressService::remove_address(const wire::IpAddress& ip) {
  const auto entry = std::find(gids_.begin(), gids_.end(), ip);
  if (ip.is_zero() || entry == gids_.end()) {
    throw ServiceError(EADDRNOTAVAIL, wire::to_string(ip) + " is not the port's");
  }
  const size_t index = size_t(entry - gids_.begin());
  std::vector<wire::IpAddress> gids = gids_;
  gids[index] = wire::IpAddress{};
  while (!gids.empty() && gids.back().is_zero()) gids.pop_back();  // (an empty entry at the end is no entry)
  std::vector<net::Subnet> subnets;
  for (const net::Subnet& s : routes_.subnets()) {
    if (s.address != ip) subnets.push_back(s);
  }
  std::optional<net::Routes> routes;
  try {
    routes.emplace(with_subnets(routes_, std::move(subnets)));
  } catch (const std::invalid_argument& e) {
    // Linux would drop the route through it; uroced's gateway is configured, not learned: say why.
    throw ServiceError(EBUSY, wire::to_string(ip) + " is how the port reaches its gateway (" + e.what() + ")");
  }
  apply(std::move(gids), std::move(*routes));
  return index;
}

// Addresses SLAAC formed come and go with their prefixes' lifetimes, as the kernel adds and deletes them on
// a RoCE NIC's netdev (and so in its GID table). One the port already had (configured, or added by hand)
// stays the administrator's: it is neither added again nor removed when its prefix lapses.
void PortAddressService::follow_autoconf(const std::vector<net::AutoconfAddress>& valid) {
  const auto is_valid = [&](const wire::IpAddress& ip) {
    return std::any_of(valid.begin(), valid.end(),
                       [&](const net::AutoconfAddress& a) { return a.subnet.address == ip; });
  };
  for (auto it = autoconf_.begin(); it != autoconf_.end();) {
    if (is_valid(*it)) {
      ++it;
      continue;
    }
    try {
      const size_t index = remove_address(*it);
      spdlog::info("SLAAC: address {} expired: GID {} is empty", wire::to_string(*it), index);
    } catch (const ServiceError& e) {
      spdlog::warn("SLAAC: address {} expired but stays: {}", wire::to_string(*it), e.what());
    }
    it = autoconf_.erase(it);  // (a vector's erase: the next one)
  }
  std::erase_if(withdrawn_, [&](const wire::IpAddress& ip) { return !is_valid(ip); });
  for (const net::AutoconfAddress& a : valid) {
    const wire::IpAddress& ip = a.subnet.address;
    if (has(autoconf_, ip) || has(withdrawn_, ip) || has(gids_, ip)) continue;
    try {
      const size_t index = add_subnet(a.subnet);
      autoconf_.push_back(ip);
      spdlog::info("SLAAC: address {} formed: GID {}", net::to_string(a.subnet), index);
    } catch (const ServiceError& e) {
      withdrawn_.push_back(ip);  // (said once; tried again once the prefix has lapsed and come back)
      spdlog::warn("SLAAC: address {} not added: {}", net::to_string(a.subnet), e.what());
    }
  }
}

json PortAddressService::list() const {
  json out = json::array();
  for (size_t i = 0; i < gids_.size(); ++i) {
    if (gids_[i].is_zero()) continue;
    json entry = {{"gid_index", i}, {"address", wire::to_string(gids_[i])}, {"gid", wire::gid_string(gids_[i])}};
    if (has(autoconf_, gids_[i])) entry["autoconf"] = true;
    for (const net::Subnet& s : routes_.subnets()) {
      if (s.address == gids_[i] && s.prefix_length != 0) entry["prefix_length"] = s.prefix_length;
    }
    out.push_back(entry);
  }
  return {{"addresses", out}};
}

// The engine first (it answers for the new table, and clients that look at the status page see the new
// generation), then the services, on this thread before any other request, so that a client reading the
// table after the event, or after seeing the generation move, gets the new one.
void PortAddressService::apply(std::vector<wire::IpAddress> gids, net::Routes routes) {
  gids_ = gids;
  routes_ = routes;
  const uint32_t generation = ++generation_;
  engine_.run_on_engine([&](EngineContext& c) {
    c.set_addresses(gids, routes, generation);
    c.queues.broadcast_port_event(verbs::EventType::gid_change, 1);
  });
  on_change_(gids_, generation);
}

}  // namespace uroce::emulator
