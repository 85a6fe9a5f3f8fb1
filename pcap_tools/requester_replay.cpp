#include "pcap_tools/requester_replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "pcap_tools/replay_device.hpp"
#include "transport/wire/build.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::pcap_tools {

Request request_of(const wire::TransportHeaders& h, std::span<const uint8_t> payload) {
  const wire::OpcodeInfo& info = wire::opcode_info(h.bth.opcode);
  Request r;
  r.opcode = h.bth.opcode;
  r.psn = h.bth.psn;
  r.dest_qp = h.bth.dest_qp;
  r.ack_req = h.bth.ack_req;
  r.solicited = h.bth.solicited;
  r.payload.assign(payload.begin(), payload.end());
  if (info.has(wire::hdr_reth)) {
    r.va = h.reth.va;
    r.rkey = h.reth.rkey;
    r.dma_length = h.reth.dma_length;
  }
  if (info.has(wire::hdr_atomic_eth)) {
    r.va = h.atomic_eth.va;
    r.rkey = h.atomic_eth.rkey;
    r.swap_add = h.atomic_eth.swap_add;
    r.compare = h.atomic_eth.compare;
  }
  if (info.has(wire::hdr_immdt)) r.immdt = h.immdt;
  if (info.has(wire::hdr_ieth)) r.ieth = h.ieth;
  return r;
}

std::string to_string(const Request& r) {
  const wire::OpcodeInfo& info = wire::opcode_info(r.opcode);
  std::string s = fmt::format("{} psn {}{}{} qp {:#x} len {}", wire::opcode_name(r.opcode), r.psn,
                              r.ack_req ? " A" : "", r.solicited ? " S" : "", r.dest_qp, r.payload.size());
  if (info.has(wire::hdr_reth)) s += fmt::format(" va {:#x} rkey {:#x} dma {}", r.va, r.rkey, r.dma_length);
  if (info.has(wire::hdr_atomic_eth)) {
    s += fmt::format(" va {:#x} rkey {:#x} swap/add {:#x} compare {:#x}", r.va, r.rkey, r.swap_add, r.compare);
  }
  if (info.has(wire::hdr_immdt)) s += fmt::format(" imm {:#x}", r.immdt);
  if (info.has(wire::hdr_ieth)) s += fmt::format(" inv {:#x}", r.ieth);
  return s;
}

std::ostream& operator<<(std::ostream& os, const Request& r) { return os << to_string(r); }

std::string to_string(const Completion& c) {
  std::string s = fmt::format("work request {} {} {}", c.work_request, verbs::to_string(c.opcode),
                              verbs::to_string(c.status));
  if (c.opcode == verbs::WcOpcode::rdma_read) s += fmt::format(", {} bytes read", c.read.size());
  if (c.opcode == verbs::WcOpcode::comp_swap || c.opcode == verbs::WcOpcode::fetch_add) {
    s += fmt::format(", original {:#x}", c.original);
  }
  return s;
}

std::ostream& operator<<(std::ostream& os, const Completion& c) { return os << to_string(c); }

namespace {

template <class T>
std::string differs(std::string_view field, const T& uroce, const T& captured) {
  return fmt::format("{} (uroce {:#x}, captured {:#x})", field, uroce, captured);
}

// The first byte in which two payloads differ, or their lengths.
std::string bytes_differ(std::string_view what, const std::vector<uint8_t>& uroce,
                         const std::vector<uint8_t>& captured) {
  if (uroce.size() != captured.size()) {
    return fmt::format("{} length (uroce {}, captured {})", what, uroce.size(), captured.size());
  }
  const auto [mine, theirs] = std::mismatch(uroce.begin(), uroce.end(), captured.begin());
  return differs(fmt::format("{} byte {}", what, mine - uroce.begin()), *mine, *theirs);
}

}  // namespace

std::string what_differs(const Request& u, const Request& c) {
  if (u.opcode != c.opcode) {
    return fmt::format("opcode (uroce {}, captured {})", wire::opcode_name(u.opcode), wire::opcode_name(c.opcode));
  }
  if (u.psn != c.psn) return fmt::format("PSN (uroce {}, captured {})", u.psn, c.psn);
  if (u.dest_qp != c.dest_qp) return differs("destination QP", u.dest_qp, c.dest_qp);
  if (u.ack_req != c.ack_req) return fmt::format("AckReq (uroce {:d}, captured {:d})", u.ack_req, c.ack_req);
  if (u.solicited != c.solicited) return fmt::format("SE (uroce {:d}, captured {:d})", u.solicited, c.solicited);
  if (u.payload != c.payload) return bytes_differ("payload", u.payload, c.payload);
  if (u.va != c.va) return differs("remote address", u.va, c.va);
  if (u.rkey != c.rkey) return differs("R_Key", u.rkey, c.rkey);
  if (u.dma_length != c.dma_length) return fmt::format("DMA length (uroce {}, captured {})", u.dma_length, c.dma_length);
  if (u.immdt != c.immdt) return differs("immediate", u.immdt, c.immdt);
  if (u.ieth != c.ieth) return differs("invalidated R_Key", u.ieth, c.ieth);
  if (u.swap_add != c.swap_add) return differs("swap/add", u.swap_add, c.swap_add);
  if (u.compare != c.compare) return differs("compare", u.compare, c.compare);
  return {};
}

std::string what_differs(const Completion& u, const Completion& c) {
  if (u.work_request != c.work_request) {
    return fmt::format("work request (uroce {}, captured {})", u.work_request, c.work_request);
  }
  if (u.opcode != c.opcode) {
    return fmt::format("opcode (uroce {}, captured {})", verbs::to_string(u.opcode), verbs::to_string(c.opcode));
  }
  if (u.status != c.status) {
    return fmt::format("status (uroce {}, captured {})", verbs::to_string(u.status), verbs::to_string(c.status));
  }
  if (u.read != c.read) return bytes_differ("READ data", u.read, c.read);
  if (u.original != c.original) return differs("original value", u.original, c.original);
  return {};
}

namespace {

constexpr uint32_t psn_mask = 0xffffff;
constexpr uint64_t local_memory_va = 0x40000000;  // where the work requests' local buffers are registered
constexpr uint32_t send_queue_depth = 4096;

// Whether `psn` is `from` or comes after it, in the 24-bit PSN space (half of it ahead, half behind).
bool at_or_after(uint32_t psn, uint32_t from) { return ((psn - from) & psn_mask) < (psn_mask + 1) / 2; }

struct Recorder final : transport::PacketSink {
  std::vector<Request> sent;
  void transmit(const transport::OutPacket& p) override { sent.push_back(request_of(p.headers, p.payload)); }
};

// A work request read off the captured requests.
struct Message {
  verbs::SendWr wr;
  std::vector<uint8_t> data;  // SEND, WRITE: what it carries; READ, atomics: room for the result
  uint32_t first_psn = 0, last_psn = 0;
  // What the captured answers say of its end: acknowledged, and with which READ data or original value.
  std::vector<uint8_t> read;
  uint64_t original = 0;
};

bool is_atomic(verbs::WrOpcode op) {
  return op == verbs::WrOpcode::atomic_cmp_and_swp || op == verbs::WrOpcode::atomic_fetch_and_add;
}

verbs::WcOpcode completion_opcode(verbs::WrOpcode op) {
  switch (op) {
    case verbs::WrOpcode::rdma_write:
    case verbs::WrOpcode::rdma_write_with_imm: return verbs::WcOpcode::rdma_write;
    case verbs::WrOpcode::rdma_read: return verbs::WcOpcode::rdma_read;
    case verbs::WrOpcode::atomic_cmp_and_swp: return verbs::WcOpcode::comp_swap;
    case verbs::WrOpcode::atomic_fetch_and_add: return verbs::WcOpcode::fetch_add;
    case verbs::WrOpcode::atomic_write: return verbs::WcOpcode::atomic_write;
    default: return verbs::WcOpcode::send;
  }
}

// One pass over a connection's frames in capture order: the work requests behind its requests, what its
// answers acknowledge, and whether a replay can reproduce it at all. Stops at the first reason it cannot.
class ConnectionReader {
 public:
  ConnectionReader(const ReplayConnection& k, uint32_t mtu_bytes)
      : mtu_(mtu_bytes), next_psn_(k.first_psn) {}

  bool stopped() const { return !skipped.empty() || !error.empty(); }

  void request(const wire::Frame& f) {
    const wire::OpcodeInfo& info = *f.roce.info;
    const uint32_t psn = f.roce.bth().psn;
    if (psn != next_psn_) {
      const uint32_t last_missing = (psn - 1) & psn_mask;
      const std::string missing = last_missing == next_psn_ ? fmt::format("PSN {} is", next_psn_)
                                                           : fmt::format("PSNs {} to {} are", next_psn_, last_missing);
      skipped = at_or_after(psn, next_psn_)
                    ? fmt::format("{} not in the capture (lost before the capture point): the requester resent "
                                  "when its timers and NAKs said so, which a replay cannot reproduce", missing)
                    : fmt::format("PSN {} was sent again (a retransmission): when a requester resends depends "
                                  "on its timers and on what was lost, which a replay cannot reproduce", psn);
      return;
    }
    const bool opens = info.position == wire::Position::first || info.position == wire::Position::only;
    if (opens && open_) {
      error = fmt::format("PSN {}: {} while the message begun at PSN {} has had no LAST", psn,
                          wire::opcode_name(f.roce.bth().opcode), messages.back().first_psn);
      return;
    }
    if (!opens && !open_) {
      if (messages.empty()) {
        skipped = fmt::format("the capture begins inside a message (PSN {}, {}): the work request behind it is "
                              "not known whole", psn, wire::opcode_name(f.roce.bth().opcode));
      } else {
        error = fmt::format("PSN {}: {} with no FIRST before it", psn, wire::opcode_name(f.roce.bth().opcode));
      }
      return;
    }
    if (opens && !start_message(f)) return;
    Message& m = messages.back();
    if (!opens && info.operation != operation_) {
      error = fmt::format("PSN {}: {} in the middle of a message begun as another operation at PSN {}", psn,
                          wire::opcode_name(f.roce.bth().opcode), m.first_psn);
      return;
    }
    continue_message(m, f);
    if (stopped()) return;
    open_ = info.position == wire::Position::first || info.position == wire::Position::middle;
    m.last_psn = psn;
    next_psn_ = (psn + 1) & psn_mask;
    if (info.operation == wire::Operation::rdma_read_request) {  // its responses take a PSN each
      const uint64_t packets = std::max<uint64_t>(1, (uint64_t(f.roce.headers.reth.dma_length) + mtu_ - 1) / mtu_);
      m.last_psn = uint32_t(psn + packets - 1) & psn_mask;
      next_psn_ = (m.last_psn + 1) & psn_mask;
    }
  }

  void answer(const wire::Frame& f) {
    const wire::OpcodeInfo& info = *f.roce.info;
    const auto& h = f.roce.headers;
    const uint32_t psn = h.bth.psn;
    if (info.has(wire::hdr_aeth) && (h.aeth.syndrome >> 5) != 0) {
      skipped = fmt::format("the responder answered PSN {} with {} (syndrome {:#04x}): what a requester sends "
                            "after one depends on its timers and on when it arrived, which a replay cannot reproduce",
                            psn, (h.aeth.syndrome >> 5) == 1 ? "an RNR NAK" : "a NAK", h.aeth.syndrome);
      return;
    }
    if (info.operation == wire::Operation::rdma_read_response) {
      if (info.position == wire::Position::first || info.position == wire::Position::only) {
        reading_ = message_at(psn, verbs::WrOpcode::rdma_read);
      }
      Message* m = reading_ < messages.size() ? &messages[reading_] : nullptr;
      if (m != nullptr && ((psn - m->first_psn) & psn_mask) <= ((m->last_psn - m->first_psn) & psn_mask)) {
        m->read.insert(m->read.end(), f.roce.payload.begin(), f.roce.payload.end());
      }
    }
    if (info.operation == wire::Operation::atomic_acknowledge) {
      const size_t i = message_at(psn, verbs::WrOpcode::atomic_cmp_and_swp);
      if (i < messages.size()) messages[i].original = h.atomic_ack_eth.original;
    }
    // An answer acknowledges every message up to its PSN (a READ response's FIRST or MIDDLE, its own
    // READ's packets before it).
    while (acknowledged < messages.size() && at_or_after(psn, messages[acknowledged].last_psn)) ++acknowledged;
  }

  void finish() {
    if (open_ && !stopped()) {
      skipped = fmt::format("the capture ends inside the message begun at PSN {}: the work request behind it is "
                            "not known whole", messages.back().first_psn);
    }
  }

  std::vector<Message> messages;
  size_t acknowledged = 0;  // the first messages, which the captured answers acknowledge
  uint64_t memory = 0;      // local memory the work requests need
  std::string skipped, error;

 private:
  bool start_message(const wire::Frame& f) {
    const wire::OpcodeInfo& info = *f.roce.info;
    const auto& h = f.roce.headers;
    Message m;
    m.first_psn = h.bth.psn;
    uint64_t room = 0;  // for a READ's or an atomic's result
    switch (info.operation) {
      case wire::Operation::send:
        m.wr.opcode = verbs::WrOpcode::send;
        break;
      case wire::Operation::rdma_write:
        m.wr.opcode = verbs::WrOpcode::rdma_write;
        m.wr.remote_addr = h.reth.va;
        m.wr.rkey = h.reth.rkey;
        break;
      case wire::Operation::rdma_read_request:
        m.wr.opcode = verbs::WrOpcode::rdma_read;
        m.wr.remote_addr = h.reth.va;
        m.wr.rkey = h.reth.rkey;
        room = h.reth.dma_length;
        break;
      case wire::Operation::compare_swap:
      case wire::Operation::fetch_add: {
        const bool cas = info.operation == wire::Operation::compare_swap;
        m.wr.opcode = cas ? verbs::WrOpcode::atomic_cmp_and_swp : verbs::WrOpcode::atomic_fetch_and_add;
        m.wr.remote_addr = h.atomic_eth.va;
        m.wr.rkey = h.atomic_eth.rkey;
        m.wr.compare_add = cas ? h.atomic_eth.compare : h.atomic_eth.swap_add;
        m.wr.swap = h.atomic_eth.swap_add;
        room = 8;
        break;
      }
      case wire::Operation::atomic_write:
        // Its 8 bytes travel in the work request (the replay posts what the capture carried).
        if (f.roce.payload.size() != 8) {
          error = fmt::format("PSN {}: an ATOMIC WRITE of {} bytes (it carries 8)", h.bth.psn, f.roce.payload.size());
          return false;
        }
        m.wr.opcode = verbs::WrOpcode::atomic_write;
        m.wr.remote_addr = h.reth.va;
        m.wr.rkey = h.reth.rkey;
        std::memcpy(&m.wr.compare_add, f.roce.payload.data(), 8);
        break;
      default:
        error = fmt::format("PSN {}: {} is no request a uroce work request sends", h.bth.psn,
                            wire::opcode_name(f.roce.bth().opcode));
        return false;
    }
    if (!take_memory(room)) return false;
    m.data.resize(room);
    operation_ = info.operation;
    messages.push_back(std::move(m));
    if (messages.back().wr.opcode == verbs::WrOpcode::rdma_read || is_atomic(messages.back().wr.opcode)) {
      at_psn_[h.bth.psn] = messages.size() - 1;
    }
    return true;
  }

  void continue_message(Message& m, const wire::Frame& f) {
    const wire::OpcodeInfo& info = *f.roce.info;
    const auto& h = f.roce.headers;
    if (info.operation == wire::Operation::send || info.operation == wire::Operation::rdma_write) {
      if (!take_memory(f.roce.payload.size())) return;
      m.data.insert(m.data.end(), f.roce.payload.begin(), f.roce.payload.end());
    }
    // A multi-packet message shows its immediate or invalidated key only on its LAST packet.
    if (info.has(wire::hdr_immdt)) {
      m.wr.imm_data = h.immdt;
      if (m.wr.opcode == verbs::WrOpcode::send) m.wr.opcode = verbs::WrOpcode::send_with_imm;
      if (m.wr.opcode == verbs::WrOpcode::rdma_write) m.wr.opcode = verbs::WrOpcode::rdma_write_with_imm;
    }
    if (info.has(wire::hdr_ieth)) {
      m.wr.invalidate_rkey = h.ieth;
      m.wr.opcode = verbs::WrOpcode::send_with_inv;
    }
    if (h.bth.solicited) m.wr.send_flags |= verbs::send_solicited;
  }

  bool take_memory(uint64_t bytes) {
    memory += bytes;
    if (memory <= max_replay_memory) return true;
    error = fmt::format("the work requests need more than the {} MiB of local memory a replay registers",
                        max_replay_memory >> 20);
    return false;
  }

  // The READ or atomic whose first PSN this is, among those the capture has shown so far (a PSN that has
  // wrapped round names the latest); none: past the end of `messages`.
  size_t message_at(uint32_t psn, verbs::WrOpcode kind) const {
    const auto it = at_psn_.find(psn);
    if (it == at_psn_.end()) return none;
    const verbs::WrOpcode op = messages[it->second].wr.opcode;
    const bool fits = kind == verbs::WrOpcode::rdma_read ? op == kind : is_atomic(op);
    return fits ? it->second : none;
  }

  static constexpr size_t none = ~size_t(0);

  uint64_t mtu_;
  uint32_t next_psn_;
  bool open_ = false;  // inside a multi-packet message
  wire::Operation operation_ = wire::Operation::send;
  std::unordered_map<uint32_t, size_t> at_psn_;  // first PSN -> READ or atomic message
  size_t reading_ = none;  // the READ whose responses are arriving
};

// uroce's requester, with the work requests posted and local memory laid out for them: each message's
// data back to back in one region.
class ReplayRequester {
 public:
  ReplayRequester(Recorder& recorder, const ReplayConnection& k, verbs::Mtu mtu, std::vector<Message>& messages)
      : device_(recorder, k.requester, mtu), messages_(messages) {}

  std::string set_up(const ReplayConnection& k, uint64_t memory) {
    const uint32_t depth = uint32_t(std::min<size_t>(messages_.size(), send_queue_depth)) + 1;
    const ReplayPeer responder{.address = k.responder, .qpn = k.responder_qpn, .sq_psn = k.first_psn,
                               .rq_psn = 0, .timeout = 0};
    if (std::string e = device_.open(depth, {depth, 1, 1, 1, 0}, responder); !e.empty()) return e;
    depth_ = depth;
    if (!device_.register_memory(local_memory_va, std::max<uint64_t>(memory, 8), key_)) {
      return "cannot register the work requests' memory";
    }
    std::vector<uint8_t>& local = device_.memory(0);
    uint64_t offset = 0;
    for (size_t i = 0; i < messages_.size(); ++i) {
      Message& m = messages_[i];
      std::copy(m.data.begin(), m.data.end(), local.begin() + std::ptrdiff_t(offset));
      m.wr.wr_id = i + 1;
      m.wr.send_flags |= verbs::send_signaled;
      if (!m.data.empty()) m.wr.sg_list.push_back({local_memory_va + offset, uint32_t(m.data.size()), key_});
      offsets_.push_back(offset);
      offset += m.data.size();
    }
    return {};
  }

  // As many work requests as the send queue has room for, then lets the requester send.
  void post_and_run() {
    while (posted_ < messages_.size() && posted_ - completed_.size() < depth_ - 1) {
      if (device_.device().post_send(device_.qpn(), messages_[posted_].wr, 0) != 0) break;
      ++posted_;
    }
    device_.device().run(0);
  }

  // Hands the requester a captured answer, addressed to its QP.
  void feed(const wire::Frame& f) {
    device_.feed(wire::spec_from_frame(f));
    collect();
    post_and_run();
  }

  std::vector<Completion> completions() {
    collect();
    return std::move(completed_);
  }

  uint64_t posted() const { return posted_; }

 private:
  void collect() {
    verbs::WorkCompletion wc[64];
    int n = 0;
    while ((n = device_.device().poll_cq(device_.cq(), wc)) > 0) {
      for (int i = 0; i < n; ++i) completed_.push_back(completion_of(wc[i]));
    }
  }

  Completion completion_of(const verbs::WorkCompletion& wc) const {
    Completion c;
    c.work_request = wc.wr_id - 1;
    c.opcode = wc.opcode;
    c.status = wc.status;
    if (wc.status != verbs::WcStatus::success || c.work_request >= messages_.size()) return c;
    const Message& m = messages_[c.work_request];
    const auto at = device_.memory(0).begin() + std::ptrdiff_t(offsets_[c.work_request]);
    if (m.wr.opcode == verbs::WrOpcode::rdma_read) c.read.assign(at, at + std::ptrdiff_t(m.data.size()));
    if (is_atomic(m.wr.opcode)) std::memcpy(&c.original, &*at, sizeof c.original);
    return c;
  }

  ReplayDevice device_;
  std::vector<Message>& messages_;
  std::vector<uint64_t> offsets_;
  std::vector<Completion> completed_;
  uint32_t key_ = 0, depth_ = 1;
  size_t posted_ = 0;
};

// What the capture says of how the acknowledged work requests completed.
std::vector<Completion> captured_completions(const ConnectionReader& reader) {
  std::vector<Completion> out;
  for (size_t i = 0; i < reader.acknowledged; ++i) {
    const Message& m = reader.messages[i];
    Completion c;
    c.work_request = i;
    c.opcode = completion_opcode(m.wr.opcode);
    if (m.wr.opcode == verbs::WrOpcode::rdma_read) c.read = m.read;
    if (is_atomic(m.wr.opcode)) c.original = m.original;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

RequesterReplayResult replay_requester(const FrameBytes& frames, const ReplayConnection& k, uint32_t default_mtu) {
  RequesterReplayResult r;
  const auto mtu = replay_mtu(k, default_mtu, r.error);
  if (!mtu) return r;
  if (k.requester_qpn == 0) {
    r.skipped = "the capture shows no answers from the responder (one direction captured?): what a requester "
                "sends depends on them";
    return r;
  }
  ConnectionReader reader(k, verbs::mtu_bytes(*mtu));
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f)) continue;
    if (is_request_of(f, k)) {
      reader.request(f);
      r.expected.push_back(request_of(f.roce.headers, f.roce.payload));
    } else if (is_answer_to(f, k)) {
      reader.answer(f);
    }
    if (reader.stopped()) break;
  }
  reader.finish();
  if (reader.stopped()) {
    r.skipped = reader.skipped;
    r.error = reader.error;
    r.expected.clear();
    return r;
  }
  r.expected_completions = captured_completions(reader);

  Recorder recorder;
  ReplayRequester requester(recorder, k, *mtu, reader.messages);
  r.error = requester.set_up(k, reader.memory);
  if (!r.error.empty()) {
    r.expected.clear();
    r.expected_completions.clear();
    return r;
  }
  requester.post_and_run();
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f) || !is_answer_to(f, k)) continue;
    requester.feed(f);
    ++r.answers;
  }
  r.got_completions = requester.completions();
  r.work_requests = requester.posted();
  r.got = std::move(recorder.sent);
  return r;
}

RequesterComparison compare_requester(const RequesterReplayResult& r) {
  return {compare_in_order(r.expected, r.got), compare_in_order(r.expected_completions, r.got_completions)};
}

}  // namespace uroce::pcap_tools
