#include "emulator/port/pmd_choice.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "emulator/port/devargs.hpp"

namespace uroce::emulator::port {

std::string pci_kernel_driver(std::string_view pci_address, const std::string& sysfs) {
  if (!is_pci_address(pci_address)) return {};
  std::string address(pci_address);
  if (std::count(address.begin(), address.end(), ':') == 1) address = "0000:" + address;
  std::error_code ec;
  const auto target = std::filesystem::read_symlink(sysfs + "/bus/pci/devices/" + address + "/driver", ec);
  return ec ? std::string() : target.filename().string();
}

bool needs_verbs_based_driver(std::string_view devargs, const std::string& sysfs) {
  const std::string driver = pci_kernel_driver(device_name(devargs), sysfs);
  return driver == "mlx5_core" || driver == "mlx4_core";
}

}  // namespace uroce::emulator::port
