#include "pcap_tools/explain.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "pcap_tools/story_line.hpp"
#include "transport/cm/cm_messages.hpp"
#include "transport/wire/mad.hpp"

namespace uroce::pcap_tools {

using namespace uroce::wire;

namespace {

std::string flow_label(const FlowKey& k) {
  return fmt::format("{} → {} QP 0x{:06x}", to_string(k.src), to_string(k.dst), k.dest_qp);
}

std::string message_kind(Operation op) {
  switch (op) {
    case Operation::send: return "SEND";
    case Operation::rdma_write: return "RDMA WRITE";
    case Operation::rdma_read_response: return "RDMA READ response";
    case Operation::atomic_write: return "ATOMIC WRITE";
    default: return std::string(operation_name(op));
  }
}

std::string psn_range(uint32_t first, uint32_t last) {
  return first == last ? fmt::format("psn {}", first) : fmt::format("psn {}..{}", first, last);
}

std::string plural(uint64_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

std::string explain_aeth(const Aeth& a, uint32_t psn) {
  switch (a.kind()) {
    case AethKind::ack:
      return fmt::format("ACK up to psn {} (MSN {}): the responder has received everything through psn {} and "
                         "completed {} so far",
                         psn, a.msn, psn, plural(a.msn, "message"));
    case AethKind::rnr_nak:
      return fmt::format("RNR NAK at psn {}: receiver not ready (no receive buffer posted); the requester must "
                         "wait {:.2f} ms, then resend from psn {}",
                         psn, rnr_timer_microseconds(a.low_bits()) / 1000.0, psn);
    case AethKind::nak:
      switch (NakCode(a.low_bits())) {
        case NakCode::psn_sequence_error:
          return fmt::format("NAK PSN sequence error at psn {}: a packet was lost, so the responder expected psn {} "
                             "but saw a later one; everything before it is acknowledged and the requester must "
                             "resend from psn {} (go-back-N)",
                             psn, psn, psn);
        case NakCode::invalid_request:
          return fmt::format("NAK invalid request at psn {}: the responder cannot perform this request (unsupported "
                             "opcode or bad length); the requester's QP goes to the error state",
                             psn);
        case NakCode::remote_access_error:
          return fmt::format("NAK remote access error at psn {}: the R_Key, address range or access rights were "
                             "rejected by the responder; the requester completes the work request with an error",
                             psn);
        case NakCode::remote_operational_error:
          return fmt::format("NAK remote operational error at psn {}: the responder failed internally", psn);
        case NakCode::invalid_rd_request:
          return fmt::format("NAK invalid RD request at psn {}", psn);
      }
      return fmt::format("NAK code {} at psn {}", a.low_bits(), psn);
    case AethKind::reserved:
      break;
  }
  return fmt::format("AETH with reserved syndrome 0x{:02x} at psn {}", a.syndrome, psn);
}

}  // namespace

void Explainer::say(uint64_t frame, const Flow* flow, const std::string& text) {
  say_range(frame, frame, flow, text);
}

void Explainer::say_range(uint64_t first, uint64_t last, const Flow* flow, const std::string& text) {
  lines_.push_back(story_line(first, last, flow ? flow->stats.name : "", text));
}

Explainer::Flow& Explainer::flow_for(const Frame& f) {
  const FlowKey key{f.src_ip(), f.dst_ip(), f.roce.bth().dest_qp};
  auto [it, inserted] = flows_.try_emplace(key);
  Flow& flow = it->second;
  if (inserted) {
    flow.key = key;
    const size_t n = flow_order_.size();
    flow.stats.name = n < 26 ? std::string(1, char('A' + n)) : fmt::format("F{}", n);
    flow.stats.transport = f.roce.info->transport;
    flow_order_.push_back(&flow);
  }
  return flow;
}

void Explainer::add(const Record& r, const Frame& f) {
  ++frames_;
  if (!f.ok()) {
    ++malformed_;
    say(r.number, nullptr, fmt::format("malformed frame: {} at byte {}", to_string(f.error), f.error_offset));
    return;
  }
  if (f.kind == FrameKind::arp) {
    const ArpPacket& a = f.arp;
    if (a.operation == arp_op_request) {
      say(r.number, nullptr, fmt::format("ARP: {} asks who has {} (RoCE needs the peer's MAC before any packet)",
                                         to_string(IpAddress::from_v4(a.sender_ip)),
                                         to_string(IpAddress::from_v4(a.target_ip))));
    } else {
      say(r.number, nullptr, fmt::format("ARP: {} is at {}", to_string(IpAddress::from_v4(a.sender_ip)),
                                         to_string(a.sender_mac)));
    }
    return;
  }
  if (f.kind == FrameKind::mac_control) {
    pauses_.add(r, f, lines_);
    return;
  }
  if (f.kind != FrameKind::roce) return;  // not RoCE: not part of the story
  Flow& flow = flow_for(f);
  add_roce(r, f, flow);
}

void Explainer::add_copy(const Record& r, const Frame& f) {
  if (!f.ok() || f.kind != FrameKind::roce || f.ecn() != Ecn::ce || !icrc_ok(f)) return;
  if (!ce_marked_.insert(r.copy_of).second) return;  // the frame it copies was told as marked already
  say(r.number, &flow_for(f),
      fmt::format("this mirror copy of #{} carries ECN Congestion Experienced, which #{} did not: a switch "
                  "between the two mirror points marked it; the receiver should answer with a CNP",
                  r.copy_of, r.copy_of));
}

void Explainer::add_roce(const Record& r, const Frame& f, Flow& flow) {
  const Bth& bth = f.roce.bth();
  const OpcodeInfo& info = *f.roce.info;
  FlowStats& st = flow.stats;
  ++st.packets;
  st.bytes += f.roce.payload.size();
  if (!icrc_ok(f)) {
    ++st.bad_icrc;
    say(r.number, &flow, fmt::format("{} psn {} has a BAD ICRC: a receiver drops it silently (the sender will "
                                     "time out and retransmit)",
                                     opcode_name(bth.opcode), bth.psn));
    return;
  }
  if (f.ecn() == Ecn::ce) {
    ce_marked_.insert(r.number);
    say(r.number, &flow, "this packet carries ECN Congestion Experienced: a switch marked it; the receiver "
                         "should answer with a CNP");
  }

  switch (info.operation) {
    case Operation::send:
    case Operation::rdma_write:
    case Operation::rdma_read_response:
    case Operation::atomic_write: {
      if (info.transport == Transport::ud) {
        ++st.messages;
        if (bth.dest_qp == gsi_qpn) {
          add_mad(r, f, flow);
        } else {
          // QP 0xFFFFFF: a multicast datagram, for every QP attached to the group its IP destination names.
          const std::string to_group =
              bth.dest_qp == multicast_qpn ? fmt::format(" to multicast group {}", to_string(f.dst_ip())) : "";
          say(r.number, &flow, fmt::format("UD SEND of {} bytes from QP 0x{:06x}{} (Q_Key 0x{:08x}){}",
                                           f.roce.payload.size(), f.roce.headers.deth.src_qp, to_group,
                                           f.roce.headers.deth.qkey,
                                           info.has(hdr_immdt) ? fmt::format(" with immediate 0x{:08x}", f.roce.headers.immdt) : ""));
        }
        return;
      }
      // Reliable and unreliable connected messages, reassembled; PSNs below the next expected one are
      // retransmissions (go-back-N resends everything from the NAKed or timed-out PSN).
      int64_t step;
      if (info.operation == Operation::rdma_read_response) {
        step = psn_step(flow.next_response_psn, bth.psn);
        // Responses cover only the PSNs of READ requests; between two responses, the peer's other requests
        // used PSNs too. So only a gap inside one response is a loss.
        if (step > 0 && (info.position == Position::first || info.position == Position::only)) step = 0;
        if (step < 0) ++st.retransmitted;
        if (step > 0) st.missing += uint64_t(step);
      } else {
        step = request_step(flow, bth.psn);
      }
      add_message_packet(r, f, flow, step);
      if (info.operation == Operation::rdma_read_response && info.has(hdr_aeth) &&
          info.position != Position::last && f.roce.headers.aeth.kind() != AethKind::ack) {
        say(r.number, &flow, explain_aeth(f.roce.headers.aeth, bth.psn));
      }
      return;
    }
    case Operation::rdma_read_request: {
      const Reth& reth = f.roce.headers.reth;
      // A READ consumes as many PSNs as its response has packets; only its first is known from the request.
      const bool retransmitted = request_step(flow, bth.psn) < 0;
      flow.request_gap_expected = true;
      ++st.messages;
      say(r.number, &flow, fmt::format("{}RDMA READ request psn {}: asks for {} bytes at va 0x{:x} (R_Key 0x{:x}); "
                                       "the response will use psn {} onwards",
                                       retransmitted ? "retransmitted " : "", bth.psn, reth.dma_length, reth.va,
                                       reth.rkey, bth.psn));
      return;
    }
    case Operation::compare_swap:
    case Operation::fetch_add: {
      const AtomicEth& a = f.roce.headers.atomic_eth;
      const bool retransmitted = request_step(flow, bth.psn) < 0;
      ++st.messages;
      const std::string what =
          info.operation == Operation::fetch_add
              ? fmt::format("FETCH_ADD psn {}: add {} to the 8 bytes at va 0x{:x} (R_Key 0x{:x}) and return the old value",
                            bth.psn, a.swap_add, a.va, a.rkey)
              : fmt::format("COMPARE_SWAP psn {}: if the 8 bytes at va 0x{:x} (R_Key 0x{:x}) equal {}, replace them "
                            "with {}; return the old value either way",
                            bth.psn, a.va, a.rkey, a.compare, a.swap_add);
      say(r.number, &flow, (retransmitted ? "retransmitted " : "") + what);
      return;
    }
    case Operation::acknowledge: {
      const Aeth& a = f.roce.headers.aeth;
      if (a.kind() == AethKind::ack) ++st.acks;
      else if (a.kind() == AethKind::rnr_nak) ++st.rnr_naks;
      else ++st.naks;
      say(r.number, &flow, explain_aeth(a, bth.psn));
      return;
    }
    case Operation::atomic_acknowledge: {
      ++st.acks;
      ++st.messages;
      say(r.number, &flow, fmt::format("ATOMIC ACK psn {} (MSN {}): the value at the address was {} before the "
                                       "operation",
                                       bth.psn, f.roce.headers.aeth.msn, f.roce.headers.atomic_ack_eth.original));
      return;
    }
    case Operation::flush: {
      ++st.messages;
      say(r.number, &flow, fmt::format("FLUSH psn {}: make the writes to va 0x{:x} (+{} bytes) persistent/visible",
                                       bth.psn, f.roce.headers.reth.va, f.roce.headers.reth.dma_length));
      return;
    }
    case Operation::cnp: {
      ++st.cnps;
      say(r.number, &flow, fmt::format("CNP to QP 0x{:06x}: the receiver saw ECN congestion marks on this QP's "
                                       "traffic; the sender should cut its rate (DCQCN)",
                                       bth.dest_qp));
      return;
    }
  }
}

int64_t Explainer::psn_step(std::optional<uint32_t>& next, uint32_t psn) {
  const int64_t step = next ? psn_diff(psn, *next) : 0;
  if (step < 0) return -1;
  next = (psn + 1) & psn_mask;
  return step;
}

int64_t Explainer::request_step(Flow& flow, uint32_t psn) {
  int64_t step = psn_step(flow.next_request_psn, psn);
  if (step > 0 && flow.request_gap_expected) step = 0;
  if (step >= 0) flow.request_gap_expected = false;
  if (step < 0) ++flow.stats.retransmitted;
  if (step > 0) flow.stats.missing += uint64_t(step);
  return step;
}

void Explainer::add_message_packet(const Record& r, const Frame& f, Flow& flow, int64_t step) {
  const Bth& bth = f.roce.bth();
  const OpcodeInfo& info = *f.roce.info;
  const bool starts = info.position == Position::first || info.position == Position::only;
  if (flow.open) {
    // A new message, another operation, or a PSN that goes back (go-back-N resending) while one is open:
    // the open message never got its LAST packet here.
    const bool same_operation = opcode_info(flow.open->first_opcode).operation == info.operation;
    const bool moves_forward = psn_diff(bth.psn, flow.open->last_psn) > 0;
    if (starts || !same_operation || !moves_forward) close_message(flow, "incomplete");
  }
  if (!flow.open) {
    OpenMessage m;
    m.first_frame = r.number;
    m.first_opcode = bth.opcode;
    m.first_psn = bth.psn;
    m.started_mid_message = !starts;
    m.retransmission = step < 0;
    m.capture_starts_inside = !starts && step == 0 && flow.stats.packets == 1;
    flow.open = m;
  }
  if (step > 0) {
    if (flow.open->missing == 0) flow.open->first_missing = (bth.psn - uint32_t(step)) & psn_mask;
    flow.open->missing += uint64_t(step);
  }
  OpenMessage& m = *flow.open;
  m.last_frame = r.number;
  m.last_psn = bth.psn;
  ++m.packets;
  m.bytes += f.roce.payload.size();
  if (info.has(hdr_reth)) m.reth = f.roce.headers.reth;
  if (info.has(hdr_immdt)) m.immdt = f.roce.headers.immdt;
  if (info.has(hdr_aeth)) m.aeth = f.roce.headers.aeth;
  if (info.has(hdr_xrceth)) m.xrc_srq = f.roce.headers.xrceth.srq;
  if (info.position == Position::last || info.position == Position::only) close_message(flow, nullptr);
}

void Explainer::close_message(Flow& flow, const char* why) {
  if (!flow.open) return;
  const OpenMessage& m = *flow.open;
  const OpcodeInfo& info = opcode_info(m.first_opcode);
  std::string text;
  if (m.retransmission) text += "retransmitted ";
  text += fmt::format("{} {} of {} bytes in {} ({})", transport_name(info.transport), message_kind(info.operation),
                      m.bytes, plural(m.packets, "packet"), psn_range(m.first_psn, m.last_psn));
  if (m.reth) text += fmt::format(" to va 0x{:x} R_Key 0x{:x}", m.reth->va, m.reth->rkey);
  if (m.immdt) text += fmt::format(", with immediate data 0x{:08x}", *m.immdt);
  if (m.xrc_srq) {
    // The XRCETH picks the target's shared receive queue: a SEND takes a receive from it, and any request
    // is allowed only if that SRQ is in the target QP's XRC domain.
    text += info.operation == Operation::send ? fmt::format(", into a receive of the target's XRC SRQ 0x{:06x}", *m.xrc_srq)
                                              : fmt::format(" (XRC SRQ 0x{:06x})", *m.xrc_srq);
  }
  if (info.operation == Operation::atomic_write) atomic_writes_[{flow.key.src.bytes, flow.key.dst.bytes}].insert(m.first_psn);
  if (info.operation == Operation::rdma_read_response) {
    const auto writes = atomic_writes_.find({flow.key.dst.bytes, flow.key.src.bytes});
    const bool atomic_write = m.bytes == 0 && writes != atomic_writes_.end() && writes->second.contains(m.first_psn);
    text += atomic_write ? fmt::format(": answers the ATOMIC WRITE at psn {} (its 8 bytes were placed)", m.first_psn)
                         : fmt::format(": answers the READ request at psn {}", m.first_psn);
  }
  if (m.missing == 1) {
    text += fmt::format("; psn {} is missing: it was lost before the capture point", m.first_missing);
  } else if (m.missing > 1) {
    text += fmt::format("; {} PSNs from psn {} are missing: lost before the capture point", m.missing, m.first_missing);
  }
  // Three reasons a message is seen from a middle packet on: the requester resends from a PSN inside it
  // (go-back-N after a NAK or timeout), its first packets were lost before the capture point (counted as
  // missing above), or the capture began while it was on the wire.
  if (m.started_mid_message) {
    if (m.retransmission) text += "; resumes a message part-way (go-back-N restarts at the lost PSN)";
    else if (m.missing > 0) text += "; the message began in what was lost";
    else if (m.capture_starts_inside) text += "; the capture starts part-way through this message";
    else text += "; its first packets are not in the capture";
  }
  if (why != nullptr) text += fmt::format(" ({}: the rest of this message does not follow here)", why);
  else ++flow.stats.messages;
  say_range(m.first_frame, m.last_frame, &flow, text);
  flow.open.reset();
}

namespace {

std::string describe_service(uint64_t service_id) {
  if (!is_rdma_cm_service(service_id)) return fmt::format("service 0x{:x}", service_id);
  const uint16_t space = rdma_cm_port_space(service_id);
  return fmt::format("rdma_cm port {} ({})", rdma_cm_port(service_id),
                     space == rdma_cm_ps_tcp   ? "TCP port space"
                     : space == rdma_cm_ps_udp ? "UDP port space"
                                               : "IB port space");
}

// One line for one decoded CM message; `src` sent it.
std::string describe_cm(const cm::CmMessage& message, const std::string& src) {
  struct Describe {
    const std::string& src;
    std::string operator()(const cm::Req& req) const {
      const bool xrc = cm::is_xrc(req.service_type, req.extended_transport);
      return fmt::format("CM REQ: {} asks to connect its {}QP 0x{:06x} (starting PSN {}, path MTU {}, retry count {}, "
                         "RNR retry {}) to {}",
                         src, xrc ? "XRC initiator " : "", req.local_qpn, req.starting_psn, ib_mtu_bytes(req.path_mtu),
                         req.retry_count, req.rnr_retry_count, describe_service(req.service_id));
    }
    std::string operator()(const cm::Rep& rep) const {
      // An XRC target has no QP number of a REP's own: it answers with it as the EE context (Linux's CM).
      if (rep.local_qpn == 0 && rep.local_eecn != 0) {
        return fmt::format("CM REP: {} accepts with its XRC target QP 0x{:06x} (starting PSN {})", src, rep.local_eecn,
                           rep.starting_psn);
      }
      return fmt::format("CM REP: {} accepts with its QP 0x{:06x} (starting PSN {})", src, rep.local_qpn,
                         rep.starting_psn);
    }
    std::string operator()(const cm::Rtu&) const {
      return "CM RTU: ready to use; both QPs are now connected (RTS) and data may flow";
    }
    std::string operator()(const cm::Dreq&) const { return fmt::format("CM DREQ: {} asks to disconnect", src); }
    std::string operator()(const cm::Drep&) const { return "CM DREP: disconnection confirmed"; }
    std::string operator()(const cm::Rej& rej) const {
      const std::string_view why = cm_reject_reason_name(rej.reason);
      return fmt::format("CM REJ: {} rejects the connection (reason {}{}{})", src, rej.reason, why.empty() ? "" : ": ",
                         why);
    }
    std::string operator()(const cm::Mra&) const { return "CM MRA: message received, the answer will take longer"; }
    std::string operator()(const cm::SidrReq& req) const {
      return fmt::format("CM SIDR_REQ: {} asks which UD QP serves {} (request ID 0x{:08x})", src,
                         describe_service(req.service_id), req.request_id);
    }
    std::string operator()(const cm::SidrRep& rep) const {
      const auto status = uint8_t(rep.status);
      const std::string_view name = cm_sidr_status_name(status);
      const std::string answer =
          rep.status == cm::SidrStatus::valid
              ? fmt::format("UD QP 0x{:06x} with Q_Key 0x{:08x}", rep.qpn, rep.qkey)
              : fmt::format("status {}{}{} (QP 0x{:06x}, Q_Key 0x{:08x})", status, name.empty() ? "" : ": ", name,
                            rep.qpn, rep.qkey);
      return fmt::format("CM SIDR_REP: {} answers request ID 0x{:08x} for {}: {}", src, rep.request_id,
                         describe_service(rep.service_id), answer);
    }
  };
  return std::visit(Describe{src}, message);
}

}  // namespace

void Explainer::add_mad(const Record& r, const Frame& f, Flow& flow) {
  const auto payload = f.roce.payload;
  const auto mad = read_mad_header(payload);
  if (!mad || mad->mgmt_class != mgmt_class_cm) {
    say(r.number, &flow, fmt::format("MAD to QP1, management class 0x{:02x}", mad ? mad->mgmt_class : 0));
    return;
  }
  const auto decoded = cm::decode(payload);
  if (const auto* d = std::get_if<cm::Decoded>(&decoded)) {
    say(r.number, &flow, describe_cm(d->message, to_string(f.src_ip())));
    return;
  }
  const std::string_view name = cm_attribute_name(mad->attribute_id);
  say(r.number, &flow,
      fmt::format("CM {} (not decoded: {})",
                  name.empty() ? fmt::format("attribute 0x{:04x}", mad->attribute_id) : std::string(name),
                  cm::to_string(std::get<cm::DecodeError>(decoded))));
}

void Explainer::finish() {
  for (const Flow* f : flow_order_) close_message(flows_.at(f->key), "incomplete");
}

std::string Explainer::flow_table() const {
  std::string out = fmt::format("{:<4}{:<44}{:<5}{:>8}{:>10}{:>10}{:>8}{:>8}{:>7}{:>7}{:>5}{:>5}{:>9}\n", "",
                                "flow", "type", "packets", "bytes", "messages", "retrans", "missing", "ACKs", "NAKs",
                                "RNR", "CNP", "bad ICRC");
  for (const Flow* f : flow_order_) {
    const FlowStats& s = f->stats;
    out += fmt::format("{:<4}{:<44}{:<5}{:>8}{:>10}{:>10}{:>8}{:>8}{:>7}{:>7}{:>5}{:>5}{:>9}\n", s.name,
                       flow_label(f->key), transport_name(s.transport), s.packets, s.bytes, s.messages,
                       s.retransmitted, s.missing, s.acks, s.naks, s.rnr_naks, s.cnps, s.bad_icrc);
  }
  return out;
}

int run_explain(const ExplainOptions& o) {
  Explainer ex;
  TunnelTally tunnels;
  const ReadResult read = read_capture(o.path, [&](const Record& record, const Frame& frame) {
    tunnels.add(record);
    // A frame mirrored at several places is told once (mirror_copies.hpp).
    if (record.copy_of == 0) ex.add(record, frame);
    else ex.add_copy(record, frame);
    return true;
  });
  if (read.outcome == ReadResult::Outcome::unreadable) return read.report(o.path);
  ex.finish();
  fmt::print("{}: {} frames ({} malformed)\n", o.path, ex.frames() + tunnels.copies(), ex.malformed());
  // A mirrored capture: the story is of the frames the tunnels carried.
  for (const std::string& line : tunnels.lines()) fmt::print("{}\n", line);
  fmt::print("\n");
  for (const std::string& line : ex.lines()) fmt::print("{}\n", line);
  fmt::print("\nFlows (one direction of one queue pair each):\n{}", ex.flow_table());
  if (!ex.pauses().empty()) {
    fmt::print("\nLink-level pauses (PFC per priority; PAUSE stops all):\n{}", ex.pauses().table());
  }
  return read.report(o.path);
}

}  // namespace uroce::pcap_tools
