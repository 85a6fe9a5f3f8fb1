// Replaying a capture's RC requests into uroce's own responder (transport/), to set what uroce answers
// beside what the captured responder answered: `uroce replay`, and the ground-truth tests that hold
// uroce's responder to rxe's (tests/unit/transport/test_capture_replay.cpp).
//
// The requester's packets are fed in capture order, one burst each, into a transport::Device whose QP
// takes the captured responder's place: same PSNs, the same addresses (memory is registered at the very
// virtual addresses the requests name, one region per R_Key), every remote access granted, and a receive
// posted for every request that consumes one. Only R_Keys and the destination QP number are rewritten on
// the way in: uroce's keys and QP numbers are its own, and neither appears in an answer. What is compared
// is what an answer says of the protocol: opcode, PSN, AckReq, AETH syndrome and MSN, payload length.
// Payload bytes are not (READ data and atomic results depend on memory the capture does not show).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "transport/wire/address.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

// What one response packet says, in the terms of the comparison.
struct Answer {
  uint8_t opcode = 0;
  uint32_t psn = 0;
  bool ack_req = false;
  int syndrome = -1;  // -1: no AETH
  uint32_t msn = 0;
  size_t length = 0;  // payload bytes
  friend bool operator==(const Answer&, const Answer&) = default;
};
Answer answer_of(const wire::TransportHeaders& headers, size_t payload_length);
std::string to_string(const Answer& a);  // "RC_ACKNOWLEDGE psn 12 len 0 syndrome 0x1f msn 3"
std::ostream& operator<<(std::ostream& os, const Answer& a);

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
// a responder would have accepted. Frames are parsed again from these bytes.
using FrameBytes = std::vector<std::vector<uint8_t>>;

// Appends a parsed RoCE frame to `frames`, rebuilt from its fields as an Ethernet frame (whatever link type
// it came in) with a good ICRC; false if it cannot be built. The caller decides whether a frame whose
// captured ICRC was bad belongs there (`uroce replay` leaves those out, as a NIC drops them).
bool add_rebuilt(FrameBytes& frames, const wire::Frame& f);

// The RC connections of a capture, in the order their first requests appear.
std::vector<ReplayConnection> rc_connections(const FrameBytes& frames);

struct ReplayResult {
  std::vector<Answer> expected;  // what the captured responder sent to the requester's QP
  std::vector<Answer> got;       // what uroce's responder sent
  uint64_t requests = 0;         // requests fed in
  std::string error;             // why the replay could not be set up (nothing compared then)
};

// Memory registered for a connection's regions is limited to this, so that a capture naming huge
// addresses ranges is refused instead of exhausting memory.
inline constexpr uint64_t max_replay_memory = uint64_t(256) << 20;

// `default_mtu` (256..4096) is the path MTU when the connection shows none.
ReplayResult replay_responder(const FrameBytes& frames, const ReplayConnection& k, uint32_t default_mtu = 4096);

// How `got` compares with `expected`.
struct Comparison {
  size_t matched = 0;             // expected answers found
  struct Difference {
    size_t index = 0;             // in `got` (exact: also in `expected`)
    std::optional<Answer> uroce;  // nothing: uroce sent fewer answers
    std::optional<Answer> captured;  // nothing: uroce sent more (exact), or an extra answer (lossy)
  };
  std::vector<Difference> differences;
  bool same() const { return differences.empty(); }
};

// Answer for answer, in order: the two must be the same.
Comparison compare_exact(const std::vector<Answer>& expected, const std::vector<Answer>& got);
// For captures taken after the point where packets were lost (frames the responder sent may be missing
// from the capture): the expected answers must appear in order within uroce's, and every answer of
// uroce's beyond them must be a plain ACK, i.e. one that a lost frame explains.
Comparison compare_lossy(const std::vector<Answer>& expected, const std::vector<Answer>& got);

}  // namespace uroce::pcap_tools
