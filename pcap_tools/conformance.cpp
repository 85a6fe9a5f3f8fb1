#include "pcap_tools/conformance.hpp"

#include <fmt/format.h>

#include "transport/wire/bth.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::pcap_tools {

namespace {

constexpr uint32_t max_mtu = 4096;

bool is_path_mtu(size_t n) { return n >= 256 && n <= max_mtu && (n & (n - 1)) == 0; }

bool starts_message(wire::Position p) { return p == wire::Position::first || p == wire::Position::only; }
bool ends_message(wire::Position p) { return p == wire::Position::last || p == wire::Position::only; }

// PSNs a READ request takes: one per response packet.
uint32_t read_psn_span(uint64_t dma_length, uint32_t mtu) {
  return dma_length == 0 ? 1 : uint32_t((dma_length + mtu - 1) / mtu);
}

}  // namespace

void ConformanceChecker::add_violation(std::string rule, uint64_t n, const wire::Frame& f, std::string text) {
  std::string where;
  if (f.has(wire::layer_bth)) {
    where = fmt::format("{} → {} QP {:#x} psn {}: ", wire::to_string(f.src_ip()), wire::to_string(f.dst_ip()),
                        f.roce.bth().dest_qp, f.roce.bth().psn);
  }
  violations_.push_back({std::move(rule), n, where + text});
}

// What Wireshark's MAC Control dissector warns about too: a PAUSE or PFC frame a bridge would forward or
// drop instead of acting on it (802.3 Annex 31B: only the reserved group address pauses), and a PFC
// class-enable vector with bits set outside the eight priorities (802.1Qbb: they are reserved, zero).
void ConformanceChecker::check_mac_control(uint64_t n, const wire::Frame& f) {
  const wire::MacControl& m = f.mac_control;
  if (!m.is_pause() && !m.is_pfc()) return;
  const char* name = m.is_pfc() ? "PFC" : "PAUSE";
  if (f.eth.dst != wire::mac_control_group) {
    add_violation("pause_destination", n, f,
                  fmt::format("{} from {} to {}, not 01:80:c2:00:00:01: the link partner does not act on it", name,
                              wire::to_string(f.eth.src), wire::to_string(f.eth.dst)));
  }
  if (m.is_pfc() && m.reserved_enable_bits != 0) {
    add_violation("pfc_enable_vector", n, f,
                  fmt::format("PFC from {}: class-enable vector {:#06x}, its reserved upper byte is not zero",
                              wire::to_string(f.eth.src), m.reserved_enable_bits << 8 | m.enabled));
  }
}

void ConformanceChecker::add(uint64_t n, const wire::Frame& f) {
  ++frames_;
  if (!f.ok()) {  // (as `uroce dissect` counts them: whatever the frame claimed to be)
    add_violation("malformed", n, f, fmt::format("{} at byte {}", wire::to_string(f.error), f.error_offset));
    return;
  }
  if (f.kind == wire::FrameKind::mac_control) {
    check_mac_control(n, f);
    return;
  }
  if (f.kind != wire::FrameKind::roce) return;
  ++roce_;
  if (const uint32_t computed = wire::compute_icrc(f); computed != f.roce.icrc) {
    add_violation("bad_icrc", n, f, fmt::format("ICRC {:#010x}, computed {:#010x}", f.roce.icrc, computed));
    return;  // a receiver drops it: it takes no part in the sequence
  }
  const wire::OpcodeInfo& info = *f.roce.info;
  // XRC requests follow RC's rules; their flow is the one to the target QP.
  if (info.transport != wire::Transport::rc && info.transport != wire::Transport::uc &&
      info.transport != wire::Transport::xrc) {
    if (f.roce.payload.size() > max_mtu) {
      add_violation("payload_size", n, f, fmt::format("{} bytes of payload, more than any path MTU", f.roce.payload.size()));
    }
    return;
  }
  if (info.is_request) {
    check_request(n, f);
  } else {
    check_response(n, f);
  }
}

void ConformanceChecker::check_payload_size(uint64_t n, const wire::Frame& f, FlowState& s) {
  const wire::Position pos = f.roce.info->position;
  const size_t len = f.roce.payload.size();
  if (pos == wire::Position::first || pos == wire::Position::middle) {
    if (!is_path_mtu(len)) {
      add_violation("payload_size", n, f,
                    fmt::format("{} with {} bytes of payload: FIRST and MIDDLE packets carry a whole path MTU "
                                "(256, 512, 1024, 2048 or 4096 bytes)", f.roce.info->name, len));
    } else if (s.mtu != 0 && len != s.mtu) {
      add_violation("payload_size", n, f, fmt::format("{} with {} bytes of payload, where this flow's FIRST and "
                                                      "MIDDLE packets carried {}", f.roce.info->name, len, s.mtu));
    } else {
      s.mtu = uint32_t(len);
    }
  } else if (len > (s.mtu != 0 ? s.mtu : max_mtu)) {
    add_violation("payload_size", n, f, fmt::format("{} with {} bytes of payload, more than the path MTU ({})",
                                                    f.roce.info->name, len, s.mtu != 0 ? s.mtu : max_mtu));
  }
}

std::optional<ConformanceChecker::OpenMessage> ConformanceChecker::follow(uint64_t n, const wire::Frame& f,
                                                                         FlowState& s, uint32_t psn_span,
                                                                         std::optional<uint64_t> dma_length) {
  const wire::OpcodeInfo& info = *f.roce.info;
  const uint32_t psn = f.roce.bth().psn;
  const bool in_sequence = s.next_psn && *s.next_psn == psn;
  s.next_psn = (psn + psn_span) & wire::psn_mask;
  if (!in_sequence) {  // the first packet seen, a retransmission or a gap: judge again from the next message
    s.known = false;
    s.open.reset();
  }
  if (starts_message(info.position)) {
    if (s.known && s.open) {
      add_violation("opcode_sequence", n, f, fmt::format("{} while the {} message of frame {} is still open",
                                                         info.name, wire::operation_name(s.open->operation),
                                                         s.open->first_frame));
    }
    s.known = true;
    s.open = OpenMessage{info.operation, n, 0, dma_length};
  } else if (s.known && !s.open) {
    add_violation("opcode_sequence", n, f, fmt::format("{} with no message open", info.name));
    return std::nullopt;
  } else if (s.known && s.open->operation != info.operation) {
    add_violation("opcode_sequence", n, f, fmt::format("{} inside the {} message of frame {}", info.name,
                                                       wire::operation_name(s.open->operation), s.open->first_frame));
    s.known = false;
    s.open.reset();
    return std::nullopt;
  }
  if (!s.known) return std::nullopt;
  s.open->bytes += f.roce.payload.size();
  if (!ends_message(info.position)) return std::nullopt;
  std::optional<OpenMessage> done = s.open;
  s.open.reset();
  return done;
}

void ConformanceChecker::check_atomic_operand(uint64_t n, const wire::Frame& f) {
  const wire::Operation op = f.roce.info->operation;
  const auto& h = f.roce.headers;
  if (op == wire::Operation::compare_swap || op == wire::Operation::fetch_add) {
    if (h.atomic_eth.va & 7) {
      add_violation("atomic_operand", n, f, fmt::format("{} at 0x{:x}: atomics need an 8-byte aligned address",
                                                        f.roce.info->name, h.atomic_eth.va));
    }
  } else if (op == wire::Operation::atomic_write) {
    // Its answer is an empty READ RESPONSE at its PSN: read_response_length holds it to 0 bytes.
    reads_[{f.src_ip().bytes, f.dst_ip().bytes}][h.bth.psn] = 0;
    if ((h.reth.va & 7) || h.reth.dma_length != 8 || f.roce.payload.size() != 8) {
      add_violation("atomic_operand", n, f,
                    fmt::format("ATOMIC WRITE of {} bytes (RETH DMA length {}) at 0x{:x}: it places 8 bytes at "
                                "an 8-byte aligned address",
                                f.roce.payload.size(), h.reth.dma_length, h.reth.va));
    }
  }
}

void ConformanceChecker::check_request(uint64_t n, const wire::Frame& f) {
  const wire::OpcodeInfo& info = *f.roce.info;
  const auto& h = f.roce.headers;
  FlowState& s = requests_[{f.src_ip().bytes, f.dst_ip().bytes, h.bth.dest_qp}];
  check_payload_size(n, f, s);
  if (info.operation == wire::Operation::rdma_read_request) {
    reads_[{f.src_ip().bytes, f.dst_ip().bytes}][h.bth.psn] = h.reth.dma_length;
    // Its PSNs are its responses': without the flow's MTU, where the next request starts is not known.
    const bool span_known = s.mtu != 0 || h.reth.dma_length <= 256;
    const uint32_t span = read_psn_span(h.reth.dma_length, s.mtu != 0 ? s.mtu : 256);
    follow(n, f, s, span, std::nullopt);
    if (!span_known) s.next_psn.reset();
    return;
  }
  if (info.operation != wire::Operation::send && info.operation != wire::Operation::rdma_write) {
    check_atomic_operand(n, f);
    follow(n, f, s, 1, std::nullopt);  // atomics and the rest: one packet, one PSN
    return;
  }
  // A WRITE's RETH (on its FIRST or ONLY) says how long the message is.
  const std::optional<uint64_t> reth_length =
      info.has(wire::hdr_reth) ? std::optional<uint64_t>(h.reth.dma_length) : std::nullopt;
  const std::optional<OpenMessage> done = follow(n, f, s, 1, reth_length);
  if (done && done->dma_length && done->bytes != *done->dma_length) {
    add_violation("write_length", n, f, fmt::format("the RDMA WRITE of frame {} carried {} bytes, its RETH says {}",
                                                    done->first_frame, done->bytes, *done->dma_length));
  }
}

void ConformanceChecker::check_response(uint64_t n, const wire::Frame& f) {
  const wire::OpcodeInfo& info = *f.roce.info;
  const auto& h = f.roce.headers;
  FlowState& r = responses_[{f.src_ip().bytes, f.dst_ip().bytes, h.bth.dest_qp}];
  if (info.operation != wire::Operation::rdma_read_response) return;
  check_payload_size(n, f, r);
  // The READ request a FIRST or ONLY answers (same hosts the other way, same PSN) says how long it is.
  std::optional<uint64_t> asked;
  if (starts_message(info.position)) {
    const auto reads = reads_.find({f.dst_ip().bytes, f.src_ip().bytes});
    if (reads != reads_.end()) {
      if (auto it = reads->second.find(h.bth.psn); it != reads->second.end()) asked = it->second;
    }
  }
  const std::optional<OpenMessage> done = follow(n, f, r, 1, asked);
  if (done && done->dma_length && done->bytes != *done->dma_length) {
    add_violation("read_response_length", n, f,
                  fmt::format("READ response of {} bytes (from frame {}) to a READ request of {}", done->bytes,
                              done->first_frame, *done->dma_length));
  }
}

}  // namespace uroce::pcap_tools
