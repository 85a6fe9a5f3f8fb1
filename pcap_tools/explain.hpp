// `uroce explain`: a capture told as a story, for people learning (or debugging) RoCEv2.
//
// Packets are grouped into flows (one direction of one queue pair: source IP, destination IP, destination
// QP), multi-packet messages are reassembled (FIRST ... LAST), and each message, acknowledgement, NAK,
// retransmission and connection-management step becomes one sentence that says what happened and why.
// A closing table counts, per flow, what was seen. PFC and PAUSE frames, which stop RoCE traffic at the
// link, are told too (pause_story.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "pcap_tools/capture_reader.hpp"
#include "pcap_tools/pause_story.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::pcap_tools {

struct FlowKey {
  wire::IpAddress src;
  wire::IpAddress dst;
  uint32_t dest_qp = 0;
  friend auto operator<=>(const FlowKey& a, const FlowKey& b) {
    return std::tie(a.src.bytes, a.dst.bytes, a.dest_qp) <=> std::tie(b.src.bytes, b.dst.bytes, b.dest_qp);
  }
  friend bool operator==(const FlowKey&, const FlowKey&) = default;
};

struct FlowStats {
  std::string name;                // "A", "B", ... in order of appearance
  wire::Transport transport = wire::Transport::rc;
  uint64_t packets = 0;
  uint64_t bytes = 0;              // payload bytes
  uint64_t messages = 0;           // completed requests or responses
  uint64_t retransmitted = 0;      // packets whose PSN had been seen before in this flow
  uint64_t missing = 0;            // PSNs that never appear: lost before the capture point
  uint64_t acks = 0, naks = 0, rnr_naks = 0, cnps = 0;
  uint64_t bad_icrc = 0;
};

// One message being reassembled from its packets.
struct OpenMessage {
  uint64_t first_frame = 0, last_frame = 0;
  uint8_t first_opcode = 0;
  uint32_t first_psn = 0, last_psn = 0;
  uint64_t packets = 0, bytes = 0;
  bool started_mid_message = false;  // the first packet seen was a MIDDLE or LAST
  bool capture_starts_inside = false;  // ... and the flow's first packet in the capture
  bool retransmission = false;
  uint64_t missing = 0;              // PSNs skipped up to and inside the message: lost before the capture point
  uint32_t first_missing = 0;
  std::optional<wire::Reth> reth;
  std::optional<uint32_t> immdt;
  std::optional<wire::Aeth> aeth;
  std::optional<uint32_t> xrc_srq;  // an XRC request's target SRQ (XRCETH)
};

class Explainer {
 public:
  // Feeds the next frame of the capture (in capture order).
  void add(const Record& record, const wire::Frame& frame);
  // Feeds a mirror copy of an earlier frame (record.copy_of), which is not told again: only a CE mark the
  // frame it copies did not carry, which a switch between the two mirror points set.
  void add_copy(const Record& record, const wire::Frame& frame);
  // Closes messages still open at the end of the capture.
  void finish();

  const std::vector<std::string>& lines() const { return lines_; }
  std::string flow_table() const;
  const PauseStory& pauses() const { return pauses_; }
  uint64_t frames() const { return frames_; }
  uint64_t malformed() const { return malformed_; }

 private:
  struct Flow {
    FlowKey key;
    FlowStats stats;
    // One past the highest PSN seen, kept apart for requests and for READ responses: a flow (one direction
    // of a QP) carries this side's requests and its responses to the peer's requests, on two PSN spaces.
    std::optional<uint32_t> next_request_psn;
    std::optional<uint32_t> next_response_psn;
    // A READ request consumes one PSN per response packet, a number the request does not show: the PSN
    // gap that follows it is expected, not a loss.
    bool request_gap_expected = false;
    std::optional<OpenMessage> open;
  };

  Flow& flow_for(const wire::Frame& f);
  void add_roce(const Record& r, const wire::Frame& f, Flow& flow);
  void add_message_packet(const Record& r, const wire::Frame& f, Flow& flow, int64_t step);
  int64_t request_step(Flow& flow, uint32_t psn);
  // Where `psn` falls in its PSN space: -1 seen before (a retransmission), 0 the next one, n > 0 after n
  // PSNs that never appeared. Advances the space unless it is a retransmission.
  static int64_t psn_step(std::optional<uint32_t>& next, uint32_t psn);
  void close_message(Flow& flow, const char* why);
  void add_mad(const Record& r, const wire::Frame& f, Flow& flow);
  void say(uint64_t frame, const Flow* flow, const std::string& text);
  void say_range(uint64_t first, uint64_t last, const Flow* flow, const std::string& text);

  std::map<FlowKey, Flow> flows_;
  std::vector<const Flow*> flow_order_;
  // PSNs of the ATOMIC WRITEs seen, by (requester, responder) address: their answer is an empty READ
  // RESPONSE, which the PSN tells apart from a zero-length READ's (responses do not name the request).
  std::map<std::pair<std::array<uint8_t, 16>, std::array<uint8_t, 16>>, std::set<uint32_t>> atomic_writes_;
  std::vector<std::string> lines_;
  // The RoCE frames told as marked CE (the first copy, or a later one): a mark is told once per frame.
  std::unordered_set<uint64_t> ce_marked_;
  PauseStory pauses_;
  uint64_t frames_ = 0;
  uint64_t malformed_ = 0;
};

struct ExplainOptions {
  std::string path;
};

int run_explain(const ExplainOptions& options);

}  // namespace uroce::pcap_tools
