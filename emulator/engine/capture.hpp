// `uroced --capture FILE.pcap`: every frame the port sends and receives, written with libpcap as the
// engine handles it (Ethernet link type, nanosecond timestamps), so that `uroce dissect`, tshark and
// Wireshark read it. Flushed at least once a second and at shutdown, so a capture of a running daemon is
// usable as it grows.
#pragma once

#include <cstdint>
#include <span>
#include <string>

struct pcap;
struct pcap_dumper;

namespace uroce::emulator::engine {

class Capture {
 public:
  // Throws std::runtime_error with libpcap's reason when the file cannot be created.
  explicit Capture(const std::string& path);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // `realtime_ns`: wall-clock time of the frame (CLOCK_REALTIME nanoseconds).
  void write(std::span<const uint8_t> frame, uint64_t realtime_ns);
  void flush();
  uint64_t frames() const { return frames_; }

 private:
  pcap* handle_ = nullptr;
  pcap_dumper* dumper_ = nullptr;
  uint64_t frames_ = 0;
  uint64_t last_flush_ns_ = 0;
};

}  // namespace uroce::emulator::engine
