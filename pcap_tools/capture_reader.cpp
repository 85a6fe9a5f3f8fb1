#include "pcap_tools/capture_reader.hpp"

#include <spdlog/spdlog.h>

#include "pcap_tools/mirror_copies.hpp"
#include "transport/wire/bytes.hpp"

namespace uroce::pcap_tools {

namespace {
// Link-layer header types (LINKTYPE_* values as they appear in files; libpcap maps them to DLT_*).
constexpr int dlt_ipv4 = 228;
constexpr int dlt_ipv6 = 229;
constexpr int dlt_linux_sll2 = 276;
constexpr size_t sll_header_size = 16;
constexpr size_t sll2_header_size = 20;
}  // namespace

bool CaptureReader::link_type_supported(int dlt) {
  switch (dlt) {
    case DLT_EN10MB:
    case DLT_RAW:
    case dlt_ipv4:
    case dlt_ipv6:
    case DLT_LINUX_SLL:
    case dlt_linux_sll2:
      return true;
    default:
      return false;
  }
}

bool CaptureReader::open(const std::string& path) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (p == nullptr) {
    // libpcap names the file itself when it cannot open it ("PATH: No such file or directory"); the
    // callers put the path in front of every error already.
    std::string_view message = errbuf;
    if (message.starts_with(path + ": ")) message.remove_prefix(path.size() + 2);
    error_ = message;
    return false;
  }
  handle_.reset(p);
  link_type_ = pcap_datalink(p);
  if (!link_type_supported(link_type_)) {
    error_ = "unsupported link type " + link_type_name() + " (uroce reads Ethernet, raw IP and Linux cooked captures)";
    handle_.reset();
    return false;
  }
  count_ = 0;
  return true;
}

std::string CaptureReader::link_type_name() const {
  const char* name = pcap_datalink_val_to_name(link_type_);
  return name ? std::string(name) : "DLT " + std::to_string(link_type_);
}

CaptureReader::Next CaptureReader::next(Record& out) {
  if (!handle_) {
    error_ = "no capture open";
    return Next::error;
  }
  pcap_pkthdr* header = nullptr;
  const u_char* data = nullptr;
  const int rc = pcap_next_ex(handle_.get(), &header, &data);
  if (rc == PCAP_ERROR_BREAK) return Next::end;
  if (rc != 1) {
    error_ = pcap_geterr(handle_.get());
    return Next::error;
  }
  out.number = ++count_;
  out.time_ns = int64_t(header->ts.tv_sec) * 1'000'000'000 + int64_t(header->ts.tv_usec);  // nano precision
  out.wire_length = header->len;
  out.bytes = std::span<const uint8_t>(data, header->caplen);
  return Next::record;
}

namespace {

// The IP packet `b` (raw IP captures, ERSPAN type III's IP frames), by its version nibble.
wire::ParseError parse_ip(std::span<const uint8_t> b, wire::Frame& frame) {
  const uint16_t ethertype = (!b.empty() && b[0] >> 4 == 6) ? wire::ethertype_ipv6 : wire::ethertype_ipv4;
  return wire::parse_l3(ethertype, b, frame);
}

}  // namespace

wire::ParseError look_through_tunnel(Record& r, wire::Frame& frame) {
  r.tunnels.clear();
  wire::ParseError result = frame.error;
  size_t base = 0;  // where `frame`'s bytes start in the record's
  while (r.tunnels.size() < max_tunnel_depth) {
    std::optional<Tunnel> t = find_tunnel(frame, r.truncated_by_snaplen());
    if (!t) break;
    t->inner_offset += base;
    t->inner_end += base;
    base = t->inner_offset;
    r.tunnels.push_back(*t);
    // Offsets the inner frame reports (a malformed header's byte) are from the start of the inner frame.
    const auto inner = r.bytes.subspan(t->inner_offset, t->inner_end - t->inner_offset);
    result = t->inner_is_ip ? parse_ip(inner, frame) : wire::parse_frame(inner, frame);
  }
  return result;
}

wire::ParseError CaptureReader::decode(Record& r, wire::Frame& frame) const {
  r.tunnels.clear();
  decode_outer(r, frame);
  return look_through_tunnel(r, frame);
}

wire::ParseError CaptureReader::decode_outer(const Record& r, wire::Frame& frame) const {
  const auto b = r.bytes;
  switch (link_type_) {
    case DLT_EN10MB:
      return wire::parse_frame(b, frame);
    case DLT_RAW:
    case dlt_ipv4:
    case dlt_ipv6:
      return parse_ip(b, frame);
    case DLT_LINUX_SLL:
    case dlt_linux_sll2: {
      const bool v2 = link_type_ == dlt_linux_sll2;
      const size_t hdr = v2 ? sll2_header_size : sll_header_size;
      if (b.size() < hdr) {
        wire::parse_l3(0, {}, frame);
        frame.error = wire::ParseError::truncated_ethernet;
        return frame.error;
      }
      const uint16_t ethertype = wire::load_be16(b.data() + (v2 ? 0 : 14));
      // Offsets reported for the frame are relative to the L3 header in this case.
      return wire::parse_l3(ethertype, b.subspan(hdr), frame);
    }
    default:
      return wire::parse_frame(b, frame);
  }
}

ReadResult read_capture(const std::string& path,
                        const std::function<bool(const Record&, const wire::Frame&)>& visit) {
  ReadResult result;
  CaptureReader reader;
  if (!reader.open(path)) {
    result.outcome = ReadResult::Outcome::unreadable;
    result.error = reader.error();
    return result;
  }
  Record record;
  wire::Frame frame;
  MirrorCopies copies;
  CaptureReader::Next status;
  while ((status = reader.next(record)) == CaptureReader::Next::record) {
    reader.decode(record, frame);
    record.copy_of = copies.copy_of(record, frame);
    ++result.records;
    if (record.copy_of != 0) ++result.mirror_copies;
    if (!visit(record, frame)) return result;
  }
  if (status == CaptureReader::Next::error) {
    result.outcome = ReadResult::Outcome::damaged;
    result.error = reader.error();
  }
  return result;
}

int ReadResult::report(const std::string& path) const {
  switch (outcome) {
    case Outcome::complete:
      return 0;
    case Outcome::unreadable:
      spdlog::error("{}: {}", path, error);
      return 2;
    case Outcome::damaged:
      spdlog::error("{}: damaged capture after frame {}: {}", path, records, error);
      return 2;
  }
  return 2;
}

}  // namespace uroce::pcap_tools
