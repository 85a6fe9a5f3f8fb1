// Which uroced binary drives a port: decided from the kernel driver bound to a PCI device in sysfs. The
// tests build a small fake sysfs tree, as the kernel lays it out (devices/<address>/driver -> driver dir).
#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>

#include "emulator/port/pmd_choice.hpp"

namespace fs = std::filesystem;
using namespace uroce::emulator::port;

namespace {

struct FakeSysfs {
  fs::path root = fs::temp_directory_path() / ("uroce-sysfs-" + std::to_string(getpid()));
  FakeSysfs() {
    fs::create_directories(root / "bus/pci/drivers/mlx5_core");
    fs::create_directories(root / "bus/pci/drivers/vfio-pci");
    bind("0000:03:00.0", "mlx5_core");
    bind("0000:04:00.0", "vfio-pci");
    fs::create_directories(root / "bus/pci/devices/0000:05:00.0");  // no driver bound
  }
  ~FakeSysfs() { fs::remove_all(root); }
  void bind(const std::string& address, const std::string& driver) {
    fs::create_directories(root / "bus/pci/devices" / address);
    fs::create_directory_symlink("../../../bus/pci/drivers/" + driver, root / "bus/pci/devices" / address / "driver");
  }
};

}  // namespace

TEST_CASE("pmd choice: the kernel driver bound to a PCI device is read from sysfs", "[pmd-choice]") {
  FakeSysfs sysfs;
  CHECK(pci_kernel_driver("0000:03:00.0", sysfs.root) == "mlx5_core");
  CHECK(pci_kernel_driver("03:00.0", sysfs.root) == "mlx5_core");  // domain 0000 implied
  CHECK(pci_kernel_driver("0000:04:00.0", sysfs.root) == "vfio-pci");
  CHECK(pci_kernel_driver("0000:05:00.0", sysfs.root).empty());
  CHECK(pci_kernel_driver("0000:09:00.0", sysfs.root).empty());  // no such device
  CHECK(pci_kernel_driver("net_af_packet0", sysfs.root).empty());
}

TEST_CASE("pmd choice: only mlx4/mlx5 devices need the build with every driver", "[pmd-choice]") {
  FakeSysfs sysfs;
  CHECK(needs_verbs_based_driver("0000:03:00.0", sysfs.root));
  CHECK(needs_verbs_based_driver("03:00.0,dv_flow_en=0", sysfs.root));
  CHECK_FALSE(needs_verbs_based_driver("0000:04:00.0", sysfs.root));
  CHECK_FALSE(needs_verbs_based_driver("net_af_packet0,iface=veth0", sysfs.root));
  CHECK_FALSE(needs_verbs_based_driver("", sysfs.root));
}
