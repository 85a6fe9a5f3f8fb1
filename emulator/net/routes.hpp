// Where a packet for an IP destination goes first: the destination itself when it is on the link, the
// family's gateway when it is not (routed RoCEv2, as between racks: each host in its own subnet behind a
// router), or nowhere. The engine resolves the next hop's MAC (ARP, neighbour discovery) and puts it in
// the frame; the IP header keeps the final destination, and the router decrements the TTL (which the ICRC
// does not cover).
//
// A port's subnets are its --ip addresses with their prefix lengths. An address given without one makes
// its whole family on-link, as uroced always behaved (every destination ARPed for directly); so does a
// family with no subnets at all. IPv6 link-local destinations (fe80::/10) are always on the link.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "transport/wire/address.hpp"

namespace uroce::emulator::net {

struct Subnet {
  wire::IpAddress address;  // IPv4 v4-mapped, as everywhere
  unsigned prefix_length;   // of the family's own width: 0..32 for IPv4, 0..128 for IPv6

  bool contains(const wire::IpAddress& a) const;
};

class Routes {
 public:
  // Throws std::invalid_argument for a prefix longer than its family allows, a gateway of a family with no
  // subnet, a second gateway of one family, or a gateway that is not on the link.
  Routes(std::vector<Subnet> subnets = {}, std::vector<wire::IpAddress> gateways = {});

  bool on_link(const wire::IpAddress& dst) const;
  // The address whose MAC the frame carries, or nothing: off the link with no gateway of its family.
  std::optional<wire::IpAddress> next_hop(const wire::IpAddress& dst) const {
    if (on_link(dst)) return dst;
    return dst.is_v4() ? gateway_v4_ : gateway_v6_;
  }
  const std::vector<Subnet>& subnets() const { return subnets_; }
  std::optional<wire::IpAddress> gateway(bool v4) const { return v4 ? gateway_v4_ : gateway_v6_; }

 private:
  std::vector<Subnet> subnets_;
  bool any_v4_ = false, any_v6_ = false;  // the family has subnets: what lies outside them is off the link
  std::optional<wire::IpAddress> gateway_v4_, gateway_v6_;
};

// "10.0.0.1/24", "fd00::1/64" or an address alone (its prefix length then 0: the whole family on the link).
// Nothing when the text is neither, or the prefix length is not a number within the family's width.
std::optional<Subnet> parse_subnet(const std::string& text);

std::string to_string(const Subnet& s);

}  // namespace uroce::emulator::net
