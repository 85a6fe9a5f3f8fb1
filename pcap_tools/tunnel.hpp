// Mirrored and tunnelled frames. Much RoCE traffic is captured not on a host but at a switch, whose port
// mirror sends copies of the frames to a collector inside GRE (ERSPAN types I, II and III, as Cisco,
// Arista, NVIDIA Spectrum and SONiC's "everflow" mirror), or crosses an overlay inside GRE's transparent
// Ethernet bridging (gretap, NVGRE) or VXLAN, or is routed through a GRE tunnel (IP in GRE). Such a
// capture holds the outer Ethernet, IP and GRE or UDP headers, then the frame that was mirrored, which may
// itself be tunnelled (a mirror of an overlay's VXLAN traffic). The `uroce` commands look through such
// layers (capture_reader.hpp, max_tunnel_depth): they dissect, explain, check and replay the innermost
// frame, and say how it came (Wireshark does the same).
//
// Header layouts: GRE RFC 2784 and RFC 2890 (checksum, key and sequence number fields), ERSPAN
// draft-foschiano-erspan-03 (type II: ethertype 0x88be with the sequence bit, 8 bytes; type III: 0x22eb,
// 12 bytes and an 8-byte platform subheader when its O bit is set; type I: 0x88be without a sequence
// number and no ERSPAN header), transparent Ethernet bridging ethertype 0x6558, IPv4 0x0800 and IPv6 0x86dd
// in GRE, VXLAN RFC 7348 (UDP 4789).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

inline constexpr uint8_t ip_proto_gre = 47;
inline constexpr uint16_t gre_erspan_i_ii = 0x88be;
inline constexpr uint16_t gre_erspan_iii = 0x22eb;
inline constexpr uint16_t gre_transparent_ethernet = 0x6558;
inline constexpr uint16_t vxlan_udp_port = 4789;

enum class TunnelKind : uint8_t { erspan_i, erspan_ii, erspan_iii, gre, vxlan };

struct Tunnel {
  TunnelKind kind = TunnelKind::gre;
  wire::IpAddress src;  // the tunnel's ends: the outer IP header's addresses
  wire::IpAddress dst;
  // GRE's optional fields (RFC 2890); the Linux ERSPAN driver sets a key (the session) and a sequence.
  std::optional<uint32_t> gre_key;
  std::optional<uint32_t> gre_sequence;
  // ERSPAN types II and III.
  uint16_t session = 0;  // the mirror session's ID (10 bits)
  uint16_t vlan = 0;     // the mirrored frame's VLAN where the mirror took it (12 bits)
  uint8_t cos = 0;       // its class of service (3 bits)
  uint8_t encap = 0;     // type II: how the frame was tagged (0 untagged, 1 ISL, 2 802.1Q, 3 as it was)
  uint8_t bso = 0;       // type III: bad, short or oversized (0 good, 1 short, 2 oversized, 3 bad FCS)
  bool truncated = false;  // the mirror cut the frame (it was longer than the mirror's MTU)
  uint32_t index = 0;      // type II: the port or mirror index
  // ERSPAN type III.
  uint32_t timestamp = 0;  // in units the granularity names
  uint16_t sgt = 0;        // security group tag
  bool pdu_frame = false;  // P: the frame is an Ethernet PDU
  uint8_t frame_type = 0;  // FT: 0 Ethernet, 2 IP (the mirror left the Ethernet header out)
  uint8_t hw_id = 0;
  bool egress = false;  // D: mirrored as it left the port (false: as it came in)
  uint8_t granularity = 0;
  std::optional<uint8_t> platform_id;  // O: an 8-byte platform subheader follows; its platform ID
  // VXLAN.
  uint32_t vni = 0;

  size_t inner_offset = 0;  // where the carried frame starts in the captured bytes
  size_t inner_end = 0;     // one past its end (the outer IP packet's end, or what was captured of it)
  bool inner_is_ip = false;  // an IP packet, no Ethernet header: GRE of IPv4 or IPv6, ERSPAN III with FT = 2
};

// The tunnel `outer` (a parsed frame over a record's bytes) is, if it is one whose header was captured
// whole; otherwise nothing, and the frame is shown as it is (GRE with another protocol, a routing header
// or a version other than 0, a cut-short tunnel header, UDP to another port, a malformed outer packet). An
// outer IP packet cut by the capture's snaplen (`cut_by_snaplen`) still yields its tunnel: the inner frame
// is then what was captured of it.
std::optional<Tunnel> find_tunnel(const wire::Frame& outer, bool cut_by_snaplen);

// "ERSPAN type II", "VXLAN", ...
std::string tunnel_name(TunnelKind kind);

// How the frame came, for the end of a summary line: "ERSPAN type II session 100", "VXLAN VNI 5001", "GRE".
std::string tunnel_tag(const Tunnel& t);
// Through tunnels inside tunnels, outermost first: "ERSPAN type II session 100 / VXLAN VNI 5001".
std::string tunnels_tag(const std::vector<Tunnel>& tunnels);

struct Record;

// Counts the frames that came through each tunnel (kind, session or key or VNI, and its ends; tunnels inside
// it named after it), and how many of them were mirror copies, for a capture's story: "102 frames came
// through ERSPAN type II session 100 from 10.99.0.1 to 10.99.0.2 (all copies of frames another tunnel
// carried first)", "8 frames came through ERSPAN type II session 7 from 10.99.0.1 to 10.99.0.2, in it VXLAN
// VNI 5001 from 10.1.0.1 to 10.1.0.2".
class TunnelTally {
 public:
  void add(const Record& r);
  std::vector<std::string> lines() const;  // one per tunnel, in the order first seen
  uint64_t copies() const { return copies_; }

 private:
  struct Count {
    uint64_t frames = 0, copies = 0;
  };
  std::map<std::string, Count> tunnels_;
  std::vector<std::string> order_;
  uint64_t copies_ = 0;
};

}  // namespace uroce::pcap_tools
