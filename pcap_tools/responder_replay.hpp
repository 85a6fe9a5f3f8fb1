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
#include <ostream>
#include <string>
#include <vector>

#include "pcap_tools/replay_comparison.hpp"
#include "pcap_tools/replay_connection.hpp"
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

struct ReplayResult {
  std::vector<Answer> expected;  // what the captured responder sent to the requester's QP
  std::vector<Answer> got;       // what uroce's responder sent
  uint64_t requests = 0;         // requests fed in
  std::string error;             // why the replay could not be set up (nothing compared then)
};

// `default_mtu` (256..4096) is the path MTU when the connection shows none.
ReplayResult replay_responder(const FrameBytes& frames, const ReplayConnection& k, uint32_t default_mtu = 4096);

// How uroce's answers compare with the captured ones.
using Comparison = SequenceComparison<Answer>;

// Answer for answer, in order: the two must be the same.
inline Comparison compare_exact(const std::vector<Answer>& expected, const std::vector<Answer>& got) {
  return compare_in_order(expected, got);
}

// For captures taken after the point where packets were lost (frames the responder sent may be missing
// from the capture): the expected answers must appear in order within uroce's, and every answer of
// uroce's beyond them must be a plain ACK, i.e. one that a lost frame explains.
Comparison compare_lossy(const std::vector<Answer>& expected, const std::vector<Answer>& got);

}  // namespace uroce::pcap_tools
