#include "emulator/port/kernel_interface.hpp"

#include "emulator/port/dpdk_port.hpp"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace uroce::emulator::port {
namespace {
// An interface ioctl on a throwaway datagram socket; -errno on failure.
int interface_ioctl(unsigned long request, ifreq& request_data) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int rc = ioctl(fd, request, &request_data);
  int error = rc < 0 ? -errno : 0;
  close(fd);
  return error;
}

// A request naming `interface`, or nullopt if no interface can have that name: the kernel's names are
// 1 to IFNAMSIZ - 1 bytes without a NUL, and a longer one cut to fit (or one cut short by a NUL) could name
// some other interface.
std::optional<ifreq> request_for(const std::string& interface) {
  if (interface.empty() || interface.size() >= IFNAMSIZ || interface.find('\0') != std::string::npos)
    return std::nullopt;
  ifreq request{};
  std::memcpy(request.ifr_name, interface.data(), interface.size());
  return request;
}
}  // namespace

std::optional<uint16_t> kernel_mtu(const std::string& interface) {
  auto request = request_for(interface);
  if (!request || interface_ioctl(SIOCGIFMTU, *request) != 0) return std::nullopt;
  return static_cast<uint16_t>(request->ifr_mtu);
}

void set_kernel_mtu(const std::string& interface, uint16_t mtu) {
  auto request = request_for(interface);
  if (!request) throw PortError("cannot set the MTU of \"" + interface + "\": not an interface name");
  request->ifr_mtu = mtu;
  int rc = interface_ioctl(SIOCSIFMTU, *request);
  if (rc != 0)
    throw PortError("cannot set the MTU of " + interface + " to " + std::to_string(mtu) + ": " +
                    std::strerror(-rc));
}

std::optional<bool> kernel_link_up(const std::string& interface) {
  auto request = request_for(interface);
  if (!request) return std::nullopt;
  ethtool_value link{};
  link.cmd = ETHTOOL_GLINK;
  request->ifr_data = reinterpret_cast<char*>(&link);
  if (interface_ioctl(SIOCETHTOOL, *request) == 0) return link.data != 0;
  request = request_for(interface);
  if (interface_ioctl(SIOCGIFFLAGS, *request) != 0) return std::nullopt;
  const unsigned flags = static_cast<unsigned short>(request->ifr_flags);
  return (flags & IFF_UP) != 0 && (flags & IFF_RUNNING) != 0;
}

}  // namespace uroce::emulator::port
