// Early placement: the payload of a large packet whose place in memory the QP already knows is copied
// there in the same pass that checks the frame's ICRC.
//
// Why: checking the ICRC and then copying reads every payload byte twice, and for a 64 KiB RDMA WRITE the
// receiver's two passes were half of all the bytes the transport moves (bench: "floor" rows; the fused
// copy with CRC is crc32_copy.hpp). One pass instead of two is only safe where writing the bytes before
// they are known to be good cannot hurt:
//   - the destination comes from the QP's state, never from an address or key in this packet:
//       requests: only MIDDLE and LAST packets of an RC or UC SEND or RDMA WRITE that the QP expects next
//       (its PSN, the operation of the message in progress, a full MTU for MIDDLE, no more than the
//       message has left), whose place was set by a FIRST packet checked as usual; a FIRST or ONLY
//       request, whose RETH names the address, is checked first.
//       READ responses (any position): the next bytes of the READ work request whose response PSN this is,
//       into its own scatter list, exactly where the completer puts them.
//       UD datagrams (SEND ONLY, the Q_Key right): behind the GRH area of the receive the QP takes next.
//   - the destination is the next bytes of that message: a receive buffer, a WRITE's range or a READ's
//     local buffer, whose contents the verbs leave undefined until the message completes (a receive that
//     a dropped datagram wrote into stays posted, and the next datagram overwrites it). A frame whose
//     ICRC then fails is dropped and counted as before; the QP's state is untouched, so the retransmitted
//     packet lands on the same bytes, and a message that never completes leaves them undefined, as any
//     failed one does. (A corrupted PSN that still names an expected packet only moves the bytes into
//     another message's next, equally undefined, bytes.)
//   - nothing else happens before the check: every rule here is a test without side effects, and the
//     responder and completer still apply all of their own afterwards (they only skip a copy that was
//     already made, recognised by the exact memory, offset, length and source: DeviceImpl::write_payload).
// A packet that fails any rule here takes the usual path: ICRC first, then the engine.
#include "transport/device_impl.hpp"

namespace uroce::transport {

using namespace uroce::verbs;
using wire::Operation;
using wire::Position;

namespace {

// What dispatch() checks for every frame before the engines see it: P_Key, transport and QP state.
bool dispatch_accepts(const QueuePair& qp, const wire::Frame& f, uint16_t port_pkey) {
  const QpState st = qp.attr.qp_state;
  const bool state_ok = f.roce.info->is_request ? st == QpState::rtr || st == QpState::rts || st == QpState::sqd
                                                : st == QpState::rts || st == QpState::sqd;
  return state_ok && pkey_matches(f.roce.bth().pkey, port_pkey) && transport_matches(qp.type, f.roce.info->transport);
}

}  // namespace

bool may_place_early(const wire::Frame& f) {
  const wire::OpcodeInfo& info = *f.roce.info;
  if (f.roce.payload.size() < early_placement_min_payload) return false;
  if (info.operation == Operation::rdma_read_response) return info.transport == wire::Transport::rc;
  if (info.transport == wire::Transport::ud) return info.operation == Operation::send;
  return info.is_request && (info.transport == wire::Transport::rc || info.transport == wire::Transport::uc) &&
         (info.position == Position::middle || info.position == Position::last) &&
         (info.operation == Operation::send || info.operation == Operation::rdma_write);
}

std::span<uint8_t> DeviceImpl::local_place(const SgeList& sges, uint32_t pd, uint32_t offset, size_t len,
                                           const wire::Frame& f, PlacedPayload& where) {
  const Sge* sge = sge_holding(sges, offset, len);
  const MemoryRegion* mr = nullptr;
  if (sge == nullptr || mrs_.check(sge->lkey, pd, sge->addr + offset, len, access_local_write, &mr) != KeyCheck::ok) {
    return {};
  }
  return writable_place(*mr, sge->addr + offset, len, f, where);
}

std::span<uint8_t> DeviceImpl::writable_place(const MemoryRegion& mr, uint64_t address, size_t len,
                                              const wire::Frame& f, PlacedPayload& where) {
  const uint64_t offset = mr.memory_offset + (address - mr.iova);
  const std::span<uint8_t> place = mr.memory->writable_view(offset, len);
  if (place.size() != len) return {};
  where = {mr.memory.get(), offset, len, f.roce.payload.data()};
  return place;
}

std::span<uint8_t> DeviceImpl::read_response_destination(const QueuePair& qp, const wire::Frame& f,
                                                         PlacedPayload& where) {
  const uint32_t psn = f.roce.bth().psn;
  const size_t len = f.roce.payload.size();
  // What on_response() and its READ case check, in order.
  if (wire::psn_diff(psn, qp.comp.psn) < 0 || wire::psn_diff(psn, qp.req.psn) >= 0) return {};
  const size_t i = read_answered_by(qp, psn);
  if (i >= qp.sq.size()) return {};
  const SendWqe* w = &qp.sq[i];
  if (w->wr.opcode != WrOpcode::rdma_read) return {};  // an ATOMIC WRITE's answer carries no data
  const unsigned mtu = qp.mtu();
  if (psn != ((w->first_psn + w->received / mtu) & wire::psn_mask)) return {};
  const wire::Position p = f.roce.info->position;
  const bool last = p == Position::last || p == Position::only;
  if (last ? uint64_t(w->received) + len != w->length : len != mtu) return {};
  return local_place(w->wr.sg_list, qp.pd, w->received, len, f, where);
}

std::span<uint8_t> DeviceImpl::request_destination(const QueuePair& qp, const wire::Frame& f, PlacedPayload& where) {
  const wire::OpcodeInfo& info = *f.roce.info;
  const wire::Bth& bth = f.roce.bth();
  const QueuePair::Responder& r = qp.resp;
  const size_t len = f.roce.payload.size();
  // The next packet of the message in progress, as the responder (RC) or handle_uc (UC) will see it.
  if (bth.psn != r.psn || !r.in_message() || uint8_t(info.operation) != r.last_operation) return {};
  if (qp.type == QpType::uc && r.drop_until_first) return {};
  const unsigned mtu = qp.mtu();
  if (info.position == Position::middle ? len != mtu : len > mtu) return {};

  if (info.operation == Operation::send) {
    // The part of the receive buffer this packet fills, when it lies in one SGE.
    // (A matched eager message's TMH is not placed: its bytes go tm_skip earlier. A rendezvous request is
    // one packet, never a MIDDLE or LAST.)
    if (!r.recv || r.received < r.tm_skip || TagMessage(r.tm_kind) == TagMessage::rendezvous) return {};
    return local_place(r.recv->sg_list, qp.pd, r.received - r.tm_skip, len, f, where);
  }
  if ((qp.attr.qp_access_flags & access_remote_write) == 0) return {};
  // A WRITE with immediate that would need a receive WQE first (RNR or not) takes the usual path.
  if (info.has(wire::hdr_immdt) && !r.recv) return {};
  const uint64_t end = uint64_t(r.received) + len;
  if (end > r.write_length || (info.position == Position::last && end != r.write_length)) return {};
  const uint64_t address = r.write_va + r.received;
  const MemoryRegion* mr = nullptr;
  if (mrs_.check_remote(r.write_rkey, qp.pd, qp.qpn, address, len, access_remote_write, &mr) != KeyCheck::ok) {
    return {};
  }
  return writable_place(*mr, address, len, f, where);
}

std::span<uint8_t> DeviceImpl::datagram_destination(QueuePair& qp, const wire::Frame& f, PlacedPayload& where) {
  // What handle_ud() checks: the Q_Key, then a posted receive, which takes the payload behind its GRH area.
  if (f.roce.headers.deth.qkey != qp.attr.qkey) return {};
  const ReceiveQueue* q = receive_queue(qp);
  if (q == nullptr || q->wrs.empty()) return {};
  return local_place(q->wrs.front().sg_list, qp.pd, ud_grh_size, f.roce.payload.size(), f, where);
}

EarlyPlacement DeviceImpl::place_early(const wire::Frame& f) {
  QueuePair* qp = find_qp(f.roce.bth().dest_qp);
  if (qp == nullptr || !dispatch_accepts(*qp, f, pkey_)) return EarlyPlacement::not_taken;
  PlacedPayload where;
  std::span<uint8_t> place;
  if (!f.roce.info->is_request) {
    place = read_response_destination(*qp, f, where);
  } else if (f.roce.info->transport == wire::Transport::ud) {
    place = datagram_destination(*qp, f, where);
  } else {
    place = request_destination(*qp, f, where);
  }
  if (place.empty()) return EarlyPlacement::not_taken;
  if (wire::compute_icrc_copying_payload(f, place.data()) != f.roce.icrc) return EarlyPlacement::bad_icrc;
  placed_ = where;
  ++counters_.rx_placed_early;
  return EarlyPlacement::placed;
}

bool DeviceImpl::write_payload(const MemoryRegion& mr, uint64_t offset, const uint8_t* src, size_t len) {
  if (placed_.memory == mr.memory.get() && placed_.offset == offset && placed_.length == len &&
      placed_.source == src) {
    placed_ = {};  // one frame's payload, used once
    return true;
  }
  return mr.memory->write(offset, src, len);
}

}  // namespace uroce::transport
