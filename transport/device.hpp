// A RoCEv2 device: every resource of one port (PDs, MRs, CQs, SRQs, AHs, QPs) and the protocol engine.
//
// No I/O and no threads: the owner calls the control verbs, delivers received frames with receive(),
// calls run() to let requesters send and timers fire, and transmits what comes out of the PacketSink.
// Results are errno values (0 = success), which is what the verbs interface reports.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "transport/dcqcn.hpp"
#include "transport/flow/flow_rule.hpp"
#include "transport/memory/memory_backend.hpp"
#include "transport/packet_io.hpp"
#include "transport/receive_queue.hpp"
#include "transport/verbs/work.hpp"
#include "transport/wire/address.hpp"

namespace uroce::transport {

struct DeviceLimits {
  uint32_t max_qp = 4096;
  uint32_t max_cq = 4096;
  uint32_t max_mr = 65536;
  uint32_t max_srq = 1024;
  uint32_t max_ah = 65536;
  uint32_t max_pd = 4096;
  // A ConnectX-5's (2^22 - 1): libfabric's ofi_rxm asks for 2^18 entries for one endpoint's CQ, which rxe's
  // 32767 refuses (fi_enable fails with -22). A ring's memory is only touched as completions fill it.
  uint32_t max_cqe = 4194303;
  uint32_t max_qp_wr = 16384;
  uint32_t max_sge = 32;
  uint32_t max_inline_data = 256;
  uint32_t max_srq_wr = 16384;
  uint8_t max_qp_rd_atom = 128;       // max_rd_atomic and max_dest_rd_atomic ceiling
  uint64_t max_mr_size = ~uint64_t(0);
  uint32_t max_mcast_grp = 8192;                 // multicast groups with at least one QP (rxe's limits)
  uint32_t max_mcast_qp_attach = 56;             // QPs in one group
  uint32_t max_total_mcast_qp_attach = 0x70000;  // attachments over every group
  uint32_t max_flows = 65536;                    // flow steering rules (ibv_create_flow) on the port
  // Tag matching (ibv_query_device_ex's tm_caps): tagged buffers per TM SRQ, list operations in flight
  // (ibv_post_srq_ops is carried out at once, so never more than one), the longest rendezvous request and
  // SGEs per tagged buffer.
  uint32_t max_num_tags = 1024;
  uint32_t max_tm_ops = 1024;
  uint32_t max_rndv_hdr_size = 64;
  uint32_t max_tm_sge = 1;
};

// Congestion control as RoCE NICs do it (DCQCN), both halves:
// - notification point: a packet that a switch marked Congestion Experienced (IP ECN 11) makes its
//   receiver send the sender's QP a CNP (BTH opcode 0x81, BECN set). At most one CNP per QP per
//   cnp_interval, as NICs pace them. CNPs go with DSCP cnp_dscp and ECT(0), as a ConnectX-4 Lx sends them
//   (TOS 0xC2: ../shared/notes/rocev2.md).
// - reaction point: a CNP to one of our QPs cuts that QP's sending rate, which then recovers in DCQCN's
//   stages (dcqcn.hpp); the requester paces its packets to the rate. With `react`, data packets are sent
//   ECN-capable (ECT(0)) so that switches mark them instead of dropping them.
// Connected QPs (RC, UC) only: a UD datagram names no reply QP to throttle.
struct CongestionConfig {
  bool notify = true;                // send CNPs for CE-marked packets
  uint64_t cnp_interval_ns = 50'000;  // per QP (DCQCN's N, 50 us)
  uint8_t cnp_dscp = 48;
  bool react = true;                 // rate control on CNPs, and ECT(0) on data packets
  DcqcnConfig dcqcn;
};

struct QpInitAttr {
  uint32_t pd = 0;
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  uint32_t srq = 0;          // 0 = the QP has its own receive queue
  uint32_t xrcd = 0;         // XRC target (xrc_recv): its domain; it has no PD, CQs or SRQ of its own
  verbs::QpCap cap;
  verbs::QpType type = verbs::QpType::rc;
  bool sq_sig_all = false;
  // An RSS QP (raw packet, IBV_QP_INIT_ATTR_IND_TABLE and RX_HASH): no queues of its own; the frames its
  // flow rules take go to the work queue of `ind_table` the Toeplitz hash (transport/flow/rss_hash.hpp) of
  // the selected fields picks.
  uint32_t ind_table = 0;
  uint64_t rx_hash_fields = 0;
  std::vector<uint8_t> rx_hash_key;
};

struct AsyncEvent {
  verbs::EventType type;
  uint32_t object = 0;  // QP, CQ or SRQ number, by type
};

// Why received frames were dropped, and what the protocol engine did; read by `uroce stats`.
struct DeviceCounters {
  uint64_t rx_frames = 0;
  uint64_t rx_malformed = 0;
  uint64_t rx_bad_icrc = 0;
  uint64_t rx_placed_early = 0;  // payloads copied into place while their ICRC was checked (one pass)
  uint64_t rx_not_roce = 0;
  uint64_t rx_unknown_qp = 0;
  uint64_t rx_bad_pkey = 0;
  uint64_t rx_bad_qkey = 0;
  uint64_t rx_wrong_transport = 0;  // opcode of another transport than the QP's
  uint64_t rx_qp_not_ready = 0;     // QP in a state that does not receive
  // UD datagrams, and UC messages (once, at the packet that needed the receive), lost because the QP had
  // no receive posted: the unreliable transports have no RNR NAK, so they are simply gone, as a ConnectX
  // counts them in out_of_buffer. A receiver that falls behind its senders shows here.
  uint64_t rx_no_receive = 0;
  uint64_t rx_duplicates = 0;
  uint64_t rx_out_of_sequence = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_retransmitted = 0;
  uint64_t naks_sent = 0;
  uint64_t naks_received = 0;
  uint64_t rnr_naks_sent = 0;
  uint64_t rnr_naks_received = 0;
  uint64_t receive_queues_low = 0;  // falls to half of a queue's peak (take_low_receive_queues)
  uint64_t timeouts = 0;
  uint64_t cq_overflows = 0;
  uint64_t rx_gsi = 0;          // MADs delivered to the GSI handler
  uint64_t rx_gsi_dropped = 0;  // to QP1 but not a GSI datagram (opcode, Q_Key, P_Key, size) or no handler
  uint64_t tx_gsi = 0;
  // Datagrams to the multicast QPN: handed to at least one attached QP (past that QP's P_Key, transport and
  // state checks; the Q_Key is checked after, as for any datagram), or dropped because no QP is attached to
  // the group (the destination IP address).
  uint64_t rx_multicast = 0;
  uint64_t rx_multicast_no_members = 0;
  // Congestion: RoCE packets to a QP that arrived marked CE, CNPs sent for them, CNPs received, the rate
  // cuts they made (CNPs within the minimum interval of a cut make none), requester stops to pace (to
  // DCQCN's rate, or to a raw packet QP's packet pacing).
  uint64_t rx_ecn_ce = 0;
  uint64_t cnp_sent = 0;
  uint64_t rx_cnp = 0;
  uint64_t rate_cuts = 0;
  uint64_t paced_stops = 0;
  // Raw packet QPs: frames delivered to one (a frame two QPs take counts twice), frames a flow rule
  // steered to a QP that had no receive posted or was not ready (lost, as on a NIC), frames dropped by a
  // rule's drop action, frames sent, and frames refused at sending (too short or longer than the port's
  // MTU allows: the work request completes with a length error).
  uint64_t rx_raw = 0;
  uint64_t rx_raw_no_receive = 0;
  uint64_t rx_raw_dropped_by_rule = 0;
  uint64_t tx_raw = 0;
  uint64_t tx_raw_bad_length = 0;
};

// What one queue pair did (`uroce stats` per QP). NAKs by their code: PSN sequence error, invalid request,
// remote access error, remote operational error (wire::NakCode 0..3; anything else in the last slot).
struct QpCounters {
  uint64_t tx_packets = 0;
  uint64_t tx_payload_bytes = 0;
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;            // whole frames
  uint64_t tx_retransmitted = 0;
  uint64_t rx_duplicates = 0;
  uint64_t rx_out_of_sequence = 0;
  uint64_t timeouts = 0;
  uint64_t rnr_naks_sent = 0;
  uint64_t rnr_naks_received = 0;
  std::array<uint64_t, 5> naks_sent{};
  std::array<uint64_t, 5> naks_received{};
  uint64_t rx_ecn_ce = 0;
  uint64_t cnp_sent = 0;
  uint64_t rx_cnp = 0;
  uint64_t rate_cuts = 0;
};

// A MAD received on QP1, the General Services Interface (connection management, above the transport:
// transport/cm). Valid only during the handler call.
struct GsiDatagram {
  wire::IpAddress source_gid;  // the sender's port (the IP source address)
  uint32_t source_qpn = 0;     // its GSI QP (DETH source QP), where answers go
  uint8_t sl = 0;              // its SL: the frame's 802.1p priority (as ConnectX reports it), 0 untagged
  uint16_t pkey = 0;
  std::span<const uint8_t> mad;
};
using GsiHandler = std::function<void(const GsiDatagram&, Nanos)>;

class DeviceImpl;

class Device {
 public:
  explicit Device(PacketSink& sink, DeviceLimits limits = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Addressing: the port's GID table (index 0 first) and its active MTU.
  void set_gids(std::vector<wire::IpAddress> gids);
  void set_active_mtu(verbs::Mtu mtu);
  // The longest Ethernet frame a raw packet QP may send or the port takes: its IP MTU plus the Ethernet
  // header and one 802.1Q tag (1518 for the usual 1500).
  void set_max_raw_frame(uint32_t bytes);
  uint32_t max_raw_frame() const;
  const DeviceLimits& limits() const;

  // Control verbs.
  int alloc_pd(uint32_t& pd);
  int dealloc_pd(uint32_t pd);
  int reg_mr(uint32_t pd, uint64_t iova, uint64_t length, uint32_t access, std::shared_ptr<MemoryBackend> memory,
             uint64_t memory_offset, uint32_t& key);
  // ibv_rereg_mr. The keys change only with `new_translation` (IBV_REREG_MR_CHANGE_TRANSLATION): a new PD or
  // new access rights keep them, as rxe and mlx5 keep theirs, and rdma-core's tests (test_mr) expect.
  int rereg_mr(uint32_t key, uint32_t pd, uint64_t iova, uint64_t length, uint32_t access,
               std::shared_ptr<MemoryBackend> memory, uint64_t memory_offset, bool new_translation,
               uint32_t& new_key);
  int dereg_mr(uint32_t key);  // EINVAL while windows are bound to the region, as rxe
  // What a region was registered with (ibv_import_mr); EINVAL if `key` is no region's.
  struct RegionInfo {
    uint32_t pd = 0;
    uint64_t iova = 0;
    uint64_t length = 0;
    uint32_t access = 0;
  };
  int query_mr(uint32_t key, RegionInfo& info) const;
  // Memory windows (ibv_alloc_mw, ibv_dealloc_mw): an rkey of its own in `pd`, unbound until a BIND_MW work
  // request (post_send, WrOpcode::bind_mw) opens part of a region through it. Its number is rkey >> 8.
  // Deallocating unbinds it. EINVAL: no such PD or type; ENOMEM: the key table is full.
  int alloc_mw(uint32_t pd, verbs::MwType type, uint32_t& rkey);
  int dealloc_mw(uint32_t mw);
  int create_cq(uint32_t cqe, uint32_t& cqn);
  int resize_cq(uint32_t cqn, uint32_t cqe);
  int destroy_cq(uint32_t cqn);
  int create_srq(uint32_t pd, uint32_t max_wr, uint32_t max_sge, uint32_t limit, uint32_t& srqn);
  // XRC (ibv_open_xrcd, ibv_create_srq_ex with IBV_SRQT_XRC): a domain groups XRC SRQs and target QPs; a
  // request to a target QP names an SRQ of the same domain (XRCETH), which takes a SEND and whose CQ and
  // PD the request is completed and checked with. The SRQ number is what initiators name.
  int alloc_xrcd(uint32_t& xrcd);
  int dealloc_xrcd(uint32_t xrcd);  // EBUSY while an SRQ or target QP is in it
  int create_xrc_srq(uint32_t pd, uint32_t xrcd, uint32_t cq, uint32_t max_wr, uint32_t max_sge, uint32_t limit,
                     uint32_t& srqn);
  int modify_srq(uint32_t srqn, uint32_t limit);  // arms the limit event
  // Tag matching (ibv_create_srq_ex with IBV_SRQT_TM, ibv_post_srq_ops; rdma-core's
  // Documentation/tag_matching.md): an SRQ that also holds tagged buffers, matched against the tag of
  // each SEND that starts with a tag matching header, and whose CQ takes the list operations' completions
  // and the receive completions of every QP on it. A matched eager message lands in its tagged buffer
  // without the header; a matched rendezvous request is fetched with an RDMA READ on the QP's send queue,
  // then a FIN tells the sender. Everything else is unexpected and goes whole to an ordinary receive
  // (qp/tag_matching.cpp). create_tm_srq: EINVAL for a bad PD or CQ, or limits above the device's.
  int create_tm_srq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge, uint32_t limit, uint32_t max_tags,
                    uint32_t max_ops, uint32_t& srqn);
  // One list operation on TM SRQ `srqn`, carried out at once; signalled ones complete on the SRQ's CQ. ADD
  // returns the new entry's handle. EINVAL: not a TM SRQ, an unknown opcode or flag, more SGEs than
  // max_tm_sge; ENOMEM: ADD to a list that holds max_tags entries. A DEL of an entry already consumed (or
  // never added) completes with IBV_WC_TM_ERR.
  int post_srq_op(uint32_t srqn, const verbs::TagOp& op, uint32_t& handle, Nanos now);
  // Receive work queues (ibv_create_wq, IBV_WQT_RQ): receive queues with a CQ of their own, numbered with
  // the SRQs (post_srq_recv posts to them), created in RESET. modify_wq: RESET from any state (posted
  // receives are dropped), RDY from RESET or RDY, ERR from anywhere (posted receives complete with
  // IBV_WC_WR_FLUSH_ERR); EINVAL otherwise. destroy_wq: EBUSY while an indirection table holds it.
  int create_wq(uint32_t pd, uint32_t cq, uint32_t max_wr, uint32_t max_sge, uint32_t& wqn);
  int modify_wq(uint32_t wqn, WqState state);
  int query_wq_state(uint32_t wqn, WqState& state) const;
  int destroy_wq(uint32_t wqn);
  // Indirection tables (ibv_create_rwq_ind_table): 2^n work queues (n <= log_max_ind_table). destroy:
  // EBUSY while an RSS QP uses it.
  static constexpr unsigned log_max_ind_table = 12;
  int create_rwq_ind_table(const std::vector<uint32_t>& wqs, uint32_t& table);
  int destroy_rwq_ind_table(uint32_t table);
  int destroy_srq(uint32_t srqn);
  int create_ah(uint32_t pd, const verbs::AddressVector& av, uint32_t& ahn);
  int destroy_ah(uint32_t ahn);
  int create_qp(const QpInitAttr& attr, uint32_t& qpn);
  int modify_qp(uint32_t qpn, const verbs::QpAttr& attr, uint32_t mask, Nanos now);
  int query_qp(uint32_t qpn, verbs::QpAttr& attr) const;
  int destroy_qp(uint32_t qpn);  // also detaches the QP from every multicast group it is in
  // The source GID indexes in use: named by an address handle, or by a connected QP's address vector
  // once it has one (RTR and after, the error states included, until it is destroyed or reset). Linux's GID
  // cache keeps such an entry, its address removed, from a new address until it is let go.
  std::bitset<256> source_gids_in_use() const;

  // UD multicast (ibv_attach_mcast / ibv_detach_mcast): a datagram to the multicast QPN (0xFFFFFF) whose
  // destination IP is `mgid` goes to every QP attached to it, each checked as if it were addressed to it.
  // attach_mcast: EINVAL if there is no such QP, it is not UD or `mgid` is not a multicast address (the
  // kernel's ib_attach_mcast); 0 and no change if the QP is attached already; ENOMEM past max_mcast_grp
  // groups, max_mcast_qp_attach QPs in the group or max_total_mcast_qp_attach attachments in all.
  int attach_mcast(uint32_t qpn, const wire::IpAddress& mgid);
  // EINVAL if there is no such QP or it is not attached to `mgid`. A group dies with its last QP.
  int detach_mcast(uint32_t qpn, const wire::IpAddress& mgid);
  // The groups with at least one QP attached, in address order: what the port must receive (its MAC
  // filter) and join (IGMP/MLD).
  std::vector<wire::IpAddress> multicast_groups() const;
  bool has_multicast_group(const wire::IpAddress& mgid) const;
  // Changes whenever multicast_groups() does (a group appears or disappears, not when a group only gains
  // or loses members), so the port's owner refreshes its filter and memberships only when needed.
  uint64_t multicast_generation() const;

  // Data path verbs.
  int post_send(uint32_t qpn, const verbs::SendWr& wr, Nanos now);
  int post_recv(uint32_t qpn, const verbs::RecvWr& wr);
  int post_srq_recv(uint32_t srqn, const verbs::RecvWr& wr);
  // Takes up to out.size() completions; returns how many, or -errno.
  int poll_cq(uint32_t cqn, std::span<verbs::WorkCompletion> out);

  // Flow steering (ibv_create_flow, ibv_destroy_flow): rules that give raw packet QPs the frames the port
  // receives (transport/flow/flow_table.hpp says how a frame is steered). create_flow: EINVAL if there is
  // no such QP or it is not a raw packet QP, or the rule is malformed (specs on a default or sniffer rule);
  // EOPNOTSUPP for an egress rule; ENOMEM past limits().max_flows. A QP with rules cannot be destroyed
  // (EBUSY), as in the kernel, where each rule holds its QP.
  int create_flow(uint32_t qpn, flow::FlowRule rule, uint32_t& handle);
  int destroy_flow(uint32_t handle);
  bool has_flows() const;
  uint32_t flow_count() const;  // the rules in the table (`uroce stats`: flow_rules)
  bool has_sniffers() const;
  // A frame the port received, or a raw frame one of its QPs (`sender`) sent that loops back: sniffer
  // rules get a copy, normal rules may take it. True if a rule trapped or dropped it: the port's own
  // stack (the caller) must leave it alone.
  bool steer(std::span<const uint8_t> frame, Nanos now, uint32_t sender = 0);
  // A frame neither a rule nor the port's stack took: the default rules' (ALL_DEFAULT, MC_DEFAULT).
  void steer_unclaimed(std::span<const uint8_t> frame, Nanos now, uint32_t sender = 0);
  // A frame the port sends: the sniffer rules' copy.
  void sniff_sent(std::span<const uint8_t> frame, Nanos now);

  // The engine.
  void receive(std::span<const uint8_t> frame, Nanos now);  // one Ethernet frame from the port
  void run(Nanos now);              // lets requesters send and fires due timers
  Nanos next_deadline() const;      // when run() must be called again at the latest (never if idle)
  bool has_pending_work() const;    // a requester has something it could send now

  // QP1: UD SEND_ONLY packets to QP 1 with the GSI Q_Key go to `handler` (engine thread), not to a QP;
  // send_gsi sends one MAD from QP 1 to `dest_qpn` of the port `destination` names. Without a handler,
  // MADs are counted (rx_gsi_dropped) and dropped.
  void set_gsi_handler(GsiHandler handler);
  void set_congestion(const CongestionConfig& config);
  int send_gsi(const verbs::AddressVector& destination, uint32_t dest_qpn, std::span<const uint8_t> mad);

  // The CQs that got completions since the last call, each once, in the order of its first one (swapped
  // into `out`). A NIC writes completion events in completion order; programs that wait for two CQs on one
  // channel rely on it (perftest's ib_send_lat -e: a send and a receive CQ), so uroced delivers in this order.
  void take_active_cqs(std::vector<uint32_t>& out);
  // The QPs whose receive queue (their own or their SRQ) fell to half of the most it held, since the last
  // call (swapped into `out`). Not a protocol event: a hint for whoever schedules the application that
  // posts those receives. A receiver that stops reposting because it is not running is about to be sent
  // RNR NAKs, and each costs its sender the RNR timer (uroced's engine then naps: emulator/engine/back_off.hpp).
  void take_low_receive_queues(std::vector<uint32_t>& out);
  // The QPs whose own receive queue gave up work requests since the last call (taken by a message, flushed
  // by an error, dropped by RESET), each once (swapped into `out`); and how many a QP's queue holds. uroced
  // frees a receive ring's slots only as its requests leave the queue, so that ibv_post_recv fails with
  // ENOMEM once max_recv_wr requests are outstanding, as on a NIC, however fast the engine takes them.
  void take_retired_receives(std::vector<uint32_t>& out);
  uint32_t receive_queue_size(uint32_t qpn) const;
  // The same for shared receive queues, by SRQ number (ibv_post_srq_recv's ENOMEM at max_wr).
  void take_retired_srq_receives(std::vector<uint32_t>& out);
  uint32_t srq_size(uint32_t srqn) const;
  std::vector<AsyncEvent> take_events();
  const DeviceCounters& counters() const;
  // Every QP's counters, by QP number.
  void for_each_qp_counters(const std::function<void(uint32_t qpn, const QpCounters&)>& visit) const;

 private:
  std::unique_ptr<DeviceImpl> impl_;
};

}  // namespace uroce::transport
