// The responder: what a QP does with requests that arrive (rxe's rxe_resp.c), as a pipeline of checks
// in the order the specification and rxe apply them: PSN, opcode sequence, access, resources (RNR),
// length, R_Key; then execution, completion and acknowledgement. Each failed check has one outcome:
// for RC a NAK (and for fatal ones the error state), for UC and UD a silent, counted drop.
#include <algorithm>
#include <cstring>

#include "transport/device_impl.hpp"

namespace uroce::transport {

using namespace uroce::verbs;
using wire::Operation;
using wire::Position;

namespace {

bool starts_message(Position p) { return p == Position::first || p == Position::only; }
bool ends_message(Position p) { return p == Position::last || p == Position::only; }

}  // namespace

uint32_t sge_total(const RecvWr& r) {
  uint64_t n = 0;
  for (const Sge& s : r.sg_list) n += s.length;
  return uint32_t(std::min<uint64_t>(n, 0xffffffffu));
}

// Moves the next receive WQE from the QP's queue or its SRQ into `into` (firing the SRQ limit event
// when the SRQ drops below its limit, and noting a queue that runs low); false if there is none.
bool take_receive(DeviceImpl& d, QueuePair& qp, std::optional<RecvWr>& into) {
  ReceiveQueue* q = d.receive_queue(qp);
  if (q == nullptr || q->wrs.empty()) return false;
  into.emplace(std::move(q->wrs.front()));
  q->wrs.pop_front();
  if (qp.srq == 0) {
    d.note_receives_retired(qp);
  } else {
    d.note_srq_receives_retired(qp.srq, *q);
  }
  if (q->peak >= low_receive_queue_min_peak && q->wrs.size() * 2 <= q->peak) {
    q->peak = uint32_t(q->wrs.size());  // one report per fall: the next needs a new peak
    d.note_low_receive_queue(qp.qpn);
  }
  if (qp.srq != 0 && q->limit_armed && q->wrs.size() < q->limit) {
    q->limit_armed = false;  // one event per arming (ibv_modify_srq re-arms)
    d.raise(EventType::srq_limit_reached, qp.srq);
  }
  return true;
}

namespace {

class RcResponder {
 public:
  RcResponder(DeviceImpl& d, QueuePair& qp, const wire::Frame& f)
      : d_(d), qp_(qp), f_(f), bth_(f.roce.bth()), info_(*f.roce.info), h_(f.roce.headers) {}

  void handle() {
    const int32_t diff = wire::psn_diff(bth_.psn, qp_.resp.psn);
    if (diff > 0) return out_of_sequence();
    if (diff < 0) return duplicate();
    qp_.resp.nak_sent = false;
    if (!check_sequence() || !check_xrc_srq() || !check_access() || !check_resources() || !check_length() ||
        !check_rkey()) {
      return;
    }
    execute();
  }

 private:
  // -- PSN --------------------------------------------------------------------------------------------
  void out_of_sequence() {
    ++d_.counters_.rx_out_of_sequence;
    ++qp_.counters.rx_out_of_sequence;
    // One NAK per gap, as rxe: then silence until the expected PSN arrives.
    if (qp_.resp.nak_sent) return;
    qp_.resp.nak_sent = true;
    send_aeth(wire::Aeth::nak(qp_.resp.msn, wire::NakCode::psn_sequence_error), qp_.resp.psn);
  }

  void duplicate() {
    ++d_.counters_.rx_duplicates;
    ++qp_.counters.rx_duplicates;
    switch (info_.operation) {
      case Operation::send:
      case Operation::rdma_write:
        // C9-105: acknowledge again, with the PSN of the last request accepted.
        send_aeth(wire::Aeth::ack(qp_.resp.msn), (qp_.resp.psn - 1) & wire::psn_mask);
        return;
      case Operation::rdma_read_request:
      case Operation::atomic_write: {
        // A READ is read again; an ATOMIC WRITE is not placed again, its empty response is resent.
        const bool read = info_.operation == Operation::rdma_read_request;
        const ResponderResource* res = find_resource(read ? ResourceKind::read : ResourceKind::atomic_write);
        if (res != nullptr) send_read_response(*res, bth_.psn);
        return;
      }
      case Operation::compare_swap:
      case Operation::fetch_add: {
        // Never executed twice: the saved result is sent again.
        const ResponderResource* res = find_resource(ResourceKind::atomic);
        if (res != nullptr) send_atomic_ack(*res);
        return;
      }
      default:
        return;
    }
  }

  const ResponderResource* find_resource(ResourceKind kind) const {
    for (const ResponderResource& r : qp_.resp.resources) {
      if (r.valid && r.kind == kind && wire::psn_diff(bth_.psn, r.first_psn) >= 0 &&
          wire::psn_diff(bth_.psn, r.last_psn) <= 0) {
        return &r;
      }
    }
    return nullptr;
  }

  // -- checks -----------------------------------------------------------------------------------------
  bool check_sequence() {
    const Position p = info_.position;
    bool ok;
    if (qp_.resp.in_message()) {
      ok = (p == Position::middle || p == Position::last) && uint8_t(info_.operation) == qp_.resp.last_operation;
    } else {
      ok = starts_message(p);
    }
    if (!ok) fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
    return ok;
  }

  // An XRC target takes each new message into the SRQ its XRCETH names, which must be an XRC SRQ of the
  // target's domain; the message is then checked with that SRQ's PD and completes to its CQ. (A message in
  // progress keeps the SRQ it started with.)
  bool check_xrc_srq() {
    if (qp_.type != QpType::xrc_recv || !starts_message(info_.position)) return true;
    const auto it = d_.srqs_.find(h_.xrceth.srq);
    if (it == d_.srqs_.end() || it->second.xrcd != qp_.xrcd) {
      fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
      return false;
    }
    qp_.srq = it->first;
    qp_.pd = it->second.pd;
    qp_.recv_cq = it->second.cq;
    return true;
  }

  bool check_access() {
    uint32_t need = 0;
    switch (info_.operation) {
      case Operation::rdma_write:
      case Operation::atomic_write: need = access_remote_write; break;  // ATOMIC WRITE: as rxe
      case Operation::rdma_read_request: need = access_remote_read; break;
      case Operation::compare_swap:
      case Operation::fetch_add: need = access_remote_atomic; break;
      case Operation::send: break;
      default:
        fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
        return false;
    }
    if ((qp_.attr.qp_access_flags & need) != need) {
      fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
      return false;
    }
    return true;
  }

  bool needs_receive() const {
    return (info_.operation == Operation::send && starts_message(info_.position)) ||
           (info_.operation == Operation::rdma_write && info_.has(wire::hdr_immdt) && !qp_.resp.recv);
  }

  bool check_resources() {
    if (needs_receive() && !qp_.resp.recv) {
      // A SEND on a tag matching SRQ may take a tagged buffer instead (a WRITE with immediate never does).
      const bool tagged = info_.operation == Operation::send && qp_.tag_matching;
      const bool taken = tagged ? d_.take_tagged_receive(qp_, f_.roce.payload, info_.position == Position::only,
                                                         qp_.resp.recv)
                                : take_receive(d_, qp_, qp_.resp.recv);
      if (!taken) {
        // Receiver not ready: the requester waits the QP's min_rnr_timer and resends from this PSN.
        ++d_.counters_.rnr_naks_sent;
        ++qp_.counters.rnr_naks_sent;
        send_aeth(wire::Aeth::rnr_nak(qp_.resp.msn, qp_.attr.min_rnr_timer), bth_.psn);
        return false;
      }
      // A SEND starts filling the receive; a WRITE with immediate keeps counting the bytes it wrote.
      if (info_.operation == Operation::send) qp_.resp.received = 0;
    }
    const bool rd_atomic = info_.operation == Operation::rdma_read_request ||
                           info_.operation == Operation::compare_swap || info_.operation == Operation::fetch_add ||
                           info_.operation == Operation::atomic_write;
    if (rd_atomic && qp_.attr.max_dest_rd_atomic == 0) {
      fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
      return false;
    }
    return true;
  }

  bool check_length() {
    const size_t len = f_.roce.payload.size();
    const unsigned mtu = qp_.mtu();
    const Position p = info_.position;
    bool ok = true;
    if (p == Position::first || p == Position::middle) ok = len == mtu;
    else if (info_.has_payload) ok = len <= mtu;
    if (ok && info_.operation == Operation::send) {
      // A matched eager message's TMH is not placed; a rendezvous request is not placed at all.
      const QueuePair::Responder& r = qp_.resp;
      ok = TagMessage(r.tm_kind) == TagMessage::rendezvous ||
           uint64_t(r.received) + len <= uint64_t(sge_total(*r.recv)) + r.tm_skip;
      if (!ok) {
        fatal(wire::NakCode::invalid_request, WcStatus::loc_len_err, EventType::qp_req_err);
        return false;
      }
    }
    if (ok && info_.operation == Operation::atomic_write) ok = len == 8 && h_.reth.dma_length == 8;  // A19.4.2
    if (ok && info_.operation == Operation::rdma_write) {
      const uint32_t total = info_.has(wire::hdr_reth) ? h_.reth.dma_length : qp_.resp.write_length;
      const uint32_t so_far = info_.has(wire::hdr_reth) ? 0 : qp_.resp.received;
      ok = uint64_t(so_far) + len <= total && (!ends_message(p) || so_far + len == total);
    }
    if (!ok) fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
    return ok;
  }

  bool check_rkey() {
    uint64_t va = 0;
    uint32_t rkey = 0, len = 0, access = 0;
    if (info_.operation == Operation::rdma_write && info_.has(wire::hdr_reth)) {
      va = h_.reth.va, rkey = h_.reth.rkey, len = h_.reth.dma_length, access = access_remote_write;
    } else if (info_.operation == Operation::rdma_read_request) {
      va = h_.reth.va, rkey = h_.reth.rkey, len = h_.reth.dma_length, access = access_remote_read;
    } else if (info_.operation == Operation::compare_swap || info_.operation == Operation::fetch_add ||
               info_.operation == Operation::atomic_write) {
      const bool write = info_.operation == Operation::atomic_write;
      va = write ? h_.reth.va : h_.atomic_eth.va;
      if ((va & 7) != 0) {  // both kinds of atomic need an 8-byte aligned address (rxe: MISALIGNED_ATOMIC)
        fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
        return false;
      }
      rkey = write ? h_.reth.rkey : h_.atomic_eth.rkey, len = 8;
      access = write ? access_remote_write : access_remote_atomic;
    } else {
      return true;
    }
    if (len == 0) return true;  // a zero-length RDMA operation touches no memory: its R_Key is not checked
    if (d_.mrs_.check_remote(rkey, qp_.pd, qp_.qpn, va, len, access) != KeyCheck::ok) {
      fatal(wire::NakCode::remote_access_error, WcStatus::rem_access_err, EventType::qp_access_err);
      return false;
    }
    return true;
  }

  // -- execution --------------------------------------------------------------------------------------
  void execute() {
    QueuePair::Responder& r = qp_.resp;
    const auto payload = f_.roce.payload;
    switch (info_.operation) {
      case Operation::send: {
        // The bytes of the message that are placed: all but a matched eager message's TMH, and none of a
        // rendezvous request (its data comes by READ).
        std::span<const uint8_t> placed = payload;
        uint32_t at = r.received;
        if (at < r.tm_skip) {
          placed = placed.subspan(std::min<size_t>(r.tm_skip - at, placed.size()));
          at = r.tm_skip;
        }
        if (TagMessage(r.tm_kind) != TagMessage::rendezvous && !placed.empty() &&
            d_.scatter(r.recv->sg_list, qp_.pd, at - r.tm_skip, placed) != KeyCheck::ok) {
          fatal(wire::NakCode::remote_operational_error, WcStatus::loc_prot_err, EventType::qp_fatal);
          return;
        }
        r.received += uint32_t(payload.size());
        if (TagMessage(r.tm_kind) == TagMessage::eager && info_.position == Position::first) d_.post_tag_match(qp_);
        break;
      }
      case Operation::rdma_write:
        if (info_.has(wire::hdr_reth)) {
          r.write_va = h_.reth.va;
          r.write_rkey = h_.reth.rkey;
          r.write_length = h_.reth.dma_length;
          r.received = 0;
        }
        if (!payload.empty() && !write_memory(r.write_rkey, r.write_va + r.received, payload)) return;
        r.received += uint32_t(payload.size());
        break;
      case Operation::rdma_read_request:
        return execute_read();
      case Operation::compare_swap:
      case Operation::fetch_add:
        return execute_atomic();
      case Operation::atomic_write:
        return execute_atomic_write();
      default:
        return;
    }
    r.psn = (bth_.psn + 1) & wire::psn_mask;
    r.last_opcode_position = uint8_t(info_.position);
    r.last_operation = uint8_t(info_.operation);
    if (ends_message(info_.position)) {
      r.msn = (r.msn + 1) & wire::psn_mask;
      if (!complete_receive()) return;
    }
    if (bth_.ack_req) owe_ack(bth_.psn);
  }

  // False, with the QP failed, if the region's memory could not be written (its key was checked before).
  bool write_memory(uint32_t rkey, uint64_t va, std::span<const uint8_t> bytes) {
    const MemoryRegion* mr = nullptr;
    if (d_.mrs_.check_remote(rkey, qp_.pd, qp_.qpn, va, bytes.size(), access_remote_write, &mr) != KeyCheck::ok) {
      fatal(wire::NakCode::remote_operational_error, WcStatus::rem_op_err, EventType::qp_fatal);
      return false;
    }
    if (d_.write_payload(*mr, mr->memory_offset + (va - mr->iova), bytes.data(), bytes.size())) return true;
    memory_failed(*mr);
    return false;
  }

  // A region's memory failed an access. In an on-demand region that is a page the requester's address
  // names but that cannot be faulted in: its access error, as rxe makes a failed ODP fault an R_Key
  // violation. Elsewhere the memory was pinned and its owner is gone: the responder's own failure.
  void memory_failed(const MemoryRegion& mr) {
    if (mr.access & access_on_demand) {
      fatal(wire::NakCode::remote_access_error, WcStatus::rem_access_err, EventType::qp_access_err);
    } else {
      fatal(wire::NakCode::remote_operational_error, WcStatus::rem_op_err, EventType::qp_fatal);
    }
  }

  // Posts the receive completion of a finished SEND or RDMA WRITE with immediate. False if the QP failed.
  bool complete_receive() {
    QueuePair::Responder& r = qp_.resp;
    const bool imm = info_.has(wire::hdr_immdt);
    const bool is_send = info_.operation == Operation::send;
    if (!is_send && !imm) return true;  // a plain RDMA WRITE completes nothing at the responder
    const bool inv = info_.has(wire::hdr_ieth);
    if (inv && !d_.mrs_.invalidate(h_.ieth, qp_.pd)) {
      fatal(wire::NakCode::invalid_request, WcStatus::rem_inv_req_err, EventType::qp_req_err);
      return false;
    }
    const auto tm = TagMessage(r.tm_kind);
    if (tm == TagMessage::rendezvous) {
      d_.start_rendezvous(qp_, *r.recv, f_.roce.payload);  // one packet: max_rndv_hdr_size is under any MTU
      end_receive();
      return true;
    }
    if (WorkCompletion* wc = d_.new_completion(qp_.recv_cq)) {
      wc->wr_id = r.recv->wr_id;
      wc->opcode = is_send ? WcOpcode::recv : WcOpcode::recv_rdma_with_imm;
      wc->byte_len = is_send ? r.received : r.write_length;
      wc->qp_num = qp_.qpn;
      wc->src_qp = qp_.attr.dest_qp_num;
      wc->solicited = bth_.solicited;
      if (imm) {
        wc->wc_flags |= wc_with_imm;
        wc->imm_data = h_.immdt;
      }
      if (inv) {
        wc->wc_flags |= wc_with_inv;
        wc->imm_data = h_.ieth;
      }
      if (tm != TagMessage::plain) d_.tag_completion(tm, qp_, *wc, r.received, info_.position == Position::only);
    }
    end_receive();
    return true;
  }

  // The receive the message in progress had is done with.
  void end_receive() {
    QueuePair::Responder& r = qp_.resp;
    r.recv.reset();
    r.received = 0;
    r.tm_kind = uint8_t(TagMessage::plain);
    r.tm_skip = 0;
  }

  ResponderResource& new_resource() {
    QueuePair::Responder& r = qp_.resp;
    if (r.resources.empty()) r.resources.resize(1);
    // A ring: the requester must not have more than max_dest_rd_atomic outstanding, so the oldest entry
    // is free to reuse (rxe recycles its resources the same way).
    ResponderResource& res = r.resources[r.next_resource];
    r.next_resource = (r.next_resource + 1) % r.resources.size();
    res = ResponderResource{};
    res.valid = true;
    return res;
  }

  void execute_read() {
    QueuePair::Responder& r = qp_.resp;
    ResponderResource& res = new_resource();
    const uint32_t n = packets_for(h_.reth.dma_length, qp_.mtu());
    res.first_psn = bth_.psn;
    res.last_psn = (bth_.psn + n - 1) & wire::psn_mask;
    res.va = h_.reth.va;
    res.rkey = h_.reth.rkey;
    res.length = h_.reth.dma_length;
    r.msn = (r.msn + 1) & wire::psn_mask;
    res.msn = r.msn;
    r.psn = (res.last_psn + 1) & wire::psn_mask;
    r.last_opcode_position = uint8_t(Position::only);
    send_read_response(res, bth_.psn);
  }

  void execute_atomic() {
    const MemoryRegion* mr = atomic_target(h_.atomic_eth.va, h_.atomic_eth.rkey, access_remote_atomic);
    if (mr == nullptr) return;
    const uint64_t offset = mr->memory_offset + (h_.atomic_eth.va - mr->iova);
    uint64_t original = 0;
    const bool ok = info_.operation == Operation::compare_swap
                        ? mr->memory->compare_swap(offset, h_.atomic_eth.compare, h_.atomic_eth.swap_add, original)
                        : mr->memory->fetch_add(offset, h_.atomic_eth.swap_add, original);
    if (!ok) return memory_failed(*mr);
    ResponderResource& res = accept_single_packet(ResourceKind::atomic);
    res.atomic_original = original;
    send_atomic_ack(res);
  }

  // The 8 bytes land at once: no reader of the word sees part of them (IBTA 1.5 A19.4.2). Earlier
  // requests were all carried out before this one (the responder executes in PSN order), which is the
  // ordering the operation promises. The answer is an empty READ RESPONSE, as from rxe.
  void execute_atomic_write() {
    const MemoryRegion* mr = atomic_target(h_.reth.va, h_.reth.rkey, access_remote_write);
    if (mr == nullptr) return;
    uint64_t value = 0;
    std::memcpy(&value, f_.roce.payload.data(), 8);  // bytes as they travel: placed, not interpreted
    if (!mr->memory->atomic_store(mr->memory_offset + (h_.reth.va - mr->iova), value)) return memory_failed(*mr);
    ResponderResource& res = accept_single_packet(ResourceKind::atomic_write);
    res.length = 0;  // its response carries no data
    send_read_response(res, bth_.psn);
  }

  // The region an atomic's 8 bytes are in (its key was checked before); null, with the QP failed, if the
  // region went away meanwhile.
  const MemoryRegion* atomic_target(uint64_t va, uint32_t rkey, uint32_t access) {
    const MemoryRegion* mr = nullptr;
    if (d_.mrs_.check_remote(rkey, qp_.pd, qp_.qpn, va, 8, access, &mr) != KeyCheck::ok) {
      fatal(wire::NakCode::remote_access_error, WcStatus::rem_access_err, EventType::qp_access_err);
      return nullptr;
    }
    return mr;
  }

  // A one-packet request carried out: it completes a message and is remembered, for a duplicate, in a
  // responder resource of `kind`.
  ResponderResource& accept_single_packet(ResourceKind kind) {
    QueuePair::Responder& r = qp_.resp;
    ResponderResource& res = new_resource();
    res.kind = kind;
    res.first_psn = res.last_psn = bth_.psn;
    r.msn = (r.msn + 1) & wire::psn_mask;
    res.msn = r.msn;
    r.psn = (bth_.psn + 1) & wire::psn_mask;
    r.last_opcode_position = uint8_t(Position::only);
    return res;
  }

  // -- responses --------------------------------------------------------------------------------------
  // The ACK for an executed request is owed, not sent: run() sends one ACK for everything acknowledged
  // in the burst.
  void owe_ack(uint32_t psn) {
    if (!qp_.resp.ack_pending) d_.ack_list_.push_back(&qp_);
    qp_.resp.ack_pending = true;
    qp_.resp.ack_psn = psn;
  }

  void send_aeth(const wire::Aeth& aeth, uint32_t psn) {
    d_.flush_ack(qp_);  // responses leave in PSN order: an owed ACK goes first
    OutPacket packet;
  wire::TransportHeaders& h = packet.headers;
    h.bth.opcode = uint8_t(wire::Opcode::rc_acknowledge);
    h.bth.dest_qp = qp_.attr.dest_qp_num;
    h.bth.psn = psn;
    h.aeth = aeth;
    if (aeth.kind() == wire::AethKind::nak) {
      ++d_.counters_.naks_sent;
      ++qp_.counters.naks_sent[std::min<size_t>(aeth.low_bits(), qp_.counters.naks_sent.size() - 1)];
    }
    d_.transmit(qp_, packet);
  }

  void send_atomic_ack(const ResponderResource& res) {
    d_.flush_ack(qp_);
    OutPacket packet;
  wire::TransportHeaders& h = packet.headers;
    h.bth.opcode = uint8_t(wire::Opcode::rc_atomic_acknowledge);
    h.bth.dest_qp = qp_.attr.dest_qp_num;
    h.bth.psn = res.first_psn;
    h.aeth = wire::Aeth::ack(res.msn);
    h.atomic_ack_eth.original = res.atomic_original;
    d_.transmit(qp_, packet);
  }

  // Sends the response packets of `res` from `from_psn` on (all of them, or the rest for a replay).
  void send_read_response(const ResponderResource& res, uint32_t from_psn) {
    d_.flush_ack(qp_);
    const unsigned mtu = qp_.mtu();
    const uint32_t n = packets_for(res.length, mtu);
    for (uint32_t i = uint32_t(wire::psn_diff(from_psn, res.first_psn)); i < n; ++i) {
      const uint32_t offset = i * mtu;
      const uint32_t len = std::min<uint32_t>(mtu, res.length - offset);
      OutPacket packet;
      wire::TransportHeaders& h = packet.headers;
      h.bth.opcode = uint8_t(n == 1       ? wire::Opcode::rc_rdma_read_response_only
                             : i == 0     ? wire::Opcode::rc_rdma_read_response_first
                             : i == n - 1 ? wire::Opcode::rc_rdma_read_response_last
                                          : wire::Opcode::rc_rdma_read_response_middle);
      h.bth.dest_qp = qp_.attr.dest_qp_num;
      h.bth.psn = (res.first_psn + i) & wire::psn_mask;
      h.aeth = wire::Aeth::ack(res.msn);
      std::span<uint8_t> payload(d_.scratch_.data(), len);
      if (len != 0) {
        const MemoryRegion* mr = nullptr;
        if (d_.mrs_.check_remote(res.rkey, qp_.pd, qp_.qpn, res.va + offset, len, access_remote_read, &mr) !=
                KeyCheck::ok ||
            !mr->memory->read(mr->memory_offset + (res.va + offset - mr->iova), payload.data(), len)) {
          // The region went away between the request and this packet.
          send_aeth(wire::Aeth::nak(qp_.resp.msn, wire::NakCode::remote_access_error), h.bth.psn);
          return;
        }
      }
      packet.payload = payload;
      d_.transmit(qp_, packet);
    }
  }

  // A fatal responder error: NAK (RC), the receive WQE in progress completes with `status`, the QP goes
  // to the error state and the application hears of it through `event`.
  void fatal(wire::NakCode code, WcStatus status, EventType event) {
    send_aeth(wire::Aeth::nak(qp_.resp.msn, code), bth_.psn);
    if (qp_.resp.recv) {
      WorkCompletion wc;
      wc.wr_id = qp_.resp.recv->wr_id;
      wc.status = status;
      wc.opcode = WcOpcode::recv;
      wc.qp_num = qp_.qpn;
      const auto tm = TagMessage(qp_.resp.tm_kind);
      if (tm == TagMessage::eager || tm == TagMessage::rendezvous) {  // a tagged buffer's
        wc.opcode = WcOpcode::tm_recv;
        wc.tm_tag = qp_.resp.tm_tag;
        wc.tm_priv = qp_.resp.tm_priv;
      }
      d_.post_completion(qp_.recv_cq, wc);
      end_receive();
    }
    d_.enter_error(qp_, event);
  }

  DeviceImpl& d_;
  QueuePair& qp_;
  const wire::Frame& f_;
  const wire::Bth& bth_;
  const wire::OpcodeInfo& info_;
  const wire::TransportHeaders& h_;
};

}  // namespace

// -- UC ----------------------------------------------------------------------------------------------------
// No acknowledgements and no NAKs: a gap, a bad key or a missing receive silently drops the message.
namespace {

void drop_uc_message(QueuePair& qp) {
  qp.resp.drop_until_first = true;
  qp.resp.received = 0;
  qp.resp.last_opcode_position = uint8_t(Position::only);
}

void handle_uc(DeviceImpl& d, QueuePair& qp, const wire::Frame& f) {
  const wire::Bth& bth = f.roce.bth();
  const wire::OpcodeInfo& info = *f.roce.info;
  const auto& h = f.roce.headers;
  QueuePair::Responder& r = qp.resp;
  const auto payload = f.roce.payload;
  if (bth.psn != r.psn) {
    ++d.counters_.rx_out_of_sequence;
    ++qp.counters.rx_out_of_sequence;
    drop_uc_message(qp);  // the message in progress lost a packet
  }
  r.psn = (bth.psn + 1) & wire::psn_mask;
  if (r.drop_until_first) {
    if (!starts_message(info.position)) return;
    r.drop_until_first = false;
  }
  if (r.in_message() != !starts_message(info.position)) return drop_uc_message(qp);
  if (info.operation == Operation::rdma_write && !(qp.attr.qp_access_flags & access_remote_write)) {
    return drop_uc_message(qp);
  }
  const unsigned mtu = qp.mtu();
  if ((info.position == Position::first || info.position == Position::middle) ? payload.size() != mtu
                                                                            : payload.size() > mtu) {
    return drop_uc_message(qp);
  }
  if (info.operation == Operation::send || info.has(wire::hdr_immdt)) {
    if (!r.recv) {
      if (info.operation == Operation::send && !starts_message(info.position)) return drop_uc_message(qp);
      if (!take_receive(d, qp, r.recv)) {
        ++d.counters_.rx_no_receive;
        return drop_uc_message(qp);
      }
      if (info.operation == Operation::send) r.received = 0;
    }
  }
  if (info.operation == Operation::send) {
    if (uint64_t(r.received) + payload.size() > sge_total(*r.recv) ||
        d.scatter(r.recv->sg_list, qp.pd, r.received, payload) != KeyCheck::ok) {
      return drop_uc_message(qp);
    }
    r.received += uint32_t(payload.size());
  } else {
    if (info.has(wire::hdr_reth)) {
      r.write_va = h.reth.va;
      r.write_rkey = h.reth.rkey;
      r.write_length = h.reth.dma_length;
      r.received = 0;
    }
    if (uint64_t(r.received) + payload.size() > r.write_length) return drop_uc_message(qp);
    if (!payload.empty()) {
      const MemoryRegion* mr = nullptr;
      if (d.mrs_.check_remote(r.write_rkey, qp.pd, qp.qpn, r.write_va + r.received, payload.size(),
                              access_remote_write, &mr) != KeyCheck::ok ||
          !d.write_payload(*mr, mr->memory_offset + (r.write_va + r.received - mr->iova), payload.data(),
                           payload.size())) {
        return drop_uc_message(qp);
      }
    }
    r.received += uint32_t(payload.size());
  }
  r.last_opcode_position = uint8_t(info.position);
  r.last_operation = uint8_t(info.operation);
  if (!ends_message(info.position)) return;
  if (info.operation == Operation::rdma_write && !info.has(wire::hdr_immdt)) return;
  if (info.operation == Operation::rdma_write && r.received != r.write_length) return drop_uc_message(qp);
  WorkCompletion wc;
  wc.wr_id = r.recv->wr_id;
  wc.opcode = info.operation == Operation::send ? WcOpcode::recv : WcOpcode::recv_rdma_with_imm;
  wc.byte_len = info.operation == Operation::send ? r.received : r.write_length;
  wc.qp_num = qp.qpn;
  wc.src_qp = qp.attr.dest_qp_num;
  wc.solicited = f.roce.bth().solicited;
  if (info.has(wire::hdr_immdt)) {
    wc.wc_flags |= wc_with_imm;
    wc.imm_data = h.immdt;
  }
  r.recv.reset();
  r.received = 0;
  d.post_completion(qp.recv_cq, wc);
}

// -- UD ----------------------------------------------------------------------------------------------------
// Every datagram lands behind a 40-byte GRH area: for IPv4 twenty zero bytes and then the IPv4 header,
// for IPv6 the IPv6 header (what rxe writes, and what ibv_ud_pingpong skips): ud_grh_size bytes.

// A RoCE datagram's completion carries no SL (RoCE has none: a VLAN's priority is the nearest thing). In
// its place ConnectX reports the packet's type, and so does uroce: bit 3 set for a UDP header (RoCE v2),
// and in bits 2:0 the L3 header, 2 for IPv4, 1 for IPv6 (0 would be RoCE v1's GRH). That is what
// mlx5's provider hands out as ibv_wc.sl (the CQE's flags_rqpn bits 27:24), and hns's does the same.
// Programs depend on it: UCX up to 1.17 (Debian 12 ships 1.13) reads sl & 7 to know whether the GRH
// area holds an IPv4 header, and otherwise compares 16 bytes of it with its GIDs, which drops every
// IPv4 datagram (its UD transport then never connects).
uint8_t roce_packet_type(const wire::Frame& f) {
  constexpr uint8_t udp_header = 0x8, ipv4 = 0x2, ipv6 = 0x1;
  return udp_header | (f.ip_version == wire::IpVersion::v4 ? ipv4 : ipv6);
}

void handle_ud(DeviceImpl& d, QueuePair& qp, const wire::Frame& f) {
  const auto& h = f.roce.headers;
  if (h.deth.qkey != qp.attr.qkey) {
    ++d.counters_.rx_bad_qkey;
    return;
  }
  std::optional<RecvWr> recv;
  if (!take_receive(d, qp, recv)) {
    ++d.counters_.rx_no_receive;
    return;
  }
  const auto payload = f.roce.payload;
  WorkCompletion wc;
  wc.wr_id = recv->wr_id;
  wc.opcode = WcOpcode::recv;
  wc.qp_num = qp.qpn;
  wc.src_qp = h.deth.src_qp;
  wc.sl = roce_packet_type(f);
  wc.solicited = f.roce.bth().solicited;
  wc.wc_flags = wc_grh;
  wc.byte_len = ud_grh_size + uint32_t(payload.size());
  if (f.roce.info->has(wire::hdr_immdt)) {
    wc.wc_flags |= wc_with_imm;
    wc.imm_data = h.immdt;
  }
  uint8_t grh[ud_grh_size] = {};
  const auto ip = f.bytes.subspan(f.l3_offset);
  if (f.ip_version == wire::IpVersion::v4) {
    std::memcpy(grh + 20, ip.data(), 20);
  } else {
    std::memcpy(grh, ip.data(), 40);
  }
  if (wc.byte_len > sge_total(*recv)) {
    wc.status = WcStatus::loc_len_err;
  } else if (d.scatter(recv->sg_list, qp.pd, 0, std::span<const uint8_t>(grh, ud_grh_size)) != KeyCheck::ok ||
             d.scatter(recv->sg_list, qp.pd, ud_grh_size, payload) != KeyCheck::ok) {
    wc.status = WcStatus::loc_prot_err;
  }
  d.post_completion(qp.recv_cq, wc);
  if (wc.status != WcStatus::success) d.enter_error(qp, EventType::qp_fatal);
}

}  // namespace

void DeviceImpl::flush_ack(QueuePair& qp) {
  if (!qp.resp.ack_pending) return;
  qp.resp.ack_pending = false;
  if (qp.attr.qp_state == QpState::err || qp.attr.qp_state == QpState::reset) return;
  OutPacket packet;
  wire::TransportHeaders& h = packet.headers;
  h.bth.opcode = uint8_t(wire::Opcode::rc_acknowledge);
  h.bth.dest_qp = qp.attr.dest_qp_num;
  h.bth.psn = qp.resp.ack_psn;
  h.aeth = wire::Aeth::ack(qp.resp.msn);
  transmit(qp, packet);
}

void DeviceImpl::on_request(QueuePair& qp, const wire::Frame& f, Nanos now) {
  (void)now;
  switch (qp.type) {
    case QpType::rc:
    case QpType::xrc_recv: RcResponder(*this, qp, f).handle(); break;
    case QpType::xrc_send: break;  // an initiator takes no requests (dispatch() drops them)
    case QpType::uc: handle_uc(*this, qp, f); break;
    case QpType::ud: handle_ud(*this, qp, f); break;
    case QpType::raw_packet: break;  // (dispatch() drops RoCE packets to it: transport_matches)
  }
}

}  // namespace uroce::transport
