#include "pcap_tools/responder_replay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "pcap_tools/replay_device.hpp"
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

// A request that takes a receive from the responder's queue: the first packet of a SEND, or the packet of
// a WRITE with immediate that carries the immediate.
bool takes_receive(const wire::OpcodeInfo& info) {
  if (info.operation == wire::Operation::send) {
    return info.position == wire::Position::first || info.position == wire::Position::only;
  }
  return info.operation == wire::Operation::rdma_write && info.has(wire::hdr_immdt);
}

struct Recorder final : transport::PacketSink {
  std::vector<Answer> sent;
  void transmit(const transport::OutPacket& p) override { sent.push_back(answer_of(p.headers, p.payload.size())); }
};

constexpr uint64_t receive_area_va = 0x7f0000000000;  // where the receives' buffer is registered
constexpr uint32_t receive_depth = 4096;

// The responder's side of the replay: a QP where the captured responder's was, with memory where the
// requests reach it.
class ReplayResponder {
 public:
  ReplayResponder(Recorder& recorder, const ReplayConnection& k, verbs::Mtu mtu)
      : device_(recorder, k.responder, mtu) {}

  std::string set_up(const ReplayConnection& k) {
    uint64_t total = std::max<uint64_t>(k.largest_send, 1);
    for (const auto& [rkey, range] : k.regions) total += range.second - range.first;
    if (total > max_replay_memory) {
      return fmt::format("the requests reach {} MiB of memory, more than the {} MiB a replay registers",
                         total >> 20, max_replay_memory >> 20);
    }
    const ReplayPeer requester{.address = k.requester, .qpn = k.requester_qpn, .sq_psn = 0, .rq_psn = k.first_psn};
    if (std::string e = device_.open(receive_depth, {64, receive_depth, 1, 1, 0}, requester); !e.empty()) return e;
    for (const auto& [rkey, range] : k.regions) {
      uint32_t key = 0;
      if (!device_.register_memory(range.first, range.second - range.first, key)) {
        return fmt::format("cannot register [{:#x}, {:#x})", range.first, range.second);
      }
      key_of_[rkey] = key;
    }
    receive_length_ = uint32_t(std::max<uint64_t>(k.largest_send, 1));
    if (!device_.register_memory(receive_area_va, receive_length_, receive_key_)) {
      return "cannot register a receive buffer";
    }
    return {};
  }

  // Feeds one captured request, its keys and QP number made ours.
  void feed(const wire::Frame& f) {
    const wire::OpcodeInfo& info = *f.roce.info;
    wire::FrameSpec spec = wire::spec_from_frame(f);
    if (info.has(wire::hdr_reth)) spec.headers.reth.rkey = our_key(f.roce.headers.reth.rkey);
    if (info.has(wire::hdr_atomic_eth)) spec.headers.atomic_eth.rkey = our_key(f.roce.headers.atomic_eth.rkey);
    if (takes_receive(info)) post_receive();
    device_.feed(spec);
    verbs::WorkCompletion wc[64];
    while (device_.device().poll_cq(device_.cq(), wc) > 0) {
    }
  }

 private:
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
    device_.device().post_recv(device_.qpn(), wr);
  }

  ReplayDevice device_;
  std::map<uint32_t, uint32_t> key_of_;
  uint32_t receive_key_ = 0, receive_length_ = 0;
  uint64_t receives_ = 0;
};

}  // namespace

ReplayResult replay_responder(const FrameBytes& frames, const ReplayConnection& k, uint32_t default_mtu) {
  ReplayResult r;
  const auto mtu = replay_mtu(k, default_mtu, r.error);
  if (!mtu) return r;
  Recorder recorder;
  ReplayResponder responder(recorder, k, *mtu);
  r.error = responder.set_up(k);
  if (!r.error.empty()) return r;
  for (const auto& bytes : frames) {
    wire::Frame f;
    if (!parse_rc(bytes, f)) continue;
    if (is_request_of(f, k)) {
      responder.feed(f);
      ++r.requests;
    } else if (is_answer_to(f, k)) {
      r.expected.push_back(answer_of(f.roce.headers, f.roce.payload.size()));
    }
  }
  r.got = std::move(recorder.sent);
  return r;
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
