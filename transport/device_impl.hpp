// The inside of a Device: resource tables plus the engines. The control verbs are in device.cpp, the
// protocol engines in qp/requester.cpp, qp/completer.cpp and qp/responder.cpp.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "transport/completion_queue.hpp"
#include "transport/flow/flow_table.hpp"
#include "transport/device.hpp"
#include "transport/memory/mr_table.hpp"
#include "transport/use_counts.hpp"
#include "transport/multicast_groups.hpp"
#include "transport/numbered_table.hpp"
#include "transport/qp/queue_pair.hpp"
#include "transport/wire/frame.hpp"
#include "transport/wire/mad.hpp"

namespace uroce::transport {

// A P_Key matches when the low 15 bits are equal and non-zero and at least one side is a full member.
inline bool pkey_matches(uint16_t a, uint16_t b) {
  return (a & 0x7fff) == (b & 0x7fff) && (a & 0x7fff) != 0 && ((a | b) & 0x8000) != 0;
}

inline bool transport_matches(verbs::QpType type, wire::Transport t) {
  switch (type) {
    case verbs::QpType::rc: return t == wire::Transport::rc;
    case verbs::QpType::uc: return t == wire::Transport::uc;
    case verbs::QpType::ud: return t == wire::Transport::ud;
    case verbs::QpType::raw_packet: return false;  // takes frames only through flow rules
    case verbs::QpType::xrc_send:
    case verbs::QpType::xrc_recv: return t == wire::Transport::xrc;
  }
  return false;
}

// XRC splits RC's QP in two: an initiator takes only responses, a target only requests.
inline bool direction_matches(verbs::QpType type, bool is_request) {
  return type == verbs::QpType::xrc_send ? !is_request : type == verbs::QpType::xrc_recv ? is_request : true;
}

// Early placement (qp/early_placement.cpp): from this payload size on, a request that continues a
// message in progress, a READ response or a UD datagram is copied into place while its ICRC is checked.
// crc32_copy folds from 256 bytes.
inline constexpr size_t early_placement_min_payload = 256;
enum class EarlyPlacement : uint8_t { not_taken, placed, bad_icrc };
// Every UD receive starts with a 40-byte GRH area (qp/responder.cpp).
inline constexpr uint32_t ud_grh_size = 40;
// Whether the frame is of a kind early placement may take (opcode and size only: no QP is looked at).
bool may_place_early(const wire::Frame& f);

// The SGE that holds all of [offset, offset + length) of a message laid out by `sges`, with `offset` made
// relative to it; nullptr if that part spans SGEs (or lies beyond them) (device.cpp).
const verbs::Sge* sge_holding(const verbs::SgeList& sges, uint32_t& offset, size_t length);

// The send WQE (an RDMA READ, or an ATOMIC WRITE, whose answer is an empty READ RESPONSE) whose response
// carries PSN `psn`, found as the completer finds it; sq.size() if none is, or an older READ or atomic is
// still unanswered (qp/completer.cpp).
size_t read_answered_by(const QueuePair& qp, uint32_t psn);

// Moves the next receive WQE from the QP's queue or its SRQ into `into` (qp/responder.cpp); false if there
// is none.
bool take_receive(DeviceImpl& d, QueuePair& qp, std::optional<verbs::RecvWr>& into);
// The bytes a receive WQE's scatter list holds (at most 2^32 - 1).
uint32_t sge_total(const verbs::RecvWr& r);

// Where early placement copied a payload: the responder's copy of exactly these bytes to exactly there
// is skipped (DeviceImpl::write_payload). memory == nullptr: nothing placed.
struct PlacedPayload {
  const MemoryBackend* memory = nullptr;
  uint64_t offset = 0;
  size_t length = 0;
  const uint8_t* source = nullptr;
};

class DeviceImpl {
 public:
  DeviceImpl(PacketSink& sink, DeviceLimits limits)
      : sink_(sink), limits_(limits), mrs_(limits.max_mr), multicast_(limits) {}

  PacketSink& sink_;
  DeviceLimits limits_;
  std::vector<wire::IpAddress> gids_;
  verbs::Mtu active_mtu_ = verbs::Mtu::mtu_1024;
  uint16_t pkey_ = wire::default_pkey;

  MrTable mrs_;
  UseCounts pds_;    // pd -> number of objects using it
  NumberedTable<CompletionQueue> cqs_;
  std::vector<uint32_t> active_cqs_;  // CQs with new completions, in order (Device::take_active_cqs)
  std::vector<uint32_t> retired_receives_;  // QPs whose own receive queue shrank (take_retired_receives)
  std::vector<uint32_t> retired_srq_receives_;  // SRQs that shrank (take_retired_srq_receives)
  std::vector<uint32_t> low_receive_queues_;  // QPs whose receives ran low (Device::take_low_receive_queues)
  uint32_t next_cqn_ = 1;
  std::unordered_map<uint32_t, ReceiveQueue> srqs_;
  uint32_t next_srqn_ = 1;
  UseCounts xrcds_;  // XRC domain -> number of SRQs and target QPs in it
  struct AddressHandle {
    uint32_t pd;
    verbs::AddressVector av;
  };
  std::unordered_map<uint32_t, AddressHandle> ahs_;
  uint32_t next_ahn_ = 1;
  NumberedTable<QueuePair> qps_;
  uint32_t next_qpn_ = 0x11;  // rxe's first QP number: QP 0 and 1 are special, 2-16 reserved
  std::vector<QueuePair*> run_list_;
  std::vector<QueuePair*> running_;         // the run list run() works through (kept for its capacity)
  std::vector<QueuePair*> ack_list_;        // QPs whose responder owes a coalesced ACK
  std::vector<AsyncEvent> events_;
  DeviceCounters counters_;
  wire::Frame frame_;                       // reused by receive()
  std::vector<uint8_t> scratch_ = std::vector<uint8_t>(4096);  // one packet's payload
  GsiHandler gsi_handler_;                  // QP1's MADs (gsi.cpp)
  uint32_t gsi_psn_ = 0;
  void on_gsi(const wire::Frame& f, Nanos now);
  CongestionConfig congestion_;             // CNPs (congestion.cpp)
  // A frame accepted by `qp` arrived marked CE: a CNP to its sender unless one went within the interval.
  void on_congestion_experienced(QueuePair& qp, Nanos now);
  void on_cnp(const wire::Frame& f, Nanos now);
  // Rate control around each QP's sends (congestion.cpp): whether the requester may send now, and the
  // accounting of each packet that leaves.
  bool rate_allows(QueuePair& qp, Nanos now);
  void on_rate_sent(QueuePair& qp, OutPacket& packet);
  // run()'s part: timers of the QPs' rates, and resuming requesters whose pacing time has come.
  void run_rates(QueuePair& qp, Nanos now);
  Nanos now_ = 0;  // the time of the entry point that is running (receive, run, post_send)
  MulticastGroups multicast_;               // UD multicast (multicast.cpp)
  // Indirection tables (qp/work_queues.cpp): their work queues and how many RSS QPs use each.
  struct IndirectionTable {
    std::vector<uint32_t> wqs;
    uint32_t users = 0;
  };
  std::unordered_map<uint32_t, IndirectionTable> ind_tables_;
  uint32_t next_ind_table_ = 1;
  // Whether `a` describes a valid RSS QP: a raw packet QP with a PD, an existing table, a Toeplitz key of
  // 40 bytes (mlx5's length, enough for two IPv6 addresses and two ports) and known hash fields, TCP's or
  // UDP's ports but not both (as mlx5).
  int check_rss_qp(const QpInitAttr& a) const;
  // Completes every receive posted to work queue `wqn` with IBV_WC_WR_FLUSH_ERR.
  void flush_wq(uint32_t wqn, ReceiveQueue& q);
  // An RSS QP's frame: to the work queue its hash picks.
  void deliver_rss(QueuePair& qp, std::span<const uint8_t> frame);
  // Raw packet QPs (qp/raw_packet.cpp): the flow rules, the frame being sent, the QPs a frame goes to.
  flow::FlowTable flows_;
  uint32_t flow_count_ = 0;
  uint32_t max_raw_frame_ = 1518;
  std::vector<uint8_t> raw_frame_;
  std::vector<uint32_t> steered_;
  // Sends the raw frame a work request holds (run_requester's part for raw packet QPs).
  void send_raw(QueuePair& qp, SendWqe& w);
  // Gives `frame` to raw packet QP `qpn`'s next receive, if it is ready and has one.
  void deliver_raw(uint32_t qpn, std::span<const uint8_t> frame);
  void deliver_raw_to(std::span<const uint8_t> frame);  // to every QP in steered_
  // The completion of receive `recv` taking raw `frame` for `qp_num` (a raw QP or an RSS work queue),
  // after scattering it into memory of `pd`: success (with IBV_WC_IP_CSUM_OK if the IPv4 checksums hold),
  // LOC_LEN_ERR if it does not fit, LOC_PROT_ERR for a bad scatter list.
  verbs::WorkCompletion receive_raw(const verbs::RecvWr& recv, uint32_t pd, uint32_t qp_num,
                                    std::span<const uint8_t> frame);
  void on_multicast(const wire::Frame& f, size_t frame_size, Nanos now);

  // Tag matching (qp/tag_matching.cpp), for QPs whose receives come from a TM SRQ (QueuePair::tag_matching).
  // The receive a SEND takes on a TM SRQ, from its first packet's payload (`only`: the message is that one
  // packet): a tagged buffer it matches, or an ordinary receive; sets qp.resp.tm_*. False if an ordinary
  // receive is needed and none is posted (RNR).
  bool take_tagged_receive(QueuePair& qp, std::span<const uint8_t> payload, bool only, std::optional<verbs::RecvWr>& into);
  // Fills in what a finished message on a TM SRQ completes with (opcode, flags, length, tag); `only`: it was
  // one packet.
  void tag_completion(TagMessage kind, const QueuePair& qp, verbs::WorkCompletion& wc, uint32_t received,
                      bool only) const;
  // The TM_MATCH completion of the message in progress (qp.resp.tm_*) for the tagged buffer `wr_id`.
  verbs::WorkCompletion match_completion(const QueuePair& qp, uint64_t wr_id) const;
  // A multi-packet eager message matched a tagged buffer: its TM_MATCH completion, at once.
  void post_tag_match(const QueuePair& qp);
  // A matched rendezvous request `message` for the tagged buffer `buffer`: its MATCH completion and the
  // READ on the QP's send queue, or IBV_WC_TM_RNDV_INCOMPLETE if the buffer is too short.
  void start_rendezvous(QueuePair& qp, const verbs::RecvWr& buffer, std::span<const uint8_t> message);
  // A rendezvous step on the send queue ended (`status`: how), or was flushed: the READ completes the
  // tagged buffer and, if it succeeded, sends the FIN.
  void rendezvous_step_done(QueuePair& qp, std::unique_ptr<TagRendezvous> step, verbs::WcStatus status,
                            uint32_t length);

  // The checks every frame to a QP passes (P_Key, transport, QP state) and then the QP's responder or
  // completer: `f` is addressed to `qp`, or is a multicast copy for one of the group's QPs. False if the
  // frame was dropped before reaching the engine.
  bool dispatch(QueuePair& qp, const wire::Frame& f, size_t frame_size, Nanos now);

  // -- shared helpers (device.cpp) --
  QueuePair* find_qp(uint32_t qpn) { return qps_.find(qpn); }
  void schedule(QueuePair& qp);
  void post_completion(uint32_t cqn, const verbs::WorkCompletion& wc);
  void note_low_receive_queue(uint32_t qpn);
  // The QP's own receive queue gave up work requests (taken by a message, flushed or reset).
  void note_receives_retired(QueuePair& qp);
  void note_srq_receives_retired(uint32_t srqn, ReceiveQueue& srq);
  // The completion to fill in place at the tail of CQ `cqn` (see CompletionQueue::append); nullptr if the
  // CQ is gone or full (an overflow is counted and raised as post_completion does).
  verbs::WorkCompletion* new_completion(uint32_t cqn);
  void raise(verbs::EventType type, uint32_t object) { events_.push_back({type, object}); }
  // Sends `packet` for `qp`: the caller filled in the headers (in place: a copy of freshly written
  // headers is slow), the payload and, for UD, the destination; this adds what the QP and the port give.
  void transmit(QueuePair& qp, OutPacket& packet);
  // Moves a QP to the error state: flushes every outstanding work request (the first send WQE gets
  // `status` unless it is success) and raises `event` unless the caller asked for the state itself.
  void enter_error(QueuePair& qp, std::optional<verbs::EventType> event);
  void flush(QueuePair& qp);
  ReceiveQueue* receive_queue(QueuePair& qp);
  // Copies between a work request's scatter/gather list and `bytes`, starting `offset` bytes into the
  // message; `access` is what each SGE's lkey must grant. Returns the failing check, or ok.
  KeyCheck gather(const verbs::SgeList& sges, uint32_t pd, uint32_t offset, std::span<uint8_t> bytes);
  KeyCheck scatter(const verbs::SgeList& sges, uint32_t pd, uint32_t offset, std::span<const uint8_t> bytes);
  // The `length` bytes of a message to send from `offset`, checked as gather() checks them: a view of
  // the registered memory when they lie in one SGE of a region whose memory can be viewed in place,
  // otherwise gathered into scratch_. On failure `out` is unspecified.
  KeyCheck send_payload(const verbs::SgeList& sges, uint32_t pd, uint32_t offset, uint32_t length,
                        std::span<const uint8_t>& out);
  // Writes a received payload into a region's memory, unless early placement already put exactly these
  // bytes there.
  bool write_payload(const MemoryRegion& mr, uint64_t offset, const uint8_t* src, size_t len);

  // -- early placement (qp/early_placement.cpp) --
  // For a frame may_place_early() accepted, before its ICRC is checked: copies its payload to where the
  // responder or completer will put it while checking the ICRC, if every rule holds; bad_icrc if the
  // ICRC failed.
  EarlyPlacement place_early(const wire::Frame& f);
  // The bytes the payload of `f` (a request to, a READ response for, or a datagram to `qp`, which
  // dispatch() would hand to the QP) goes to, if it may be placed early; empty otherwise. None changes
  // anything.
  std::span<uint8_t> request_destination(const QueuePair& qp, const wire::Frame& f, PlacedPayload& where);
  std::span<uint8_t> read_response_destination(const QueuePair& qp, const wire::Frame& f, PlacedPayload& where);
  std::span<uint8_t> datagram_destination(QueuePair& qp, const wire::Frame& f, PlacedPayload& where);
  // The payload's place at `offset` into a local scatter list (it must lie in one SGE, with LOCAL_WRITE),
  // and at `address` in `mr`; both fill `where`.
  std::span<uint8_t> local_place(const verbs::SgeList& sges, uint32_t pd, uint32_t offset, size_t len,
                                 const wire::Frame& f, PlacedPayload& where);
  std::span<uint8_t> writable_place(const MemoryRegion& mr, uint64_t address, size_t len, const wire::Frame& f,
                                    PlacedPayload& where);
  PlacedPayload placed_;  // reset by every receive()

  // -- requester (qp/requester.cpp) --
  void run_requester(QueuePair& qp, Nanos now);
  bool bind_window(const QueuePair& qp, const verbs::MwBind& bind);
  bool requester_can_send(const QueuePair& qp, Nanos now) const;

  // -- completer (qp/completer.cpp) --
  void on_response(QueuePair& qp, const wire::Frame& f, Nanos now);
  void on_timer(QueuePair& qp, Nanos now);
  void complete_finished(QueuePair& qp);
  void arm_timeout(QueuePair& qp, Nanos now);
  void retry_from(QueuePair& qp, uint32_t psn, Nanos now);

  // -- responder (qp/responder.cpp) --
  void on_request(QueuePair& qp, const wire::Frame& f, Nanos now);
  void flush_ack(QueuePair& qp);  // sends the coalesced ACK the QP owes, if any
};

}  // namespace uroce::transport
