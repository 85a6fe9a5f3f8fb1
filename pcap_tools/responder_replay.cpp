#include "pcap_tools/responder_replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>

#include "transport/device.hpp"
#include "transport/memory/memory_backend.hpp"
#include "transport/wire/build.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::pcap_tools {


Answer answer_of(const wire::TransportHeaders& h, size_t payload_length) {
  Answer a;
  a.opcode = h.bth.opcode;
  a.psn = h.bth.psn;
  a.ack_req = h.bth.ack_req;
  if (wire::opcode_info(h.bth.opcode).has(wire::hdr_aeth)) {
    a.syndrome = h.aeth.syndrome;
    a.msn = h.aeth.msn;
  }
  a.length = payload_length;
  return a;
}

std::string to_string(const Answer& a) {
  std::string s = fmt::format("{} psn {}{} len {}", wire::opcode_name(a.opcode), a.psn, a.ack_req ? " A" : "", a.length);
  if (a.syndrome >= 0) s += fmt::format(" syndrome {:#04x} msn {}", a.syndrome, a.msn);
  return s;
}

std::ostream& operator<<(std::ostream& os, const Answer& a) { return os << to_string(a); }

namespace {

bool parse_rc(const std::vector<uint8_t>& bytes, wire::Frame& f) {
  return wire::parse_frame(bytes, f) == wire::ParseError::none && f.is_roce() &&
         f.roce.info->transport == wire::Transport::rc;
}

bool is_first_or_middle(const wire::OpcodeInfo& info) {
  return info.position == wire::Position::first || info.position == wire::Position::middle;
}

// A request that takes a receive from the responder's queue: the first packet of a SEND, or the packet of
// a WRITE with immediate that carries the immediate.
bool takes_receive(const wire::OpcodeInfo& info) {
  if (info.operation == wire::Operation::send) {
    return info.position == wire::Position::first || info.position == wire::Position::only;
  }
  return info.operation == wire::Operation::rdma_write && info.has(wire::hdr_immdt);
}

void widen_region(ReplayConnection& k, uint32_t rkey, uint64_t va, uint64_t len) {
  if (len == 0 || va > ~uint64_t(0) - len) return;  // nothing to reach, or a range past the address space
  auto [r, fresh] = k.regions.try_emplace(rkey, va, va + len);
  if (!fresh) {
    r->second.first = std::min(r->second.first, va);
    r->second.second = std::max(r->second.second, va + len);
  }
}

void note_request(ReplayConnection& k, const wire::Frame& f, uint64_t& send_bytes) {
  const wire::OpcodeInfo& info = *f.roce.info;
  const auto& h = f.roce.headers;
  if (info.has(wire::hdr_reth)) widen_region(k, h.reth.rkey, h.reth.va, h.reth.dma_length);
  if (info.has(wire::hdr_atomic_eth)) widen_region(k, h.atomic_eth.rkey, h.atomic_eth.va, 8);
  if (is_first_or_middle(info)) k.path_mtu = std::max<uint32_t>(k.path_mtu, uint32_t(f.roce.payload.size()));
  if (info.operation == wire::Operation::send) {
    if (info.position == wire::Position::first || info.position == wire::Position::only) send_bytes = 0;
    send_bytes += f.roce.payload.size();
    k.largest_send = std::max(k.largest_send, send_bytes);
  }
}

// The requester's QPN is the destination of the responder's answers: the first answer, between the same
// hosts, whose PSN is one of this connection's requests (two connections may join the same hosts).
void learn_requester_qpn(ReplayConnection& k, const FrameBytes& frames) {
  std::set<uint32_t> psns;
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f)) continue;
    const auto& bth = f.roce.bth();
    if (f.roce.info->is_request && f.src_ip() == k.requester && bth.dest_qp == k.responder_qpn) {
      psns.insert(bth.psn);
    } else if (!f.roce.info->is_request && f.src_ip() == k.responder && f.dst_ip() == k.requester &&
               psns.contains(bth.psn)) {
      k.requester_qpn = bth.dest_qp;
      return;
    }
  }
}

// READ responses show the path MTU too, in their FIRST and MIDDLE packets.
void learn_mtu_from_answers(ReplayConnection& k, const FrameBytes& frames) {
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f) || f.roce.info->is_request || !is_first_or_middle(*f.roce.info)) continue;
    if (f.src_ip() == k.responder && f.dst_ip() == k.requester && f.roce.bth().dest_qp == k.requester_qpn) {
      k.path_mtu = std::max<uint32_t>(k.path_mtu, uint32_t(f.roce.payload.size()));
    }
  }
}

}  // namespace

bool add_rebuilt(FrameBytes& frames, const wire::Frame& f) {
  const wire::FrameSpec spec = wire::spec_from_frame(f);
  std::vector<uint8_t> out(wire::frame_size(spec));
  const wire::BuildResult b = wire::build_frame(spec, out);
  if (!b.ok()) return false;
  out.resize(b.size);
  frames.push_back(std::move(out));
  return true;
}

std::vector<ReplayConnection> rc_connections(const FrameBytes& frames) {
  std::vector<ReplayConnection> out;
  std::vector<uint64_t> send_bytes;  // per connection: the SEND message in progress
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f) || !f.roce.info->is_request) continue;
    const uint32_t qpn = f.roce.bth().dest_qp;
    auto it = std::find_if(out.begin(), out.end(), [&](const ReplayConnection& k) {
      return k.requester == f.src_ip() && k.responder == f.dst_ip() && k.responder_qpn == qpn;
    });
    if (it == out.end()) {
      ReplayConnection k;
      k.requester = f.src_ip();
      k.responder = f.dst_ip();
      k.responder_qpn = qpn;
      k.first_psn = f.roce.bth().psn;
      out.push_back(k);
      send_bytes.push_back(0);
      it = out.end() - 1;
    }
    note_request(*it, f, send_bytes[size_t(it - out.begin())]);
  }
  for (ReplayConnection& k : out) {
    learn_requester_qpn(k, frames);
    learn_mtu_from_answers(k, frames);
  }
  return out;
}

namespace {

struct Recorder final : transport::PacketSink {
  std::vector<Answer> sent;
  void transmit(const transport::OutPacket& p) override { sent.push_back(answer_of(p.headers, p.payload.size())); }
};

std::optional<verbs::Mtu> mtu_of(uint32_t bytes) {
  for (verbs::Mtu m : {verbs::Mtu::mtu_256, verbs::Mtu::mtu_512, verbs::Mtu::mtu_1024, verbs::Mtu::mtu_2048,
                       verbs::Mtu::mtu_4096}) {
    if (verbs::mtu_bytes(m) == bytes) return m;
  }
  return std::nullopt;
}

constexpr uint32_t all_access = verbs::access_local_write | verbs::access_remote_write | verbs::access_remote_read |
                                verbs::access_remote_atomic;
constexpr uint64_t receive_area_va = 0x7f0000000000;  // where the receives' buffer is registered
constexpr uint32_t receive_depth = 4096;

// The responder's device: one QP where the captured responder's was, with memory where the requests
// reach it. Everything the replay owns lives here.
class ReplayResponder {
 public:
  explicit ReplayResponder(Recorder& recorder) : device_(recorder) {}

  std::string set_up(const ReplayConnection& k, verbs::Mtu mtu) {
    device_.set_gids({k.responder});
    device_.set_active_mtu(mtu);
    if (device_.alloc_pd(pd_) != 0 || device_.create_cq(receive_depth, cq_) != 0) return "cannot create a PD or CQ";
    uint64_t total = std::max<uint64_t>(k.largest_send, 1);
    for (const auto& [rkey, range] : k.regions) total += range.second - range.first;
    if (total > max_replay_memory) {
      return fmt::format("the requests reach {} MiB of memory, more than the {} MiB a replay registers",
                         total >> 20, max_replay_memory >> 20);
    }
    for (const auto& [rkey, range] : k.regions) {
      uint32_t key = 0;
      if (!register_memory(range.first, range.second - range.first, key)) {
        return fmt::format("cannot register [{:#x}, {:#x})", range.first, range.second);
      }
      key_of_[rkey] = key;
    }
    receive_length_ = uint32_t(std::max<uint64_t>(k.largest_send, 1));
    if (!register_memory(receive_area_va, receive_length_, receive_key_)) return "cannot register a receive buffer";
    transport::QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    init.cap = {64, receive_depth, 1, 1, 0};
    if (device_.create_qp(init, qpn_) != 0) return "cannot create the QP";
    if (!connect(k, mtu)) return "cannot bring the QP to RTS";
    return {};
  }

  // Feeds one captured request, its keys and QP number made ours, as a burst of its own (its ACK, coalesced
  // over nothing, leaves at once).
  void feed(const wire::Frame& f) {
    const wire::OpcodeInfo& info = *f.roce.info;
    wire::FrameSpec spec = wire::spec_from_frame(f);
    spec.headers.bth.dest_qp = qpn_;
    if (info.has(wire::hdr_reth)) spec.headers.reth.rkey = our_key(f.roce.headers.reth.rkey);
    if (info.has(wire::hdr_atomic_eth)) spec.headers.atomic_eth.rkey = our_key(f.roce.headers.atomic_eth.rkey);
    if (takes_receive(info)) post_receive();
    rebuilt_.resize(wire::frame_size(spec));
    const wire::BuildResult b = wire::build_frame(spec, rebuilt_);
    if (!b.ok()) return;
    device_.receive(std::span<const uint8_t>(rebuilt_.data(), b.size), 0);
    device_.run(0);
    verbs::WorkCompletion wc[64];
    while (device_.poll_cq(cq_, wc) > 0) {
    }
  }

 private:
  bool register_memory(uint64_t va, uint64_t length, uint32_t& key) {
    memory_.emplace_back(length);
    auto backend = std::make_shared<transport::HostMemory>(memory_.back().data(), length);
    return device_.reg_mr(pd_, va, length, all_access, std::move(backend), 0, key) == 0;
  }

  // An R_Key the requests use but no region was made for (a zero-length access) stays as it is.
  uint32_t our_key(uint32_t rkey) const {
    const auto it = key_of_.find(rkey);
    return it == key_of_.end() ? rkey : it->second;
  }

  // Every receive points at the same buffer, large enough for the longest SEND: the replay compares
  // answers, not the bytes received. A receive that a duplicate request did not take stays posted; with
  // the queue full, one more is not needed.
  void post_receive() {
    verbs::RecvWr wr;
    wr.wr_id = ++receives_;
    wr.sg_list.push_back({receive_area_va, receive_length_, receive_key_});
    device_.post_recv(qpn_, wr);
  }

  // To RTS facing the requester, as rxe's responder was set up: every remote access granted, RNR timer
  // 12 (0.64 ms), 16 responder resources.
  bool connect(const ReplayConnection& k, verbs::Mtu mtu) {
    verbs::QpAttr a;
    a.qp_state = verbs::QpState::init;
    a.port_num = 1;
    a.qp_access_flags = all_access;
    if (device_.modify_qp(qpn_, a, verbs::attr_state | verbs::attr_pkey_index | verbs::attr_port |
                                       verbs::attr_access_flags, 0) != 0) {
      return false;
    }
    a.qp_state = verbs::QpState::rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = k.requester_qpn;
    a.rq_psn = k.first_psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    a.ah_attr.dgid = k.requester;
    if (device_.modify_qp(qpn_, a, verbs::attr_state | verbs::attr_av | verbs::attr_path_mtu | verbs::attr_dest_qpn |
                                       verbs::attr_rq_psn | verbs::attr_max_dest_rd_atomic | verbs::attr_min_rnr_timer,
                          0) != 0) {
      return false;
    }
    a.qp_state = verbs::QpState::rts;
    a.sq_psn = 0;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    return device_.modify_qp(qpn_, a, verbs::attr_state | verbs::attr_timeout | verbs::attr_retry_cnt |
                                          verbs::attr_rnr_retry | verbs::attr_sq_psn | verbs::attr_max_qp_rd_atomic,
                             0) == 0;
  }

  transport::Device device_;
  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0;
  std::map<uint32_t, uint32_t> key_of_;
  std::vector<std::vector<uint8_t>> memory_;
  uint32_t receive_key_ = 0, receive_length_ = 0;
  uint64_t receives_ = 0;
  std::vector<uint8_t> rebuilt_;
};

}  // namespace

ReplayResult replay_responder(const FrameBytes& frames, const ReplayConnection& k, uint32_t default_mtu) {
  ReplayResult r;
  const auto mtu = mtu_of(k.path_mtu != 0 ? k.path_mtu : default_mtu);
  if (!mtu) {
    r.error = fmt::format("packets of {} bytes in the middle of messages: not a path MTU (256 to 4096)",
                          k.path_mtu != 0 ? k.path_mtu : default_mtu);
    return r;
  }
  Recorder recorder;
  ReplayResponder responder(recorder);
  r.error = responder.set_up(k, *mtu);
  if (!r.error.empty()) return r;
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f)) continue;
    const auto& bth = f.roce.bth();
    if (f.roce.info->is_request && f.src_ip() == k.requester && f.dst_ip() == k.responder &&
        bth.dest_qp == k.responder_qpn) {
      responder.feed(f);
      ++r.requests;
    } else if (!f.roce.info->is_request && f.src_ip() == k.responder && f.dst_ip() == k.requester &&
               bth.dest_qp == k.requester_qpn) {
      r.expected.push_back(answer_of(f.roce.headers, f.roce.payload.size()));
    }
  }
  r.got = std::move(recorder.sent);
  return r;
}

Comparison compare_exact(const std::vector<Answer>& expected, const std::vector<Answer>& got) {
  Comparison c;
  for (size_t i = 0; i < std::max(expected.size(), got.size()); ++i) {
    const std::optional<Answer> mine = i < got.size() ? std::optional(got[i]) : std::nullopt;
    const std::optional<Answer> theirs = i < expected.size() ? std::optional(expected[i]) : std::nullopt;
    if (mine == theirs) {
      ++c.matched;
    } else {
      c.differences.push_back({i, mine, theirs});
    }
  }
  return c;
}

Comparison compare_lossy(const std::vector<Answer>& expected, const std::vector<Answer>& got) {
  Comparison c;
  for (size_t i = 0; i < got.size(); ++i) {
    if (c.matched < expected.size() && got[i] == expected[c.matched]) {
      ++c.matched;
    } else if (got[i].opcode != uint8_t(wire::Opcode::rc_acknowledge) || (got[i].syndrome >> 5) != 0) {
      c.differences.push_back({i, got[i], std::nullopt});  // not an ACK a lost frame would explain
    }
  }
  for (size_t j = c.matched; j < expected.size(); ++j) c.differences.push_back({got.size(), std::nullopt, expected[j]});
  return c;
}

}  // namespace uroce::pcap_tools
