// Device argument strings ("net_af_packet0,iface=veth0", "0000:03:00.0,...") as the daemon reads them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace uroce::emulator::port {

// The device name: everything before the first comma ("net_af_packet0", "0000:03:00.0").
std::string_view device_name(std::string_view devargs);
// A PCI address, with or without the domain ("0000:03:00.0", "03:00.0").
bool is_pci_address(std::string_view name);
// Whether devargs names a key ("framesz" in "net_af_packet0,iface=x,framesz=4096"), and its value.
bool has_key(std::string_view devargs, std::string_view key);
std::optional<std::string> value_of(std::string_view devargs, std::string_view key);

// af_packet copies frames through a kernel PACKET_MMAP ring whose slots default to 2048 bytes: a larger
// frame is dropped on transmit and cut on receive. This sizes the slots (framesz) for mbufs of
// `max_frame` bytes (the PMD insists a slot's data fits into one mbuf, and that slots are contiguous, so
// blocksz is a multiple of framesz) unless devargs sets either; other devargs are returned unchanged.
// With 9216: framesz=9216,blocksz=36864; frames up to 9150 bytes are received (the kernel writes a frame
// 66 bytes into its slot) and 9184 sent. The kernel interface's MTU still decides what the kernel passes.
std::string with_frame_size_settings(std::string_view devargs, uint32_t max_frame);

}  // namespace uroce::emulator::port
