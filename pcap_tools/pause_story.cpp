#include "pcap_tools/pause_story.hpp"

#include <fmt/format.h>

#include "pcap_tools/story_line.hpp"

namespace uroce::pcap_tools {

namespace {

using namespace uroce::wire;

bool same(const MacControl& a, const MacControl& b) {
  return a.opcode == b.opcode && a.pause_quanta == b.pause_quanta && a.enabled == b.enabled && a.quanta == b.quanta;
}

// A quantum is 512 bit times, so a pause's length depends on the link; a capture does not say its speed.
std::string duration(uint16_t quanta) {
  auto at = [&](uint64_t bps) {
    const double ns = double(pause_nanoseconds(quanta, bps));
    if (ns >= 1e6) return fmt::format("{:.3g} ms", ns / 1e6);
    return ns >= 1e3 ? fmt::format("{:.3g} µs", ns / 1e3) : fmt::format("{:.3g} ns", ns);
  };
  return fmt::format("{} quanta: {} at 10 Gb/s, {} at 100 Gb/s", quanta, at(10'000'000'000), at(100'000'000'000));
}

std::string sentence(const MacControl& m, const std::string& sender) {
  if (m.is_pause()) {
    if (m.pause_quanta == 0) return fmt::format("PAUSE from {}: its link partner may send again (XON)", sender);
    return fmt::format("PAUSE from {}: its link partner must stop sending everything for {} (802.3x: the whole "
                       "link, RoCE and all)", sender, duration(m.pause_quanta));
  }
  if (!m.is_pfc()) return fmt::format("MAC Control opcode 0x{:04x} from {} (neither PAUSE nor PFC)", m.opcode, sender);
  bool pauses = false;
  for (unsigned i = 0; i < 8; ++i) pauses |= (m.enabled >> i & 1) != 0 && m.quanta[i] != 0;
  return fmt::format("PFC from {}: {} ({})", sender, describe_pause(m),
                     pauses ? "its link partner holds those priorities' frames meanwhile; RoCE on a lossless fabric "
                              "runs on one, so its packets wait instead of being dropped"
                            : "XON: the held frames may go at once");
}

}  // namespace

std::string describe_pause(const MacControl& m) {
  if (m.is_pause()) return m.pause_quanta == 0 ? "resume every priority" : "pause every priority for " + duration(m.pause_quanta);
  if (!m.is_pfc()) return fmt::format("opcode 0x{:04x}", m.opcode);
  std::string s;
  for (unsigned i = 0; i < 8; ++i) {
    if ((m.enabled >> i & 1) == 0) continue;
    if (!s.empty()) s += "; ";
    s += m.quanta[i] == 0 ? fmt::format("resume priority {}", i)
                          : fmt::format("pause priority {} for {}", i, duration(m.quanta[i]));
  }
  return s.empty() ? "no priority enabled (the frame asks nothing)" : s;
}

void PauseStory::add(const Record& r, const Frame& f, std::vector<std::string>& lines) {
  const MacControl& m = f.mac_control;
  const std::string sender = to_string(f.eth.src);
  auto it = runs_.find(sender);
  if (it != runs_.end() && same(it->second.frame, m)) {
    Run& run = it->second;
    run.last = r.number;
    ++run.count;
    lines[run.line] = story_line(run.first, run.last, "",
                                 fmt::format("{} ({} alike)", sentence(m, sender), run.count));
  } else {
    runs_[sender] = Run{m, r.number, r.number, 1, lines.size()};
    lines.push_back(story_line(r.number, r.number, "", sentence(m, sender)));
  }
  auto count = [&](unsigned priority, uint16_t quanta) {
    Totals& t = per_priority_[{sender, priority}];
    (quanta == 0 ? t.resumes : t.pauses) += 1;
    t.quanta += quanta;
  };
  if (m.is_pause()) count(8, m.pause_quanta);
  if (m.is_pfc()) {
    for (unsigned i = 0; i < 8; ++i) {
      if ((m.enabled >> i & 1) != 0) count(i, m.quanta[i]);
    }
  }
}

std::string PauseStory::table() const {
  std::string out = fmt::format("{:<20}{:<10}{:>8}{:>9}{:>14}\n", "sender", "priority", "pauses", "resumes",
                                "quanta");
  for (const auto& [key, t] : per_priority_) {
    out += fmt::format("{:<20}{:<10}{:>8}{:>9}{:>14}\n", key.first, key.second == 8 ? "all" : std::to_string(key.second),
                       t.pauses, t.resumes, t.quanta);
  }
  return out;
}

}  // namespace uroce::pcap_tools
