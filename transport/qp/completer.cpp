// The completer: what comes back to a requester (rxe's rxe_comp.c). ACKs retire work requests, NAKs
// and timeouts send the requester back to an earlier PSN (go-back-N), READ responses and atomic ACKs
// deliver data, and finished work requests complete in send-queue order.
//
// Retry counting follows the specification, not rxe: retry_cnt = 7 means seven retries (rxe treats it as
// infinite), while rnr_retry = 7 does mean "retry forever" (as the specification says). Both counters
// start again from the QP's values whenever an acknowledgement makes progress.
#include <algorithm>
#include <cstring>

#include "transport/device_impl.hpp"

namespace uroce::transport {

using namespace uroce::verbs;

namespace {

constexpr uint8_t rnr_retry_forever = 7;

WcOpcode send_wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::rdma_write:
    case WrOpcode::rdma_write_with_imm: return WcOpcode::rdma_write;
    case WrOpcode::rdma_read: return WcOpcode::rdma_read;
    case WrOpcode::atomic_cmp_and_swp: return WcOpcode::comp_swap;
    case WrOpcode::atomic_fetch_and_add: return WcOpcode::fetch_add;
    case WrOpcode::local_inv: return WcOpcode::local_inv;
    case WrOpcode::bind_mw: return WcOpcode::bind_mw;
    case WrOpcode::atomic_write: return WcOpcode::atomic_write;
    default: return WcOpcode::send;
  }
}

// Index of the oldest WQE that was (at least partly) sent and is not finished; sq.size() if none.
size_t oldest_unfinished(const QueuePair& qp) {
  for (size_t i = 0; i < qp.req.next && i < qp.sq.size(); ++i) {
    const WqeState s = qp.sq[i].state;
    if (s == WqeState::pending || s == WqeState::processing) return i;
  }
  return qp.sq.size();
}

// Fails the oldest WQE still in flight with `status` (retries exhausted, or a fatal NAK naming it); it
// completes, and the QP goes to the error state, once the WQEs before it have completed.
void fail_oldest(QueuePair& qp, WcStatus status) {
  const size_t i = oldest_unfinished(qp);
  if (i < qp.sq.size()) {
    qp.sq[i].state = WqeState::failed;
    qp.sq[i].status = status;
  }
}

WcStatus nak_status(uint8_t code) {
  switch (wire::NakCode(code)) {
    case wire::NakCode::invalid_request: return WcStatus::rem_inv_req_err;
    case wire::NakCode::remote_access_error: return WcStatus::rem_access_err;
    case wire::NakCode::remote_operational_error: return WcStatus::rem_op_err;
    case wire::NakCode::invalid_rd_request: return WcStatus::rem_inv_rd_req_err;
    default: return WcStatus::bad_resp_err;
  }
}

}  // namespace

void DeviceImpl::complete_finished(QueuePair& qp) {
  while (!qp.sq.empty()) {
    SendWqe& w = qp.sq.front();
    if (w.state != WqeState::done && w.state != WqeState::failed) break;
    if (w.state == WqeState::failed) {
      // An error completion always reaches the CQ, and the QP goes to the error state: the rest flush.
      // No affiliated event: the completion reports the error (affiliated asynchronous errors are for what
      // no work completion can report, such as the responder's errors; rxe raises none here either).
      enter_error(qp, std::nullopt);
      return;
    }
    if (w.rendezvous) {
      // A tag matching SRQ's own step: it completes the tagged buffer (and queues the FIN), not the send CQ.
      std::unique_ptr<TagRendezvous> step = std::move(w.rendezvous);
      const uint32_t length = w.length;
      qp.sq.pop_front();
      if (qp.req.next > 0) --qp.req.next;
      rendezvous_step_done(qp, std::move(step), WcStatus::success, length);
      continue;
    }
    if (w.signaled) {
      if (WorkCompletion* wc = new_completion(qp.send_cq)) {
        wc->wr_id = w.wr.wr_id;
        wc->status = WcStatus::success;
        wc->opcode = send_wc_opcode(w.wr.opcode);
        wc->byte_len = w.length;
        wc->qp_num = qp.qpn;
      }
    }
    qp.sq.pop_front();
    if (qp.req.next > 0) --qp.req.next;
  }
  // SQD: the send queue is drained once every WQE the requester had started has completed; WQEs posted
  // but never started (packets == 0) wait for the return to RTS and do not count (as in rxe, which
  // raises SQ_DRAINED as soon as the completer has caught up with the requester and the next WQE is
  // unstarted). Waiting for an empty queue instead would never raise the event while such WQEs are
  // queued. sq_draining (as ibv_query_qp reports it) makes the event fire once per entry into SQD.
  if (qp.attr.qp_state == QpState::sqd && qp.attr.sq_draining && qp.req.next == 0 &&
      (qp.sq.empty() || (qp.sq.front().state == WqeState::posted && qp.sq.front().packets == 0))) {
    qp.attr.sq_draining = 0;
    if (qp.attr.en_sqd_async_notify) raise(EventType::sq_drained, qp.qpn);
  }
}

void DeviceImpl::arm_timeout(QueuePair& qp, Nanos now) {
  const bool unacked = wire::psn_diff(qp.req.psn, qp.comp.psn) > 0;
  qp.comp.timeout_at = (unacked && qp.comp.timeout_period != 0) ? now + qp.comp.timeout_period : never;
}

void DeviceImpl::retry_from(QueuePair& qp, uint32_t psn, Nanos now) {
  // Go-back-N: find the WQE that holds `psn` and send again from there; later WQEs start over.
  const unsigned mtu = qp.mtu();
  size_t i = oldest_unfinished(qp);
  for (; i < qp.req.next && i < qp.sq.size(); ++i) {
    const SendWqe& w = qp.sq[i];
    if (w.state == WqeState::done || w.state == WqeState::failed) continue;
    if (wire::psn_diff(psn, w.last_psn) <= 0) break;
  }
  if (i >= qp.sq.size() || i >= qp.req.next) return;  // nothing sent at or after psn: nothing to redo
  SendWqe& w = qp.sq[i];
  if (wire::psn_diff(psn, w.first_psn) < 0) psn = w.first_psn;
  if (w.wr.opcode == WrOpcode::rdma_read) {
    // Ask again for what has not arrived; the request PSN is that of the first missing response packet.
    psn = (w.first_psn + w.received / mtu) & wire::psn_mask;
    w.state = WqeState::processing;
  } else if (w.takes_responder_resource()) {
    psn = w.first_psn;  // the responder answers a repeated atomic or ATOMIC WRITE from its resources
    w.state = WqeState::processing;
  } else {
    w.sent = uint32_t(wire::psn_diff(psn, w.first_psn)) * mtu;
    w.state = WqeState::processing;
  }
  // Every later WQE that was started, including one the requester is in the middle of, starts over.
  for (size_t j = i + 1; j < qp.sq.size(); ++j) {
    SendWqe& later = qp.sq[j];
    if (later.state == WqeState::pending || later.state == WqeState::processing) later.state = WqeState::posted;
  }
  const int32_t resent = wire::psn_diff(qp.req.psn, psn);
  if (resent > 0) {
    counters_.tx_retransmitted += uint64_t(resent);
    qp.counters.tx_retransmitted += uint64_t(resent);
  }
  qp.req.next = i;
  qp.req.psn = psn;
  qp.req.packets_since_ackreq = 0;
  arm_timeout(qp, now);
  schedule(qp);
}

namespace {

// An acknowledgement (an ACK, or the NAK's implied "everything before") covers the requests before
// `next_psn`. Retires the SEND/WRITE WQEs it completes and returns the PSN the requester must resume from:
// `next_psn` itself, or, when it passes a READ, atomic or ATOMIC WRITE whose response has not (fully)
// arrived, the first missing response PSN of that WQE: the responder got the request, the response was
// lost (an implicit NAK).
uint32_t acknowledge_before(QueuePair& qp, uint32_t next_psn) {
  for (size_t i = 0; i < qp.req.next && i < qp.sq.size(); ++i) {
    SendWqe& w = qp.sq[i];
    if (w.state == WqeState::done || w.state == WqeState::failed) continue;
    if (w.takes_responder_resource()) {
      if (wire::psn_diff(next_psn, w.first_psn) > 0) {
        return w.wr.opcode == WrOpcode::rdma_read ? (w.first_psn + w.received / qp.mtu()) & wire::psn_mask
                                                  : w.first_psn;
      }
      break;
    }
    if (w.state != WqeState::pending || wire::psn_diff(next_psn, w.last_psn) <= 0) break;
    w.state = WqeState::done;
  }
  return next_psn;
}

}  // namespace

size_t read_answered_by(const QueuePair& qp, uint32_t psn) {
  const size_t end = std::min(qp.req.next, qp.sq.size());
  // A response to a later request implies everything before it arrived, but an older READ/atomic still
  // unanswered means this one is out of order.
  for (size_t r = oldest_unfinished(qp); r < end; ++r) {
    const SendWqe& w = qp.sq[r];
    if (w.state == WqeState::done || w.state == WqeState::failed) continue;
    const bool answered_by_read_response = w.wr.opcode == WrOpcode::rdma_read || w.wr.opcode == WrOpcode::atomic_write;
    if (answered_by_read_response && wire::psn_diff(psn, w.first_psn) >= 0 && wire::psn_diff(psn, w.last_psn) <= 0) {
      return r;
    }
    if (w.takes_responder_resource()) break;
  }
  return qp.sq.size();
}

void DeviceImpl::on_response(QueuePair& qp, const wire::Frame& f, Nanos now) {
  const wire::Bth& bth = f.roce.bth();
  const wire::OpcodeInfo& info = *f.roce.info;
  const uint32_t psn = bth.psn;
  // A response must be for something sent and not yet acknowledged: [comp.psn, req.psn). Anything
  // else is a duplicate or a stray and changes nothing.
  const int32_t from_oldest = wire::psn_diff(psn, qp.comp.psn);
  const int32_t from_next = wire::psn_diff(psn, qp.req.psn);
  const bool in_window = from_oldest >= 0 && from_next < 0;
  // A bare ACK for the PSN just before comp.psn repeats what is known (a coalesced or duplicate ACK).
  if (!in_window) {
    ++counters_.rx_duplicates;
    ++qp.counters.rx_duplicates;
    return;
  }

  const uint32_t before = qp.comp.psn;
  bool retry_started = false;
  // Go-back-N restarts only when no retransmission is under way, or this packet acknowledged something
  // new; otherwise the NAKs and gaps it reports belong to the burst already being resent.
  const auto may_retry = [&] { return !qp.comp.retry_in_progress || qp.comp.psn != before; };
  const auto start_retry = [&](uint32_t from) {
    retry_from(qp, from, now);
    qp.comp.retry_in_progress = true;
    retry_started = true;
  };
  const auto progressed_to = [&](uint32_t next_unacked) {
    if (wire::psn_diff(next_unacked, qp.comp.psn) > 0) qp.comp.psn = next_unacked;
  };

  switch (info.operation) {
    case wire::Operation::acknowledge: {
      const wire::Aeth& aeth = f.roce.headers.aeth;
      switch (aeth.kind()) {
        case wire::AethKind::ack: {
          const uint32_t next = (psn + 1) & wire::psn_mask;
          const uint32_t resume = acknowledge_before(qp, next);
          progressed_to(resume);
          if (resume != next && may_retry()) start_retry(resume);  // implicit NAK
          break;
        }
        case wire::AethKind::rnr_nak: {
          ++counters_.rnr_naks_received;
          ++qp.counters.rnr_naks_received;
          // Everything before the NAKed PSN arrived (unless a READ/atomic response went missing before it).
          const uint32_t resume = acknowledge_before(qp, psn);
          progressed_to(resume);
          if (qp.attr.rnr_retry != rnr_retry_forever) {
            if (qp.comp.rnr_retry_left == 0) {
              fail_oldest(qp, WcStatus::rnr_retry_exc_err);
              break;
            }
            --qp.comp.rnr_retry_left;
          }
          qp.req.rnr_wait_until = now + Nanos(wire::rnr_timer_microseconds(aeth.low_bits())) * 1000;
          retry_from(qp, resume, now);
          qp.comp.timeout_at = never;  // the RNR wait replaces the ACK timeout until we resend
          break;
        }
        case wire::AethKind::nak: {
          ++counters_.naks_received;
          ++qp.counters.naks_received[std::min<size_t>(aeth.low_bits(), qp.counters.naks_received.size() - 1)];
          const uint32_t resume = acknowledge_before(qp, psn);
          progressed_to(resume);
          if (aeth.low_bits() == uint8_t(wire::NakCode::psn_sequence_error)) {
            if (!may_retry()) break;
            if (qp.comp.retry_left == 0) {
              fail_oldest(qp, WcStatus::retry_exc_err);
              break;
            }
            --qp.comp.retry_left;
            start_retry(resume);
          } else {
            // A fatal NAK fails the WQE it names (the oldest unfinished one, since all before it are done).
            fail_oldest(qp, nak_status(aeth.low_bits()));
          }
          break;
        }
        case wire::AethKind::reserved:
          break;
      }
      break;
    }
    case wire::Operation::rdma_read_response: {
      const size_t r = read_answered_by(qp, psn);
      if (r >= qp.sq.size()) break;
      acknowledge_before(qp, qp.sq[r].first_psn);
      SendWqe& w = qp.sq[r];
      if (w.wr.opcode == WrOpcode::atomic_write) {
        // Its whole answer: one empty READ RESPONSE ONLY (rxe's COMPST_WRITE_SEND for it).
        const bool well_formed = info.position == wire::Position::only && f.roce.payload.empty();
        w.state = well_formed ? WqeState::done : WqeState::failed;
        if (!well_formed) w.status = WcStatus::bad_resp_err;
        progressed_to((psn + 1) & wire::psn_mask);
        break;
      }
      const unsigned mtu = qp.mtu();
      const uint32_t expected = (w.first_psn + w.received / mtu) & wire::psn_mask;
      if (psn != expected) {
        if (wire::psn_diff(psn, expected) > 0) {
          // A response packet was lost: ask again from the first missing one (counts as a retry).
          if (!may_retry()) break;
          if (qp.comp.retry_left == 0) {
            w.state = WqeState::failed;
            w.status = WcStatus::retry_exc_err;
          } else {
            --qp.comp.retry_left;
            progressed_to(expected);
            start_retry(expected);
          }
        }
        break;
      }
      const auto payload = f.roce.payload;
      const bool last = info.position == wire::Position::last || info.position == wire::Position::only;
      const bool size_ok = last ? w.received + payload.size() == w.length : payload.size() == mtu;
      if (!size_ok || scatter(w.wr.sg_list, qp.pd, w.received, payload) != KeyCheck::ok) {
        w.state = WqeState::failed;
        w.status = size_ok ? WcStatus::loc_prot_err : WcStatus::bad_resp_err;
        break;
      }
      w.received += uint32_t(payload.size());
      progressed_to((psn + 1) & wire::psn_mask);
      if (last) w.state = WqeState::done;
      break;
    }
    case wire::Operation::atomic_acknowledge: {
      size_t r = oldest_unfinished(qp);
      for (; r < qp.req.next && r < qp.sq.size(); ++r) {
        const SendWqe& w = qp.sq[r];
        if (w.state == WqeState::done || w.state == WqeState::failed) continue;
        if (w.takes_responder_resource()) break;
      }
      if (r >= qp.sq.size() || r >= qp.req.next || qp.sq[r].first_psn != psn ||
          qp.sq[r].wr.opcode == WrOpcode::rdma_read || qp.sq[r].wr.opcode == WrOpcode::atomic_write) {
        break;  // not the answer to the oldest outstanding atomic
      }
      acknowledge_before(qp, psn);
      SendWqe& w = qp.sq[r];
      const uint64_t original = f.roce.headers.atomic_ack_eth.original;
      uint8_t bytes[8];
      std::memcpy(bytes, &original, 8);  // the original value lands in host byte order
      if (scatter(w.wr.sg_list, qp.pd, 0, std::span<const uint8_t>(bytes, 8)) != KeyCheck::ok) {
        w.state = WqeState::failed;
        w.status = WcStatus::loc_prot_err;
      } else {
        w.state = WqeState::done;
      }
      progressed_to((psn + 1) & wire::psn_mask);
      break;
    }
    default:
      break;
  }

  if (qp.comp.psn != before) {
    // Forward progress: the retry budgets start again, the timer restarts, the window may have opened.
    if (!retry_started) qp.comp.retry_in_progress = false;  // progress ends a retransmission episode
    qp.comp.retry_left = qp.attr.retry_cnt;
    qp.comp.rnr_retry_left = qp.attr.rnr_retry;
    if (qp.req.rnr_wait_until == 0) arm_timeout(qp, now);
    schedule(qp);
  }
  complete_finished(qp);
}

void DeviceImpl::on_timer(QueuePair& qp, Nanos now) {
  qp.comp.timeout_at = never;
  if (wire::psn_diff(qp.req.psn, qp.comp.psn) <= 0) return;  // everything was acknowledged meanwhile
  ++counters_.timeouts;
  ++qp.counters.timeouts;
  if (qp.comp.retry_left == 0) {
    fail_oldest(qp, WcStatus::retry_exc_err);
    complete_finished(qp);
    return;
  }
  --qp.comp.retry_left;
  retry_from(qp, qp.comp.psn, now);
  qp.comp.retry_in_progress = true;
}

}  // namespace uroce::transport
