#include "transport/sim/pcap_writer.hpp"

#include <pcap/pcap.h>

#include <stdexcept>

namespace uroce::sim {

namespace {
// Jumbo frames plus headroom; RoCEv2 frames never get near it.
constexpr int snaplen = 65535;
}  // namespace

PcapWriter::PcapWriter(const std::string& path) {
  pcap_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, snaplen, PCAP_TSTAMP_PRECISION_NANO);
  if (!pcap_) throw std::runtime_error("pcap_open_dead failed");
  dumper_ = pcap_dump_open(pcap_, path.c_str());
  if (!dumper_) {
    const std::string why = pcap_geterr(pcap_);
    pcap_close(pcap_);
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
}

PcapWriter::~PcapWriter() {
  pcap_dump_close(dumper_);
  pcap_close(pcap_);
}

void PcapWriter::write(Nanos time, std::span<const uint8_t> frame) {
  pcap_pkthdr h{};
  h.ts.tv_sec = time_t(time / 1'000'000'000);
  h.ts.tv_usec = suseconds_t(time % 1'000'000'000);  // nanoseconds: the handle was opened with nano precision
  h.caplen = h.len = bpf_u_int32(frame.size());
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &h, frame.data());
  ++frames_;
}

void PcapWriter::flush() { pcap_dump_flush(dumper_); }

CaptureHook PcapWriter::hook(std::initializer_list<CapturePoint> points) {
  unsigned mask = 0;
  for (CapturePoint p : points) mask |= 1u << unsigned(p);
  return [this, mask](const CaptureEvent& e) {
    if ((mask & (1u << unsigned(e.point))) && !e.frame.empty()) write(e.time, e.frame);
  };
}

}  // namespace uroce::sim
