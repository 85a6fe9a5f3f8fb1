// Stateless address autoconfiguration's rules (RFC 4862 §5.5.3) on an injected clock: which advertised
// prefixes form an address, the address itself (the prefix and the modified EUI-64 of the MAC, as Linux's
// default addr_gen_mode forms it), and how its lifetimes follow later advertisements, the "two hours" rule
// among them. The expected addresses are written out by hand.
#include <catch2/catch.hpp>

#include "emulator/net/address_autoconf.hpp"
#include "transport/wire/address.hpp"

using namespace uroce;
using namespace uroce::emulator::net;

namespace {

const wire::MacAddress mac{{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}};  // EUI-64: 5054:00ff:fe12:3456
constexpr uint32_t forever = 0xffffffff;

AdvertisedPrefix prefix(const char* text, uint8_t length, uint32_t valid, uint32_t preferred, bool autonomous = true) {
  AdvertisedPrefix p;
  p.prefix = *wire::parse_ip(text);
  p.length = length;
  p.on_link = true;
  p.autonomous = autonomous;
  p.valid_lifetime = valid;
  p.preferred_lifetime = preferred;
  return p;
}

std::vector<std::string> formed(const AddressAutoconf& a, Nanos now) {
  std::vector<std::string> out;
  for (const AutoconfAddress& x : a.addresses(now)) out.push_back(wire::to_string(x.subnet.address) + "/" +
                                                                  std::to_string(x.subnet.prefix_length));
  return out;
}

}  // namespace

TEST_CASE("SLAAC forms the prefix plus the MAC's EUI-64 under an autonomous /64 prefix, for its valid lifetime",
          "[slaac]") {
  NetCounters counters;
  AddressAutoconf a(mac, counters, true);
  const Nanos t0 = seconds(1000);
  a.on_prefix(prefix("fd81:1::", 64, 3600, 1800), t0);
  CHECK(formed(a, t0) == std::vector<std::string>{"fd81:1::5054:ff:fe12:3456/64"});
  CHECK(counters.slaac_addresses_formed == 1);
  const AutoconfAddress x = a.addresses(t0).at(0);
  CHECK(x.valid_until == t0 + seconds(3600));
  CHECK(x.preferred_until == t0 + seconds(1800));
  // Still there just before its valid lifetime ends (deprecated after 1800 s, still valid); gone at its end.
  CHECK(formed(a, t0 + seconds(3599)).size() == 1);
  CHECK(formed(a, t0 + seconds(3600)).empty());
  // An infinite lifetime never ends.
  a.on_prefix(prefix("2001:db8:7::", 64, forever, forever), t0);
  CHECK(a.addresses(t0 + seconds(1'000'000'000)).back().subnet.address ==
        *wire::parse_ip("2001:db8:7::5054:ff:fe12:3456"));
}

TEST_CASE("SLAAC ignores what RFC 4862 §5.5.3 says to ignore, and forms nothing when turned off", "[slaac][bad]") {
  NetCounters counters;
  AddressAutoconf a(mac, counters, true, 2);
  const Nanos t0 = seconds(10);
  a.on_prefix(prefix("fd81:1::", 64, 3600, 1800, false), t0);  // (a) no A flag: an on-link prefix only
  a.on_prefix(prefix("fe80::", 64, 3600, 1800), t0);            // (b) link-local
  a.on_prefix(prefix("fd81:2::", 64, 0, 0), t0);                // (d) a new prefix with no lifetime
  CHECK(formed(a, t0).empty());
  CHECK(counters.slaac_prefixes_ignored == 0);  // as the RFC says: silently
  a.on_prefix(prefix("fd81:3::", 64, 600, 1800), t0);           // (c) preferred over valid
  a.on_prefix(prefix("fd81:4::", 48, 3600, 1800), t0);          // (d) 48 + 64 bits is not 128
  a.on_prefix(prefix("fd81:5::", 96, 3600, 1800), t0);
  a.on_prefix(prefix("ff0e::", 64, 3600, 1800), t0);            // multicast (Linux ignores it too)
  a.on_prefix(prefix("::ffff:0:0", 64, 3600, 1800), t0);        // ::/8: an address could read as IPv4
  CHECK(formed(a, t0).empty());
  CHECK(counters.slaac_prefixes_ignored == 5);
  // Bounded: a third address does not fit a table of two.
  a.on_prefix(prefix("fd81:6::", 64, 3600, 1800), t0);
  a.on_prefix(prefix("fd81:7::", 64, 3600, 1800), t0);
  a.on_prefix(prefix("fd81:8::", 64, 3600, 1800), t0);
  CHECK(formed(a, t0).size() == 2);
  CHECK(counters.slaac_prefixes_ignored == 6);
  // Once one has expired, its place is free again.
  a.on_prefix(prefix("fd81:6::", 64, 5000, 1800), t0);  // (refreshes fd81:6::, which outlives fd81:7::)
  a.on_prefix(prefix("fd81:8::", 64, 3600, 1800), t0 + seconds(4000));
  CHECK(formed(a, t0 + seconds(4000)) ==
        std::vector<std::string>{"fd81:6::5054:ff:fe12:3456/64", "fd81:8::5054:ff:fe12:3456/64"});

  NetCounters off_counters;
  AddressAutoconf off(mac, off_counters, false);
  off.on_prefix(prefix("fd81:1::", 64, 3600, 1800), t0);
  CHECK(formed(off, t0).empty());
}

// §5.5.3 (e): an advertisement for a prefix that formed an address sets the preferred lifetime as
// advertised, and the valid lifetime only by the two-hours rule, so that a forged advertisement cannot end
// an address at once.
TEST_CASE("SLAAC refreshes an address's lifetimes by the two-hours rule", "[slaac]") {
  NetCounters counters;
  AddressAutoconf a(mac, counters, true);
  const Nanos t0 = seconds(100);
  const auto valid_until = [&] { return a.addresses(t0).at(0).valid_until; };
  a.on_prefix(prefix("fd81:1::", 64, 86400, 14400), t0);  // a day
  // 1. Over two hours, or over what remains: taken as advertised.
  a.on_prefix(prefix("fd81:1::", 64, 3 * 3600, 3600), t0);
  CHECK(valid_until() == t0 + seconds(3 * 3600));
  CHECK(a.addresses(t0).at(0).preferred_until == t0 + seconds(3600));
  a.on_prefix(prefix("fd81:1::", 64, 90000, 3600), t0);
  CHECK(valid_until() == t0 + seconds(90000));
  // 3. Two hours or less, with more than two hours left: cut to two hours, not to what was advertised.
  a.on_prefix(prefix("fd81:1::", 64, 0, 0), t0);
  CHECK(valid_until() == t0 + seconds(7200));
  CHECK(a.addresses(t0).at(0).preferred_until == t0);  // deprecated at once: (e) takes the preferred one
  // 2. Two hours or less left: a short lifetime changes nothing, a longer one than what remains is taken.
  a.on_prefix(prefix("fd81:1::", 64, 60, 0), t0);
  CHECK(valid_until() == t0 + seconds(7200));
  a.on_prefix(prefix("fd81:1::", 64, 7300, 0), t0);
  CHECK(valid_until() == t0 + seconds(7300));
  // An infinite lifetime is over two hours.
  a.on_prefix(prefix("fd81:1::", 64, forever, forever), t0);
  CHECK(valid_until() == never);
  a.on_prefix(prefix("fd81:1::", 64, 600, 600), t0);
  CHECK(valid_until() == t0 + seconds(7200));
  CHECK(counters.slaac_addresses_formed == 1);
}
