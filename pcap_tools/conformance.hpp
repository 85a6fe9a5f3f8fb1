// `uroce check`: does a capture's RoCEv2 traffic keep the rules of the protocol? For people testing a RoCE
// stack from captures of it, in CI: a list of violations, each with its frame, and an exit status.
//
// Rules (each has a name, which the output and --json use):
// - malformed: a frame that does not parse (as `uroce dissect` counts them).
// - bad_icrc: a RoCE frame whose ICRC is wrong.
// - opcode_sequence: in one request flow (one direction of one RC, UC or XRC QP), a FIRST or ONLY while a
//   message is open, a MIDDLE or LAST with none open, or one of another operation than the open message's.
// - payload_size: a FIRST or MIDDLE payload that is not a path MTU (256, 512, ..., 4096 bytes) or differs
//   from the flow's other FIRST and MIDDLE payloads; a LAST or ONLY payload larger than that MTU.
// - write_length: an RDMA WRITE whose payloads do not add up to its RETH's DMA length.
// - read_response_length: READ response packets that do not add up to what the READ request asked for (an
//   ATOMIC WRITE's answer, a READ response at its PSN, carries none).
// - atomic_operand: a CMP_SWAP, FETCH_ADD or ATOMIC WRITE whose address is not 8-byte aligned, or an ATOMIC
//   WRITE whose payload or RETH DMA length is not 8 bytes (IBTA 9.4.5, A19.4.2).
// - pause_destination: a PAUSE or PFC frame not sent to 01:80:c2:00:00:01 (no link partner acts on it).
// - pfc_enable_vector: a PFC frame whose class-enable vector has its reserved upper byte set.
//
// The sequence rules judge only packets in sequence: a retransmission (its PSN goes back) or a gap (PSNs
// lost before the capture point) leaves a message's state unknown until the next FIRST or ONLY, so a
// capture taken on a lossy link, or starting in the middle of a transfer, is judged without false alarms.
// Not a rule, for that reason: that MSNs never go back. They do not at the responder, but a network that
// reorders (and duplicate requests, which are ACKed again with the current MSN) can show them out of order
// anywhere else.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

struct Violation {
  std::string rule;      // as listed above
  uint64_t frame = 0;    // 1-based frame number
  std::string text;      // what is wrong, in words
};

class ConformanceChecker {
 public:
  // Feeds the next frame of the capture (in capture order).
  void add(uint64_t frame_number, const wire::Frame& f);

  const std::vector<Violation>& violations() const { return violations_; }
  uint64_t frames() const { return frames_; }
  uint64_t roce_frames() const { return roce_; }
  uint64_t flows() const { return requests_.size(); }

 private:
  using Ip = std::array<uint8_t, 16>;
  using Key = std::tuple<Ip, Ip, uint32_t>;  // source, destination, destination QP

  struct OpenMessage {
    wire::Operation operation = wire::Operation::send;
    uint64_t first_frame = 0;
    uint64_t bytes = 0;
    std::optional<uint64_t> dma_length;  // from the RETH of a WRITE, or the READ request
  };
  // A message's state in a flow: known (none or one open), or unknown after a retransmission or a gap.
  struct FlowState {
    std::optional<uint32_t> next_psn;
    bool known = false;
    std::optional<OpenMessage> open;
    uint32_t mtu = 0;  // from the flow's FIRST and MIDDLE payloads; 0 until one is seen
  };

  void check_mac_control(uint64_t n, const wire::Frame& f);
  void check_request(uint64_t n, const wire::Frame& f);
  void check_response(uint64_t n, const wire::Frame& f);
  void check_payload_size(uint64_t n, const wire::Frame& f, FlowState& s);
  // Follows a packet through its flow's message state; returns the message it ends (LAST or ONLY), if the
  // whole message was seen in sequence. `dma_length`: how long a message this packet opens should be.
  std::optional<OpenMessage> follow(uint64_t n, const wire::Frame& f, FlowState& s, uint32_t psn_span,
                                    std::optional<uint64_t> dma_length);
  void add_violation(std::string rule, uint64_t n, const wire::Frame& f, std::string text);
  void check_atomic_operand(uint64_t n, const wire::Frame& f);

  uint64_t frames_ = 0, roce_ = 0;
  std::map<Key, FlowState> requests_;
  std::map<Key, FlowState> responses_;  // READ responses
  // READ requests by (requester, responder) and PSN: the DMA length their responses must add up to.
  std::map<std::pair<Ip, Ip>, std::map<uint32_t, uint64_t>> reads_;
  std::vector<Violation> violations_;
};

}  // namespace uroce::pcap_tools
