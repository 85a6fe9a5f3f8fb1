// Which uroced binary can drive a port (emulator/dpdk.cmake): `uroced` has its drivers linked in, all but
// the ones that reach their NIC through libibverbs; `uroced-all-pmds` loads every driver Debian ships.
#pragma once

#include <string>
#include <string_view>

namespace uroce::emulator::port {

// The kernel driver bound to a PCI device ("mlx5_core", "vfio-pci"), read from
// <sysfs>/bus/pci/devices/<address>/driver; empty when there is none or the device does not exist.
// A short address ("03:00.0") means domain 0000.
std::string pci_kernel_driver(std::string_view pci_address, const std::string& sysfs = "/sys");

// Whether the device in `devargs` is a NIC that DPDK drives through libibverbs: a PCI device bound to
// mlx4_core or mlx5_core. Those drivers are bifurcated (the kernel driver stays bound and DPDK talks to the
// NIC through rdma-core), so they exist only in uroced-all-pmds, which loads the real libibverbs with them.
bool needs_verbs_based_driver(std::string_view devargs, const std::string& sysfs = "/sys");

}  // namespace uroce::emulator::port
