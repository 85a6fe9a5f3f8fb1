// What both replays (responder_replay.hpp, requester_replay.hpp) take from a capture: its RoCE frames, kept
// as rebuilt Ethernet frames, and its RC connections, one requester QP talking to one responder QP.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "transport/verbs/types.hpp"
#include "transport/wire/address.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

// One direction of an RC connection seen in a capture: a requester's requests to one responder QP.
struct ReplayConnection {
  wire::IpAddress requester, responder;
  uint32_t responder_qpn = 0;
  uint32_t requester_qpn = 0;  // learnt from the responder's answers (0 if it sent none)
  uint32_t first_psn = 0;      // of the first request seen
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> regions;  // rkey -> [lowest VA, highest end)
  uint32_t path_mtu = 0;       // from FIRST/MIDDLE payloads either way; 0 if no message spanned packets
  uint64_t largest_send = 0;   // bytes of the longest SEND message: what each receive must hold
};

// The capture's RoCE frames, as Ethernet frames (whatever the capture's link type) with a good ICRC: what
// a NIC would have accepted. Frames are parsed again from these bytes.
using FrameBytes = std::vector<std::vector<uint8_t>>;

// Appends a parsed RoCE frame to `frames`, rebuilt from its fields as an Ethernet frame (whatever link type
// it came in) with a good ICRC; false if it cannot be built. The caller decides whether a frame whose
// captured ICRC was bad belongs there (`uroce replay` leaves those out, as a NIC drops them).
bool add_rebuilt(FrameBytes& frames, const wire::Frame& f);

// The RC connections of a capture, in the order their first requests appear.
std::vector<ReplayConnection> rc_connections(const FrameBytes& frames);

// Parses one of the kept frames; false unless it is an RC packet.
bool parse_rc(const std::vector<uint8_t>& bytes, wire::Frame& f);
bool is_request_of(const wire::Frame& f, const ReplayConnection& k);  // requester -> responder QP
bool is_answer_to(const wire::Frame& f, const ReplayConnection& k);   // responder -> requester QP

// Memory a replay registers for one connection is limited to this, so that a capture naming huge
// addresses or lengths is refused instead of exhausting memory.
inline constexpr uint64_t max_replay_memory = uint64_t(256) << 20;

// The path MTU a replay of `k` uses: the capture's, or `default_mtu` where no message spans packets.
// Nothing, with `error` set, when that is not a path MTU (256 to 4096).
std::optional<verbs::Mtu> replay_mtu(const ReplayConnection& k, uint32_t default_mtu, std::string& error);

}  // namespace uroce::pcap_tools
