#include "emulator/net/address_autoconf.hpp"

#include <algorithm>

#include "emulator/net/nd_frames.hpp"

namespace uroce::emulator::net {

namespace {

constexpr unsigned interface_identifier_bits = 64;  // an Ethernet interface's (RFC 2464 §4)
constexpr Nanos two_hours = seconds(2 * 60 * 60);

}  // namespace

AddressAutoconf::AddressAutoconf(const wire::MacAddress& mac, NetCounters& counters, bool enabled,
                                 size_t max_addresses)
    : mac_(mac), counters_(counters), enabled_(enabled), max_addresses_(max_addresses) {}

// The prefix's first 64 bits and the link-local address's identifier (the modified EUI-64 of the MAC).
wire::IpAddress AddressAutoconf::address_under(const wire::IpAddress& prefix) const {
  wire::IpAddress a = link_local_from_mac(mac_);
  std::copy_n(prefix.bytes.begin(), 8, a.bytes.begin());
  return a;
}

void AddressAutoconf::on_prefix(const AdvertisedPrefix& p, Nanos now) {
  if (!enabled_ || !p.autonomous || is_link_local(p.prefix)) return;  // (a), (b)
  // (c); and, as Linux's addrconf_prefix_rcv, no address under a multicast prefix, nor (our addition)
  // under ::/8, where an address could read as an IPv4 one (::ffff:a.b.c.d) or be :: or ::1.
  if (p.preferred_lifetime > p.valid_lifetime || p.prefix.is_multicast() || p.prefix.bytes[0] == 0) {
    ++counters_.slaac_prefixes_ignored;
    return;
  }
  std::erase_if(addresses_, [&](const AutoconfAddress& a) { return a.valid_until <= now; });
  const wire::IpAddress address = address_under(p.prefix);
  auto it = std::find_if(addresses_.begin(), addresses_.end(), [&](const AutoconfAddress& a) {
    return a.subnet.prefix_length == p.length && a.subnet.address == address;
  });
  if (it == addresses_.end()) {  // (d)
    if (p.valid_lifetime == 0) return;
    if (p.length + interface_identifier_bits != 128 || addresses_.size() >= max_addresses_) {
      ++counters_.slaac_prefixes_ignored;
      return;
    }
    addresses_.push_back({Subnet{address, p.length}, lifetime_end(now, p.valid_lifetime),
                          lifetime_end(now, p.preferred_lifetime)});
    ++counters_.slaac_addresses_formed;
    return;
  }
  // (e): the preferred lifetime as advertised; the valid one by the two-hours rule.
  it->preferred_until = lifetime_end(now, p.preferred_lifetime);
  const Nanos advertised = lifetime_end(now, p.valid_lifetime);
  const Nanos remaining = it->valid_until - now;  // (> 0: expired entries are gone)
  if (advertised == never || advertised - now > two_hours || advertised > it->valid_until) {
    it->valid_until = advertised;
  } else if (remaining > two_hours) {
    it->valid_until = now + two_hours;
  }
}

std::vector<AutoconfAddress> AddressAutoconf::addresses(Nanos now) const {
  std::vector<AutoconfAddress> out;
  for (const AutoconfAddress& a : addresses_) {
    if (a.valid_until > now) out.push_back(a);
  }
  return out;
}

}  // namespace uroce::emulator::net
