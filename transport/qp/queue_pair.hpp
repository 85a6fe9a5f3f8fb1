// A queue pair's state, split the way rxe splits it: what the requester is sending (req), what the
// completer has seen acknowledged (comp), and what the responder expects and owes (resp). The three
// engines live in requester.cpp, completer.cpp and responder.cpp and only meet here.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "transport/dcqcn.hpp"
#include "transport/packet_pacing.hpp"
#include "transport/packet_io.hpp"
#include "transport/receive_queue.hpp"
#include "transport/ring_queue.hpp"
#include "transport/verbs/work.hpp"

namespace uroce::transport {

// rxe's limits, matched so that a uroce requester behaves like rxe on the wire.
inline constexpr uint32_t max_unacked_psns = 128;   // requester window
inline constexpr uint32_t max_packets_per_ack = 64; // AckReq at least every 64 packets

// Packets a message of `length` bytes takes at path MTU `mtu` (a zero-length message still takes one).
// Path MTUs are powers of two (verbs::mtu_bytes), so a shift, not a division: this runs for every message.
inline uint32_t packets_for(uint32_t length, unsigned mtu) {
  return length == 0 ? 1 : uint32_t((uint64_t(length) + mtu - 1) >> std::countr_zero(mtu));
}

// What a message is to a tag matching SRQ (QueuePair::Responder::tm_kind; qp/tag_matching.cpp).
enum class TagMessage : uint8_t {
  plain,       // not on a TM SRQ, or too short for a TMH: an ordinary receive
  no_tag,      // TMH opcode NO_TAG or FIN: whole to an ordinary receive
  unexpected,  // EAGER or RNDV that matched nothing: whole to an ordinary receive
  eager,       // matched: the payload after the TMH into the tagged buffer
  rendezvous,  // matched: the READ of the sender's data follows
};

enum class WqeState : uint8_t {
  posted,      // nothing sent yet
  processing,  // some packets sent
  pending,     // all packets sent, waiting for the ACK or the response
  done,        // finished; completes when every older WQE has
  failed,      // finished with an error status
};

// A rendezvous a tag matching SRQ carries out on the QP's send queue (qp/tag_matching.cpp): the READ of
// the sender's data into the tagged buffer, then the FIN that tells the sender. Neither completes to the
// send CQ: the READ's end completes the tagged buffer on the SRQ's CQ.
struct TagRendezvous {
  enum class Step : uint8_t { read, fin };
  Step step = Step::read;
  uint32_t cq = 0;             // the SRQ's CQ
  uint64_t recv_wr_id = 0;     // the tagged buffer's
  std::array<uint8_t, 32> fin{};  // the request's TMH and RVH with the opcode FIN: the FIN's payload
};

struct SendWqe {
  // Built in place in the send queue from the posted request: copying `wr` straight in avoids first
  // zero-filling a default work request of a few hundred bytes and then overwriting it.
  SendWqe(const verbs::SendWr& posted, uint32_t message_length, bool signaled_)
      : wr(posted), signaled(signaled_), length(message_length) {}

  verbs::SendWr wr;
  WqeState state = WqeState::posted;
  verbs::WcStatus status = verbs::WcStatus::success;
  bool signaled = false;
  uint32_t length = 0;      // message length in bytes
  uint32_t packets = 0;     // packets of the message (for READ: of its response)
  uint32_t first_psn = 0;
  uint32_t last_psn = 0;
  uint32_t sent = 0;        // bytes sent (requester cursor within the message)
  uint32_t received = 0;    // READ: response bytes placed so far
  std::unique_ptr<TagRendezvous> rendezvous;  // none for the application's own work requests
  // READ, the two atomics and ATOMIC WRITE: the requests the responder answers from a responder resource
  // and the requester limits to max_rd_atomic outstanding. Each is acknowledged only by its own response
  // (READ and ATOMIC WRITE: READ RESPONSE; atomics: ATOMIC ACKNOWLEDGE), so an ACK beyond one whose
  // response is missing means the response was lost.
  bool takes_responder_resource() const {
    return wr.opcode == verbs::WrOpcode::rdma_read || wr.opcode == verbs::WrOpcode::atomic_cmp_and_swp ||
           wr.opcode == verbs::WrOpcode::atomic_fetch_and_add || wr.opcode == verbs::WrOpcode::atomic_write;
  }
};

// A READ, atomic or ATOMIC WRITE request the responder accepted, kept so that a duplicate is answered from
// here (READ: the data is read again; atomic: the saved result is resent; ATOMIC WRITE: the empty READ
// RESPONSE is resent; neither kind of atomic is ever executed twice).
enum class ResourceKind : uint8_t { read, atomic, atomic_write };

struct ResponderResource {
  bool valid = false;
  ResourceKind kind = ResourceKind::read;
  uint32_t first_psn = 0;
  uint32_t last_psn = 0;
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
  uint64_t atomic_original = 0;
  uint32_t msn = 0;           // MSN the response carried
};

// An RSS QP's hashing (Device::create_qp with an indirection table).
struct RssConfig {
  uint32_t table = 0;
  uint64_t fields = 0;
  std::vector<uint8_t> key;
};

struct QueuePair {
  uint32_t qpn = 0;
  QpCounters counters;
  verbs::QpType type = verbs::QpType::rc;
  uint32_t pd = 0;
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  uint32_t srq = 0;            // 0: own receive queue. XRC target: the SRQ of the message in progress
  uint32_t xrcd = 0;           // XRC target: its domain (its pd, recv_cq and srq come from the SRQ in use)
  bool sq_sig_all = false;
  bool tag_matching = false;   // its receives come from a tag matching SRQ (fixed at create_qp)
  verbs::QpAttr attr;          // as last set by modify_qp (state included)
  uint16_t udp_src_port = 0xc000;
  uint32_t multicast_groups = 0;  // groups this (UD) QP is attached to (in what was padding)
  uint32_t flows = 0;             // flow steering rules that deliver to this (raw packet) QP
  std::unique_ptr<RssConfig> rss;  // an RSS QP's table and hash; none for every other QP
  Nanos cnp_sent_at = never;      // the last CNP this QP sent (congestion.cpp)
  // DCQCN's rate for this QP while CNPs keep it below line rate; none (no cost) otherwise. rate_blocked:
  // the requester stopped because the rate said "not yet" (run() resumes it).
  std::unique_ptr<DcqcnRate> rate;
  bool rate_blocked = false;
  // A raw packet QP's packet pacing (IBV_QP_RATE_LIMIT); none otherwise. It blocks the requester as the
  // rate does (rate_blocked).
  std::unique_ptr<PacketPacer> pacing;

  // RC, UC or either half of XRC: a QP with one peer QP (congestion control's unit; UD has none).
  bool connected() const { return type != verbs::QpType::ud && type != verbs::QpType::raw_packet; }

  RingQueue<SendWqe> sq;       // posted and not yet completed, oldest first
  ReceiveQueue rq;             // own receive queue (unused with an SRQ)

  struct Requester {
    size_t next = 0;           // index in sq of the WQE to send from
    uint32_t psn = 0;          // next PSN to send
    uint32_t packets_since_ackreq = 0;
    Nanos rnr_wait_until = 0;  // after an RNR NAK: nothing is sent before this
    bool scheduled = false;    // on the device's run list
  } req;

  struct Completer {
    uint32_t psn = 0;          // oldest PSN not yet acknowledged
    uint8_t retry_left = 0;    // timeouts / sequence-error NAKs left (attr.retry_cnt when progress is made)
    uint8_t rnr_retry_left = 0;
    // A NAK started a go-back-N retransmission and no acknowledgement has made progress since: further
    // sequence NAKs (about packets of the old burst, reordered or duplicated) must not start another one,
    // or retransmissions would pile up on each other. A timeout may always retry. (rxe: started_retry.)
    bool retry_in_progress = false;
    Nanos timeout_at = never;  // local ACK timeout
    Nanos timeout_period = 0;  // 4.096 us * 2^attr.timeout; 0 = infinite
  } comp;

  struct Responder {
    uint32_t psn = 0;          // next PSN expected
    uint32_t msn = 0;          // messages completed
    bool nak_sent = false;     // one sequence-error NAK per gap, as rxe
    uint8_t last_opcode_position = 3;  // wire::Position of the last packet accepted (3 = only: idle)
    uint8_t last_operation = 0;        // wire::Operation of the message in progress
    // The message in progress: a SEND into a receive WQE, or an RDMA WRITE into (va, rkey).
    std::optional<verbs::RecvWr> recv;
    uint32_t received = 0;     // bytes of the message so far
    uint64_t write_va = 0;
    uint32_t write_rkey = 0;
    uint32_t write_length = 0;
    bool drop_until_first = false;  // UC: a message was broken; wait for the next FIRST/ONLY
    // Tag matching (an RC QP on a TM SRQ): what the message in progress is to the SRQ, and the bytes at
    // its start that are not placed (the TMH of a matched eager message).
    uint8_t tm_kind = 0;  // TagMessage
    uint8_t tm_skip = 0;
    uint32_t tm_priv = 0;
    uint64_t tm_tag = 0;
    // ACK coalescing: a plain ACK owed for `ack_psn` waits until the end of the receive burst (run()), so
    // that several requests arriving together are acknowledged once, by the ACK of the last of them.
    bool ack_pending = false;
    uint32_t ack_psn = 0;
    std::vector<ResponderResource> resources;  // ring of max_dest_rd_atomic entries
    size_t next_resource = 0;
    // A message is in progress: the last packet accepted was its FIRST or a MIDDLE.
    bool in_message() const {
      const auto last = wire::Position(last_opcode_position);
      return last == wire::Position::first || last == wire::Position::middle;
    }
  } resp;

  bool in_error() const { return attr.qp_state == verbs::QpState::err; }
  unsigned mtu() const { return verbs::mtu_bytes(attr.path_mtu); }
};

}  // namespace uroce::transport
