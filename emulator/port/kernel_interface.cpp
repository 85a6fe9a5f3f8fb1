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

ifreq request_for(const std::string& interface) {
  ifreq request{};
  std::strncpy(request.ifr_name, interface.c_str(), IFNAMSIZ - 1);
  return request;
}
}  // namespace

std::optional<uint16_t> kernel_mtu(const std::string& interface) {
  ifreq request = request_for(interface);
  if (interface_ioctl(SIOCGIFMTU, request) != 0) return std::nullopt;
  return static_cast<uint16_t>(request.ifr_mtu);
}

void set_kernel_mtu(const std::string& interface, uint16_t mtu) {
  ifreq request = request_for(interface);
  request.ifr_mtu = mtu;
  int rc = interface_ioctl(SIOCSIFMTU, request);
  if (rc != 0)
    throw PortError("cannot set the MTU of " + interface + " to " + std::to_string(mtu) + ": " +
                    std::strerror(-rc));
}

std::optional<bool> kernel_link_up(const std::string& interface) {
  ethtool_value link{};
  link.cmd = ETHTOOL_GLINK;
  ifreq request = request_for(interface);
  request.ifr_data = reinterpret_cast<char*>(&link);
  if (interface_ioctl(SIOCETHTOOL, request) == 0) return link.data != 0;
  request = request_for(interface);
  if (interface_ioctl(SIOCGIFFLAGS, request) != 0) return std::nullopt;
  const unsigned flags = static_cast<unsigned short>(request.ifr_flags);
  return (flags & IFF_UP) != 0 && (flags & IFF_RUNNING) != 0;
}

}  // namespace uroce::emulator::port
