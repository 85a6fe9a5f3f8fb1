#include "emulator/port/devargs.hpp"

#include <catch2/catch.hpp>

using namespace uroce::emulator::port;

TEST_CASE("Device names and PCI addresses are read from devargs") {
  CHECK(device_name("net_af_packet0,iface=veth0") == "net_af_packet0");
  CHECK(device_name("net_ring0") == "net_ring0");
  CHECK(is_pci_address("0000:03:00.0"));
  CHECK(is_pci_address("03:00.1"));
  CHECK_FALSE(is_pci_address("net_memif0"));
  CHECK_FALSE(is_pci_address("0000:03:00"));
  CHECK(has_key("net_af_packet0,iface=x,framesz=4096", "framesz"));
  CHECK_FALSE(has_key("net_af_packet0,iface=framesz", "framesz"));
  CHECK(value_of("net_af_packet0,iface=veth0,qpairs=1", "iface") == "veth0");
  CHECK_FALSE(value_of("net_af_packet0", "iface").has_value());
}

TEST_CASE("af_packet gets ring slots for jumbo frames unless devargs set them") {
  CHECK(with_frame_size_settings("net_af_packet0,iface=v", 9216) ==
        "net_af_packet0,iface=v,framesz=9216,blocksz=36864");
  CHECK(with_frame_size_settings("net_af_packet0,iface=v", 4096) ==
        "net_af_packet0,iface=v,framesz=4096,blocksz=4096");
  CHECK(with_frame_size_settings("net_af_packet0,iface=v,framesz=4096", 9216) ==
        "net_af_packet0,iface=v,framesz=4096");
  CHECK(with_frame_size_settings("net_af_packet0,iface=v", 1518) == "net_af_packet0,iface=v");
  CHECK(with_frame_size_settings("net_memif0,role=server", 9216) == "net_memif0,role=server");
}
