// The ports made of rte_rings in this process: the NIC's own loopback and a back-to-back cable.
#include "emulator/port/dpdk_port.hpp"
#include "emulator/port/mbuf_pool.hpp"

#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>

namespace uroce::emulator::port {
namespace {
// Slots per ring: as many as a port's rx descriptors, so a full burst train fits.
constexpr uint32_t kRingSize = 1024;

// The ring PMD finds its driver by the device name's prefix, so ring ports are named net_ring_<name>.
std::string ring_device_name(const std::string& name) {
  return name.starts_with("net_ring") ? name : "net_ring_" + name;
}

uint16_t make_ring_device(const std::string& device, rte_ring* rx, rte_ring* tx) {
  int port_id = rte_eth_from_rings(device.c_str(), &rx, 1, &tx, 1, static_cast<unsigned>(rte_socket_id()));
  if (port_id < 0) throw PortError("cannot create ring port " + device + ": " + rte_strerror(rte_errno));
  return static_cast<uint16_t>(port_id);
}
}  // namespace

std::unique_ptr<DpdkPort> DpdkPort::loopback(const std::string& name, const PortOptions& options) {
  int socket = static_cast<int>(rte_socket_id());
  auto pool = make_frame_pool(options.mbufs, options.max_frame, socket);
  auto ring = make_frame_ring(kRingSize, socket, pool);
  std::string device = ring_device_name(name);
  uint16_t port_id = make_ring_device(device, ring.get(), ring.get());
  std::unique_ptr<DpdkPort> port(new DpdkPort(device, port_id, pool, {ring}, options.max_frame));
  port->start(options);
  return port;
}

std::pair<std::unique_ptr<DpdkPort>, std::unique_ptr<DpdkPort>> DpdkPort::cable(const std::string& name_a,
                                                                                 const std::string& name_b,
                                                                                 const PortOptions& options) {
  int socket = static_cast<int>(rte_socket_id());
  auto pool = make_frame_pool(options.mbufs * 2, options.max_frame, socket);  // one pool for both ends
  auto a_to_b = make_frame_ring(kRingSize, socket, pool);
  auto b_to_a = make_frame_ring(kRingSize, socket, pool);
  std::string device_a = ring_device_name(name_a), device_b = ring_device_name(name_b);
  uint16_t id_a = make_ring_device(device_a, b_to_a.get(), a_to_b.get());
  std::unique_ptr<DpdkPort> a(new DpdkPort(device_a, id_a, pool, {a_to_b, b_to_a}, options.max_frame));
  uint16_t id_b = make_ring_device(device_b, a_to_b.get(), b_to_a.get());
  std::unique_ptr<DpdkPort> b(new DpdkPort(device_b, id_b, pool, {a_to_b, b_to_a}, options.max_frame));
  a->start(options);
  b->start(options);
  return {std::move(a), std::move(b)};
}

}  // namespace uroce::emulator::port
