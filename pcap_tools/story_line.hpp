// One line of `uroce explain`'s story: the frames it speaks for, the flow's letter (or blank), the text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace uroce::pcap_tools {

inline std::string story_line(uint64_t first, uint64_t last, std::string_view flow, std::string_view text) {
  const std::string frames = first == last ? fmt::format("#{}", first) : fmt::format("#{}-{}", first, last);
  return fmt::format("{:>11}  {:<2} {}", frames, flow, text);
}

}  // namespace uroce::pcap_tools
