#include "emulator/engine/capture.hpp"

#include <pcap/pcap.h>

#include <stdexcept>

namespace uroce::emulator::engine {

Capture::Capture(const std::string& path) {
  handle_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, 65535, PCAP_TSTAMP_PRECISION_NANO);
  if (handle_ == nullptr) throw std::runtime_error("pcap_open_dead failed");
  dumper_ = pcap_dump_open(handle_, path.c_str());
  if (dumper_ == nullptr) {
    const std::string why = pcap_geterr(handle_);
    pcap_close(handle_);
    throw std::runtime_error("cannot write capture " + path + ": " + why);
  }
}

Capture::~Capture() {
  if (dumper_ != nullptr) pcap_dump_close(dumper_);
  if (handle_ != nullptr) pcap_close(handle_);
}

void Capture::write(std::span<const uint8_t> frame, uint64_t realtime_ns) {
  pcap_pkthdr h{};
  h.ts.tv_sec = time_t(realtime_ns / 1'000'000'000);
  h.ts.tv_usec = suseconds_t(realtime_ns % 1'000'000'000);  // nanoseconds: the file says so
  h.caplen = h.len = uint32_t(frame.size());
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &h, frame.data());
  ++frames_;
  if (realtime_ns - last_flush_ns_ > 1'000'000'000) flush(), last_flush_ns_ = realtime_ns;
}

void Capture::flush() { pcap_dump_flush(dumper_); }

}  // namespace uroce::emulator::engine
