#include "veth_pair.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace uroce::emulator::port::test {
namespace {
// Runs a command quietly; its output would only clutter the test log.
bool run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }
}  // namespace

VethPair::VethPair(const std::string& tag, unsigned mtu) {
  std::string base = "urt" + std::to_string(getpid()) + tag;  // <= 15 characters for IFNAMSIZ
  a_ = base + "a";
  b_ = base + "b";
  if (!run("ip link add " + a_ + " mtu " + std::to_string(mtu) + " type veth peer name " + b_ + " mtu " +
           std::to_string(mtu)))
    throw std::runtime_error("cannot create veth pair " + a_ + "/" + b_);
  // No IPv6 on them: the kernel would otherwise send neighbour discovery onto the test's wire.
  run("sysctl -w net.ipv6.conf." + a_ + ".disable_ipv6=1");
  run("sysctl -w net.ipv6.conf." + b_ + ".disable_ipv6=1");
  if (!run("ip link set " + a_ + " up") || !run("ip link set " + b_ + " up")) {
    run("ip link del " + a_);
    throw std::runtime_error("cannot bring up veth pair " + a_ + "/" + b_);
  }
}

VethPair::~VethPair() { run("ip link del " + a_); }

bool can_create_interfaces() { return geteuid() == 0 && run("command -v ip"); }

}  // namespace uroce::emulator::port::test
