// The requester: turns send work requests into packets (rxe's rxe_req.c).
//
// Per QP it sends until something blocks it: the send queue is empty, the window of unacknowledged PSNs
// is full, a fence or the READ/atomic limit makes a WQE wait, or an RNR NAK asked it to pause. Every
// unblocking event (an ACK, a post, a timer) schedules it again.
#include <algorithm>

#include "transport/device_impl.hpp"

namespace uroce::transport {

using namespace uroce::verbs;
using wire::Opcode;

namespace {

// RC and UC SEND/WRITE opcodes by position; UC is RC + 0x20.
uint8_t send_write_opcode(const SendWr& wr, QpType type, bool first, bool last) {
  const bool imm = wr.opcode == WrOpcode::send_with_imm || wr.opcode == WrOpcode::rdma_write_with_imm;
  const bool inv = wr.opcode == WrOpcode::send_with_inv;
  const bool write = wr.opcode == WrOpcode::rdma_write || wr.opcode == WrOpcode::rdma_write_with_imm;
  uint8_t op;
  if (type == QpType::ud) return uint8_t(imm ? Opcode::ud_send_only_imm : Opcode::ud_send_only);
  if (write) {
    op = first && last ? (imm ? 0x0b : 0x0a) : first ? 0x06 : last ? (imm ? 0x09 : 0x08) : 0x07;
  } else if (inv) {
    op = first && last ? 0x17 : first ? 0x00 : last ? 0x16 : 0x01;
  } else {
    op = first && last ? (imm ? 0x05 : 0x04) : first ? 0x00 : last ? (imm ? 0x03 : 0x02) : 0x01;
  }
  return type == QpType::uc ? uint8_t(op + 0x20) : op;
}


// READ, atomic and ATOMIC WRITE requests the requester has outstanding (sent, response not yet complete).
uint32_t outstanding_rd_atomic(const QueuePair& qp) {
  uint32_t n = 0;
  for (size_t i = 0; i < qp.req.next && i < qp.sq.size(); ++i) {
    const SendWqe& w = qp.sq[i];
    if (w.takes_responder_resource() && (w.state == WqeState::pending || w.state == WqeState::processing)) ++n;
  }
  return n;
}

}  // namespace

bool DeviceImpl::requester_can_send(const QueuePair& qp, Nanos now) const {
  if (qp.attr.qp_state != QpState::rts && qp.attr.qp_state != QpState::sqd) return false;
  if (qp.req.rnr_wait_until > now) return false;
  if (qp.req.next >= qp.sq.size()) return false;
  // A WQE that failed here (a bad lkey, ...) stops the requester at that WQE, as rxe's req.state = ERROR
  // does: the WQEs before it still complete, the QP enters the error state once the failed one reaches
  // the head of the send queue, and nothing after it may reach the wire meanwhile (an ACK for an earlier
  // WQE schedules the requester again). The failed WQE is just behind `next`, or at `next` after a
  // go-back-N retry rewound the requester.
  if (qp.sq[qp.req.next].state == WqeState::failed) return false;
  if (qp.req.next > 0 && qp.sq[qp.req.next - 1].state == WqeState::failed) return false;
  return true;
}

// IBV_WR_BIND_MW. The window is named by its number; the key byte of the WR's rkey becomes the window's.
bool DeviceImpl::bind_window(const QueuePair& qp, const MwBind& b) {
  const WindowBind bind{uint8_t(b.rkey), b.mr_lkey, b.addr, b.length, b.access};
  return mrs_.bind_window(b.mw, qp.pd, qp.qpn, bind) == 0;
}

void DeviceImpl::run_requester(QueuePair& qp, Nanos now) {
  // A budget keeps one QP from monopolising a run(); if it is spent the QP is scheduled again.
  for (unsigned budget = 256; budget > 0; --budget) {
    if (!requester_can_send(qp, now)) return;
    if (!rate_allows(qp, now)) return;  // DCQCN: not before the QP's rate allows (run() resumes it)
    SendWqe& w = qp.sq[qp.req.next];
    const bool fresh = w.state == WqeState::posted;
    // SQD: the send queue drains; WQEs never started wait. A go-back-N retry sets the WQEs after the one
    // it resends back to `posted`, but those were started (`packets` is set when a WQE is first started
    // and kept) and are part of what drains: holding them back would leave their PSNs unacknowledged
    // (the responder re-ACKs the last PSN it took, beyond what was resent) until the retries ran out.
    if (fresh && w.packets == 0 && qp.attr.qp_state == QpState::sqd) return;

    if (w.wr.opcode == WrOpcode::local_inv || w.wr.opcode == WrOpcode::bind_mw) {
      // Local operations: carried out in send-queue order, when the requester reaches them (after the
      // fence rule would let them go: a bind or invalidate does not wait for READs, as rxe).
      bool ok;
      if (w.wr.opcode == WrOpcode::local_inv) {
        ok = mrs_.invalidate(w.wr.invalidate_rkey, qp.pd);
        w.status = ok ? WcStatus::success : WcStatus::loc_prot_err;
      } else {
        ok = bind_window(qp, w.wr.bind);
        w.status = ok ? WcStatus::success : WcStatus::mw_bind_err;
      }
      w.state = ok ? WqeState::done : WqeState::failed;
      ++qp.req.next;
      complete_finished(qp);
      continue;
    }
    if (qp.type == QpType::raw_packet) {
      send_raw(qp, w);  // a frame as posted: no transport headers, nothing to wait for
      continue;
    }
    if (is_reliable(qp.type)) {
      // Counting outstanding READs/atomics walks the send queue, so it is done only for the WQEs it gates.
      const bool fenced = fresh && (w.wr.send_flags & send_fence);
      if (fenced || (fresh && w.takes_responder_resource())) {
        const uint32_t rd_atomic = outstanding_rd_atomic(qp);
        if (fenced && rd_atomic > 0) return;  // fence: wait for READs/atomics
        if (w.takes_responder_resource() && rd_atomic >= std::max<uint32_t>(1, qp.attr.max_rd_atomic)) return;
      }
      if (wire::psn_diff(qp.req.psn, qp.comp.psn) >= int32_t(max_unacked_psns)) return;  // window full
    }

    // A UD QP has no path MTU (INIT->RTR sets none): a datagram is limited by the port's active MTU, as
    // rxe's get_mtu() does for UD. path_mtu would cap it at the attribute's default, 1024.
    const unsigned mtu = qp.type == QpType::ud ? mtu_bytes(active_mtu_) : qp.mtu();
    if (fresh) {
      w.first_psn = qp.req.psn;
      w.sent = 0;
      w.received = 0;
      w.packets = w.takes_responder_resource() && w.wr.opcode != WrOpcode::rdma_read ? 1 : packets_for(w.length, mtu);
      if (qp.type == QpType::ud && w.length > mtu) {
        // A datagram is one packet. IBTA C10-93.1.1: for a longer one "the CI shall not emit any packets
        // for this message. Further, the CI shall not generate an error due to this condition." rxe does
        // exactly that: the WR completes successfully and nothing is sent.
        w.state = WqeState::done;
        ++qp.req.next;
        complete_finished(qp);
        continue;
      }
    }

    OutPacket packet;
    wire::TransportHeaders& h = packet.headers;
    h.bth.dest_qp = qp.attr.dest_qp_num;
    h.xrceth.srq = w.wr.remote_srqn;  // on the wire only from an XRC initiator (transmit() sets its opcodes)

    if (w.wr.opcode == WrOpcode::rdma_read) {
      // One request for what is still missing: all of it, or after a retry the part not yet received.
      const uint32_t done_packets = w.received / mtu;
      h.bth.opcode = uint8_t(Opcode::rc_rdma_read_request);
      h.bth.psn = (w.first_psn + done_packets) & wire::psn_mask;
      h.bth.ack_req = true;
      h.reth.va = w.wr.remote_addr + w.received;
      h.reth.rkey = w.wr.rkey;
      h.reth.dma_length = w.length - w.received;
      w.last_psn = (w.first_psn + w.packets - 1) & wire::psn_mask;
      qp.req.psn = (w.last_psn + 1) & wire::psn_mask;
      w.state = WqeState::pending;
      ++qp.req.next;
      qp.req.packets_since_ackreq = 0;
      transmit(qp, packet);
    } else if (w.takes_responder_resource()) {
      // The atomics and ATOMIC WRITE: one packet, answered by a response of its own.
      if (w.wr.opcode == WrOpcode::atomic_write) {
        // IBTA 1.5 A19: a RETH for the 8 bytes and the bytes themselves, answered by an empty READ
        // RESPONSE (not an ACK) once every earlier request has been carried out. The bytes were taken when
        // the request was posted (compare_add), so a retry sends the same ones.
        h.bth.opcode = uint8_t(Opcode::rc_atomic_write);
        h.reth.va = w.wr.remote_addr;
        h.reth.rkey = w.wr.rkey;
        h.reth.dma_length = 8;
        packet.payload = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&w.wr.compare_add), 8);
      } else {
        const bool cas = w.wr.opcode == WrOpcode::atomic_cmp_and_swp;
        h.bth.opcode = uint8_t(cas ? Opcode::rc_compare_swap : Opcode::rc_fetch_add);
        h.atomic_eth.va = w.wr.remote_addr;
        h.atomic_eth.rkey = w.wr.rkey;
        h.atomic_eth.swap_add = cas ? w.wr.swap : w.wr.compare_add;
        h.atomic_eth.compare = cas ? w.wr.compare_add : 0;
      }
      h.bth.psn = w.first_psn;
      h.bth.ack_req = true;
      w.last_psn = w.first_psn;
      qp.req.psn = (w.first_psn + 1) & wire::psn_mask;
      w.state = WqeState::pending;
      ++qp.req.next;
      qp.req.packets_since_ackreq = 0;
      transmit(qp, packet);
    } else {
      const uint32_t offset = w.sent;
      const uint32_t chunk = std::min<uint32_t>(mtu, w.length - offset);
      const bool first = offset == 0;
      const bool last = offset + chunk == w.length;
      h.bth.opcode = send_write_opcode(w.wr, qp.type, first, last);
      h.bth.psn = qp.req.psn;
      const bool write = w.wr.opcode == WrOpcode::rdma_write || w.wr.opcode == WrOpcode::rdma_write_with_imm;
      // Solicited events exist for SENDs and RDMA WRITE with immediate only: they wake a receiver.
      h.bth.solicited = last && (w.wr.send_flags & send_solicited) &&
                        (!write || w.wr.opcode == WrOpcode::rdma_write_with_imm);
      if (write && first) {
        h.reth.va = w.wr.remote_addr;
        h.reth.rkey = w.wr.rkey;
        h.reth.dma_length = w.length;
      }
      h.immdt = w.wr.imm_data;
      h.ieth = w.wr.invalidate_rkey;
      if (qp.type == QpType::ud) {
        const auto ah = ahs_.find(w.wr.ah);
        if (ah == ahs_.end()) {
          w.state = WqeState::failed;
          w.status = WcStatus::loc_qp_op_err;
          ++qp.req.next;
          complete_finished(qp);
          return;
        }
        packet.destination = &ah->second.av;
        h.bth.dest_qp = w.wr.remote_qpn;
        // A Q_Key with the high bit set means "use the QP's own Q_Key" (IBTA 10.2.5).
        h.deth.qkey = (w.wr.remote_qkey & 0x80000000u) ? qp.attr.qkey : w.wr.remote_qkey;
        h.deth.src_qp = qp.qpn;
      }
      // Straight into the packet: a span copied right after it was stored stalls (store forwarding).
      if (w.wr.send_flags & send_inline) {
        packet.payload = std::span<const uint8_t>(w.wr.inline_data).subspan(offset, chunk);
      } else if (send_payload(w.wr.sg_list, qp.pd, offset, chunk, packet.payload) != KeyCheck::ok) {
        w.state = WqeState::failed;  // an lkey, PD or bounds problem in the gather list
        w.status = WcStatus::loc_prot_err;
        ++qp.req.next;
        complete_finished(qp);
        return;
      }
      // As rxe (init_req_packet): AckReq on the last packet of every message, whatever the transport, and
      // on the packet after 65 without one.
      h.bth.ack_req = last || qp.req.packets_since_ackreq++ > max_packets_per_ack;
      if (h.bth.ack_req) qp.req.packets_since_ackreq = 0;
      qp.req.psn = (qp.req.psn + 1) & wire::psn_mask;
      w.sent += chunk;
      w.state = WqeState::processing;
      if (last) {
        w.last_psn = h.bth.psn;
        // RC (and XRC) waits for the ACK; UC and UD are done once the last packet is out.
        w.state = is_reliable(qp.type) ? WqeState::pending : WqeState::done;
        ++qp.req.next;
      }
      transmit(qp, packet);
      if (w.state == WqeState::done) complete_finished(qp);
    }
    if (is_reliable(qp.type) && qp.comp.timeout_at == never) arm_timeout(qp, now);
  }
  schedule(qp);  // budget spent with work left
}

}  // namespace uroce::transport
