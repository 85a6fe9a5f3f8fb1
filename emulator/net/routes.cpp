#include "emulator/net/routes.hpp"

#include <charconv>
#include <stdexcept>

namespace uroce::emulator::net {

namespace {

unsigned width(const wire::IpAddress& a) { return a.is_v4() ? 32 : 128; }

bool is_link_local_v6(const wire::IpAddress& a) {
  return !a.is_v4() && a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80;
}

}  // namespace

bool Subnet::contains(const wire::IpAddress& a) const {
  if (a.is_v4() != address.is_v4()) return false;
  // IPv4 lives in the last 32 bits of the v4-mapped form.
  const unsigned first = address.is_v4() ? 96 : 0;
  const unsigned bits = prefix_length;
  const unsigned whole = bits / 8;
  for (unsigned i = 0; i < whole; ++i) {
    if (a.bytes[first / 8 + i] != address.bytes[first / 8 + i]) return false;
  }
  if (const unsigned rest = bits % 8; rest != 0) {
    const uint8_t mask = uint8_t(0xff << (8 - rest));
    if ((a.bytes[first / 8 + whole] & mask) != (address.bytes[first / 8 + whole] & mask)) return false;
  }
  return true;
}

Routes::Routes(std::vector<Subnet> subnets, std::vector<wire::IpAddress> gateways) : subnets_(std::move(subnets)) {
  for (const Subnet& s : subnets_) {
    if (s.prefix_length > width(s.address)) throw std::invalid_argument(to_string(s) + ": prefix too long");
    (s.address.is_v4() ? any_v4_ : any_v6_) = true;
  }
  for (const wire::IpAddress& g : gateways) {
    const bool v4 = g.is_v4();
    const std::string text = wire::to_string(g);
    if (!(v4 ? any_v4_ : any_v6_)) throw std::invalid_argument("gateway " + text + ": the port has no address of its family");
    if ((v4 ? gateway_v4_ : gateway_v6_).has_value()) throw std::invalid_argument("gateway " + text + ": one gateway per family");
    if (g.is_multicast()) throw std::invalid_argument("gateway " + text + ": not a unicast address");
    if (!on_link(g)) throw std::invalid_argument("gateway " + text + ": not in any of the port's subnets");
    (v4 ? gateway_v4_ : gateway_v6_) = g;
  }
}

bool Routes::on_link(const wire::IpAddress& dst) const {
  if (dst.is_v4() ? !any_v4_ : !any_v6_) return true;
  if (is_link_local_v6(dst)) return true;
  for (const Subnet& s : subnets_) {
    if (s.contains(dst)) return true;
  }
  return false;
}

std::optional<Subnet> parse_subnet(const std::string& text) {
  const size_t slash = text.find('/');
  const auto ip = wire::parse_ip(std::string_view(text).substr(0, slash));
  if (!ip) return std::nullopt;
  Subnet s{*ip, 0};
  if (slash == std::string::npos) return s;
  const char* begin = text.data() + slash + 1;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(begin, end, s.prefix_length);
  if (ec != std::errc() || p != end || begin == end || s.prefix_length > width(*ip)) return std::nullopt;
  return s;
}

std::string to_string(const Subnet& s) { return wire::to_string(s.address) + "/" + std::to_string(s.prefix_length); }

}  // namespace uroce::emulator::net
