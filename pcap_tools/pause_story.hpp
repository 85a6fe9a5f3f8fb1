// PFC and PAUSE frames in `uroce explain`: what a link-level pause means for the RoCE traffic beside it.
// A run of identical frames from one sender (a switch refreshing a pause every few microseconds, or a
// PFC storm) is one line that grows, "#first-last ... N alike", written where the run began; a sender's
// next different frame starts a new line. The closing table counts, per sender and priority, pauses,
// resumes and the quanta asked for.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pcap_tools/capture_reader.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

class PauseStory {
 public:
  // Tells the story of a MAC Control frame (f.kind == mac_control, parsed) into `lines`.
  void add(const Record& record, const wire::Frame& f, std::vector<std::string>& lines);
  bool empty() const { return per_priority_.empty(); }
  std::string table() const;

 private:
  struct Run {
    wire::MacControl frame;
    uint64_t first = 0, last = 0, count = 0;
    size_t line = 0;  // index in the story's lines
  };
  struct Totals {
    uint64_t pauses = 0, resumes = 0, quanta = 0;
  };
  // Per sender (MAC, as text): its current run; and per (sender, priority; 8 = PAUSE, every priority).
  std::map<std::string, Run> runs_;
  std::map<std::pair<std::string, unsigned>, Totals> per_priority_;
};

// "pause priority 3 for 65535 quanta (3.36 ms at 10 Gb/s, 336 µs at 100 Gb/s)", "resume priority 4", ...:
// what the frame asks, for people reading a capture (explain) and a one-line summary.
std::string describe_pause(const wire::MacControl& m);

}  // namespace uroce::pcap_tools
