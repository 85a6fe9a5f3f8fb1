#include "emulator/port/devargs.hpp"

#include <cctype>
#include <numeric>

namespace uroce::emulator::port {
namespace {
// af_packet's rx queue needs each ring slot's data (framesz - 32: tpacket2_hdr, less the sockaddr_ll it
// counts as data) to fit into one mbuf. The PMD also assumes slots lie back to back (slot i at
// i * framesz), which holds only if blocksz is a multiple of framesz; blocksz must be a multiple of the
// page size. So framesz is max_frame + 32 rounded down to 1 KiB, and blocksz the smallest multiple of it
// that is a page multiple (at most 4 slots).
constexpr uint32_t kTpacketDataOffset = 32;
constexpr uint32_t kSlotGranule = 1024;
constexpr uint32_t kDefaultSlot = 2048;  // the PMD's default framesz
constexpr uint32_t kPageSize = 4096;
bool all_hex(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}
}  // namespace

std::string_view device_name(std::string_view devargs) { return devargs.substr(0, devargs.find(',')); }

bool is_pci_address(std::string_view name) {
  // [dddd:]bb:dd.f
  auto dot = name.rfind('.');
  if (dot == std::string_view::npos || dot + 2 != name.size() || !all_hex(name.substr(dot + 1))) return false;
  auto head = name.substr(0, dot);
  auto colon = head.rfind(':');
  if (colon == std::string_view::npos || head.size() - colon - 1 != 2 || !all_hex(head.substr(colon + 1)))
    return false;
  auto bus_part = head.substr(0, colon);
  auto domain_colon = bus_part.find(':');
  if (domain_colon == std::string_view::npos) return bus_part.size() == 2 && all_hex(bus_part);
  return domain_colon == 4 && all_hex(bus_part.substr(0, 4)) && bus_part.size() == 7 &&
         all_hex(bus_part.substr(5));
}

std::optional<std::string> value_of(std::string_view devargs, std::string_view key) {
  size_t at = devargs.find(',');
  while (at != std::string_view::npos) {
    auto item = devargs.substr(at + 1);
    item = item.substr(0, item.find(','));
    auto equals = item.find('=');
    if (item.substr(0, equals) == key)
      return std::string(equals == std::string_view::npos ? std::string_view{} : item.substr(equals + 1));
    at = devargs.find(',', at + 1);
  }
  return std::nullopt;
}

bool has_key(std::string_view devargs, std::string_view key) { return value_of(devargs, key).has_value(); }

std::string with_frame_size_settings(std::string_view devargs, uint32_t max_frame) {
  std::string result(devargs);
  if (!device_name(devargs).starts_with("net_af_packet")) return result;
  if (has_key(devargs, "framesz") || has_key(devargs, "blocksz")) return result;  // the user's choice
  uint32_t frame = (max_frame + kTpacketDataOffset) / kSlotGranule * kSlotGranule;
  if (frame <= kDefaultSlot) return result;
  uint32_t block = frame * (kPageSize / std::gcd(frame, kPageSize));
  result += ",framesz=" + std::to_string(frame) + ",blocksz=" + std::to_string(block);
  return result;
}

}  // namespace uroce::emulator::port
