#include "emulator/daemon/local_port_range.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <charconv>
#include <fstream>
#include <iterator>

namespace uroce::emulator {
namespace {

std::optional<uint32_t> next_number(std::string_view& text) {
  const size_t start = text.find_first_not_of(" \t\n");
  if (start == std::string_view::npos) return std::nullopt;
  text.remove_prefix(start);
  uint32_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  text.remove_prefix(size_t(end - text.data()));
  return value;
}

}  // namespace

std::optional<PortRange> parse_port_range(std::string_view text) {
  const auto low = next_number(text), high = next_number(text);
  if (!low || !high || text.find_first_not_of(" \t\n") != std::string_view::npos) return std::nullopt;
  if (*low < 1 || *low > *high || *high > 65535) return std::nullopt;
  return PortRange{uint16_t(*low), uint16_t(*high)};
}

PortRange read_port_range(const std::string& file) {
  std::ifstream in(file);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const auto range = parse_port_range(text)) return *range;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    spdlog::warn("rdma_cm: cannot read the ephemeral port range from {}; using 32768-60999", file);
  }
  return PortRange{};
}

}  // namespace uroce::emulator
