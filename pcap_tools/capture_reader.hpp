// Reads captures (pcap and pcapng, from a file or "-" for stdin) through libpcap, and turns each record
// into a parsed frame whatever the capture's link type.
#pragma once

#include <pcap/pcap.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "pcap_tools/tunnel.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

struct Record {
  uint64_t number = 0;           // 1-based, as tshark counts
  int64_t time_ns = 0;           // capture timestamp, nanoseconds since the epoch
  uint32_t wire_length = 0;      // length of the packet on the wire
  std::span<const uint8_t> bytes;  // what was captured (wire_length may be larger: snaplen)
  // Set by CaptureReader::decode when the record is a mirrored or tunnelled frame (tunnel.hpp): how it
  // came, the outermost tunnel first (an ERSPAN mirror of an overlay's VXLAN traffic: ERSPAN, then VXLAN),
  // each one's offsets in `bytes`. The decoded frame is then the innermost one.
  std::vector<Tunnel> tunnels;
  // Set by read_capture: the number of the earlier frame this one is a mirror copy of (the same packet,
  // carried by another tunnel: mirror_copies.hpp), or 0.
  uint64_t copy_of = 0;
  bool truncated_by_snaplen() const { return bytes.size() < wire_length; }
};

class CaptureReader {
 public:
  enum class Next { record, end, error };

  // Opens `path` ("-" = standard input). On failure returns false and error() says why.
  bool open(const std::string& path);
  // The next record; Next::error with error() set when the file is damaged or truncated.
  Next next(Record& out);
  const std::string& error() const { return error_; }
  int link_type() const { return link_type_; }
  std::string link_type_name() const;

  // Parses a record's bytes according to the link type (Ethernet, raw IP, Linux cooked v1/v2). A frame
  // that carries another in a tunnel (ERSPAN, GRE, VXLAN: tunnel.hpp) is parsed as the frame it carries,
  // and r.tunnels say how it came; up to max_tunnel_depth tunnels inside tunnels are looked through.
  wire::ParseError decode(Record& r, wire::Frame& frame) const;

  static bool link_type_supported(int dlt);

 private:
  wire::ParseError decode_outer(const Record& r, wire::Frame& frame) const;

  struct Closer {
    void operator()(pcap_t* p) const { pcap_close(p); }
  };
  std::unique_ptr<pcap_t, Closer> handle_;
  int link_type_ = -1;
  uint64_t count_ = 0;
  std::string error_;
};

// Tunnels inside tunnels looked through, at most. Two is what real captures hold (a mirror of overlay traffic);
// the limit keeps a crafted frame of nested headers from costing more than a few parses.
inline constexpr size_t max_tunnel_depth = 4;

// `frame`, parsed from r.bytes, may carry another frame in a tunnel (tunnel.hpp), which may carry another:
// sets r.tunnels and parses the innermost carried frame into `frame`. What CaptureReader::decode does after
// the link layer.
wire::ParseError look_through_tunnel(Record& r, wire::Frame& frame);

// Reads a whole capture: every record, decoded for its link type, goes to `visit`, which returns false to
// stop early. What every `uroce` command does with a capture, so that each treats damage the same way.
struct ReadResult {
  enum class Outcome { complete, unreadable, damaged } outcome = Outcome::complete;
  std::string error;    // libpcap's words, for unreadable and damaged
  uint64_t records = 0; // records handed to `visit` (for damaged: those before the damage)
  uint64_t mirror_copies = 0;  // of them, mirror copies of an earlier one (Record::copy_of)

  // Logs what went wrong, if anything, and returns the exit status: 0, or 2 for an unreadable or
  // damaged capture (the frames before the damage have been shown).
  int report(const std::string& path) const;
};

ReadResult read_capture(const std::string& path,
                        const std::function<bool(const Record&, const wire::Frame&)>& visit);

}  // namespace uroce::pcap_tools
