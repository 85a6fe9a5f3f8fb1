// Replaying the requester side of a capture's RC connection into uroce's own requester (transport/): the
// work requests behind the captured requests are posted to a uroce QP that takes the captured requester's
// place, the captured responder's answers are fed back to it in capture order, and what uroce sends is set
// beside what the captured requester sent. `uroce replay --side requester`, and the ground-truth test that
// holds uroce's requester to rxe's (tests/unit/transport/test_requester_replay.cpp).
//
// The work requests are read off the captured requests: one per message (FIRST..LAST or ONLY), with its
// opcode, remote address and R_Key, immediate or invalidated key, atomic operands and solicited flag, and
// the bytes a SEND or WRITE carried as its local data. They are all posted before the first answer (as
// many as the send queue holds; the rest as completions free it) and sent at uroce's own pace: what is
// compared is the order of what was sent, not when. Only the requester's QP number is rewritten, in the
// answers on the way in: uroce's QP numbers are its own, and no request carries its sender's.
//
// Compared: every request packet field by field (opcode, PSN, destination QP, AckReq, SE, payload bytes,
// RETH, ImmDt, IETH, AtomicETH), and every work request the captured answers acknowledge must complete
// successfully, in order, a READ with the bytes the captured responder returned and an atomic with the
// original value it reported.
//
// Not every capture can be replayed on this side. When a requester retransmits depends on its timers and
// on what was lost, and what it sends after a NAK on when the NAK arrived; a replay has neither. So a
// connection whose captured requests go back (a retransmission) or skip PSNs (lost before the capture
// point), whose responder sent a NAK or an RNR NAK, that shows no answers at all, or whose capture begins
// or ends inside a message, is skipped, with the reason: nothing is compared, and it is not a failure.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "pcap_tools/replay_comparison.hpp"
#include "pcap_tools/replay_connection.hpp"
#include "transport/verbs/types.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

// What one request packet says: every field a requester chooses. Fields of headers the opcode does not
// carry are 0.
struct Request {
  uint8_t opcode = 0;
  uint32_t psn = 0;
  uint32_t dest_qp = 0;
  bool ack_req = false;
  bool solicited = false;
  std::vector<uint8_t> payload;
  uint64_t va = 0;           // RETH or AtomicETH
  uint32_t rkey = 0;         // RETH or AtomicETH
  uint32_t dma_length = 0;   // RETH
  uint32_t immdt = 0;
  uint32_t ieth = 0;
  uint64_t swap_add = 0, compare = 0;  // AtomicETH
  friend bool operator==(const Request&, const Request&) = default;
};
Request request_of(const wire::TransportHeaders& headers, std::span<const uint8_t> payload);
std::string to_string(const Request& r);  // "RC_RDMA_WRITE_ONLY psn 12 A qp 0x11 len 64 va 0x... rkey 0x... dma 64"
std::ostream& operator<<(std::ostream& os, const Request& r);

// How one work request completed.
struct Completion {
  uint64_t work_request = 0;  // its place among the connection's work requests, from 0
  verbs::WcOpcode opcode = verbs::WcOpcode::send;
  verbs::WcStatus status = verbs::WcStatus::success;
  std::vector<uint8_t> read;  // RDMA READ: the bytes it brought
  uint64_t original = 0;      // atomics: the value at the remote address before
  friend bool operator==(const Completion&, const Completion&) = default;
};
std::string to_string(const Completion& c);  // "work request 3 RDMA_READ success, 64 bytes read"
std::ostream& operator<<(std::ostream& os, const Completion& c);

// The first field in which two requests (or two completions) differ, both values given:
// "AckReq (uroce 0, captured 1)"; empty if they are the same.
std::string what_differs(const Request& uroce, const Request& captured);
std::string what_differs(const Completion& uroce, const Completion& captured);

struct RequesterReplayResult {
  std::vector<Request> expected;               // what the captured requester sent to the responder's QP
  std::vector<Request> got;                    // what uroce's requester sent
  std::vector<Completion> expected_completions;  // the work requests the captured answers acknowledge
  std::vector<Completion> got_completions;       // how uroce's completed
  uint64_t work_requests = 0;                  // posted
  uint64_t answers = 0;                        // captured answers fed back
  std::string skipped;  // why this connection cannot be replayed on the requester side (not a failure)
  std::string error;    // why the replay could not be set up: a malformed capture (nothing compared then)
};

// `default_mtu` (256..4096) is the path MTU when the connection shows none.
RequesterReplayResult replay_requester(const FrameBytes& frames, const ReplayConnection& k,
                                       uint32_t default_mtu = 4096);

struct RequesterComparison {
  SequenceComparison<Request> requests;        // packet for packet, in order
  SequenceComparison<Completion> completions;  // work request for work request, in order
  bool same() const { return requests.same() && completions.same(); }
};
RequesterComparison compare_requester(const RequesterReplayResult& r);

}  // namespace uroce::pcap_tools
