// The port's IP addresses while uroced runs: `uroce address add|del|show`, as `ip addr add|del` on a RoCE
// NIC's netdev. Linux's GID cache follows the netdev's addresses (roce_gid_mgmt): an added address takes the
// first free entry of the GID table, a removed one leaves its entry empty (so that the others keep their
// indexes, which QPs and address handles name) and not free while a QP or address handle still names it
// (pending deletion), and every context hears IBV_EVENT_GID_CHANGE. Here:
//   - the engine gets the new table and routes (the address's subnet), probes for and announces a new
//     address (ARP, or neighbour discovery and MLD), and stops answering for a removed one; a QP whose
//     source GID entry was emptied sends nothing more (counted as tx_no_route; Linux's rxe would go on
//     sending from an address the host no longer has, whose answers it would drop);
//   - the status page's GID generation moves, so that clients read the table again before their next GID
//     query, and every client gets IBV_EVENT_GID_CHANGE;
//   - the verbs and rdma_cm services take the table for what they check and bind to (`on_change`).
// Only root and the user uroced runs as may change the addresses; any client may list them.
#pragma once

#include <sys/types.h>

#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/daemon/engine_access.hpp"
#include "emulator/net/address_autoconf.hpp"
#include "emulator/net/routes.hpp"
#include "transport/wire/address.hpp"

namespace uroce::emulator {

class PortAddressService {
 public:
  // The new table, and its generation (1 for the first change: 0 is the table uroced started with).
  using OnChange = std::function<void(const std::vector<wire::IpAddress>& gids, uint32_t generation)>;
  // `gids`: the table uroced started with; `routes`: its subnets and gateways (options' --ip, --gateway).
  PortAddressService(EngineAccess& engine, std::vector<wire::IpAddress> gids, net::Routes routes, uid_t owner,
                     OnChange on_change);

  static bool handles(const std::string& op);
  // "port_address_add" {address: "10.0.0.2/24"}, "port_address_del" {address: "10.0.0.2"},
  // "port_addresses": the table, with each entry's subnet. Throws ServiceError (EPERM, EINVAL, EEXIST,
  // EADDRNOTAVAIL, EBUSY) with the reason.
  nlohmann::json handle(uid_t caller, const nlohmann::json& request);

  const std::vector<wire::IpAddress>& gids() const { return gids_; }

  // The addresses stateless autoconfiguration holds valid now (net/address_autoconf.hpp, asked of the
  // engine by daemon/autoconf_watch.hpp): each new one is added as `uroce address add` would, each one
  // added so before and no longer valid is removed. Failures are logged, not thrown.
  void follow_autoconf(const std::vector<net::AutoconfAddress>& valid);

 private:
  nlohmann::json add(const nlohmann::json& request);
  nlohmann::json del(const nlohmann::json& request);
  // Both throw ServiceError; they return the GID index taken or emptied.
  size_t add_subnet(const net::Subnet& subnet);
  size_t remove_address(const wire::IpAddress& ip);
  nlohmann::json list() const;
  // Hands the table and routes to the engine, then tells the services and every client.
  void apply(std::vector<wire::IpAddress> gids, net::Routes routes);

  EngineAccess& engine_;
  std::vector<wire::IpAddress> gids_;  // an empty entry is the zero address
  net::Routes routes_;
  uid_t owner_;
  OnChange on_change_;
  uint32_t generation_ = 0;
  std::vector<wire::IpAddress> autoconf_;   // addresses SLAAC added to the table (a few: a vector)
  std::vector<wire::IpAddress> withdrawn_;  // ones it may not add again while their prefix stays valid
};

}  // namespace uroce::emulator
