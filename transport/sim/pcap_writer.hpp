// A pcap file of simulated frames (DLT_EN10MB, nanosecond timestamps = virtual time since 0).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "transport/sim/capture.hpp"

struct pcap;
struct pcap_dumper;

namespace uroce::sim {

class PcapWriter {
 public:
  explicit PcapWriter(const std::string& path);  // throws std::runtime_error when the file cannot be made
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  void write(Nanos time, std::span<const uint8_t> frame);
  void flush();
  uint64_t frames_written() const { return frames_; }

  // A hook for SimNetwork::set_capture that writes the events of the given points. Delivered frames
  // alone read like a capture at the receivers; adding `transmitted` shows what was lost, at the cost of
  // every delivered frame appearing twice. The writer must outlive the hook.
  CaptureHook hook(std::initializer_list<CapturePoint> points = {CapturePoint::delivered});

 private:
  struct pcap* pcap_ = nullptr;
  struct pcap_dumper* dumper_ = nullptr;
  uint64_t frames_ = 0;
};

}  // namespace uroce::sim
