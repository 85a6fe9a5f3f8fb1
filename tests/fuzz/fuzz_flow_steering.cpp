// libFuzzer target: flow steering and raw packet QPs (transport/flow, transport/qp/raw_packet.cpp,
// transport/qp/work_queues.cpp). The input first describes up to eight flow rules (their type, priority,
// flags, drop action and up to four specs of any kind, with values and masks from the input) on three raw
// packet QPs and an RSS QP over a table of four work queues (whose hash fields and states come from the
// input too); the rest is a sequence of frames, any bytes and lengths, received from the wire, looping back
// from one of the QPs, left unclaimed or sent, some with their checksums filled in first
// (wire::offload_checksums) or sent through a raw QP (whose send path offloads them). Under ASan/UBSan this
// checks that no rule and no frame makes the matcher, the hash or the delivery read outside a frame, crash,
// leak or loop. It also holds the steering to its contract: a frame a rule trapped is never passed on, every
// completion belongs to a raw QP or a work queue, and no receive is completed twice.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "tests/fuzz/fuzz_input.hpp"
#include "transport/device.hpp"
#include "transport/flow/flow_rule.hpp"
#include "transport/flow/rss_hash.hpp"
#include "transport/wire/checksum_offload.hpp"

using namespace uroce;
using namespace uroce::transport;
using namespace uroce::verbs;

namespace {

using fuzz::Reader;

// A frame's sent copies land here; the device never sees them again (a test of the send path only).
struct Sent final : PacketSink {
  void transmit(const OutPacket&) override {}
  void transmit_frame(uint32_t, std::span<const uint8_t> frame) override {
    if (frame.size() < 14) __builtin_trap();  // the device refuses shorter frames before sending
  }
};

template <size_t N>
void fill(Reader& in, std::array<uint8_t, N>& a) {
  for (auto& b : a) b = in.byte();
}

flow::Spec spec_from(Reader& in) {
  flow::Spec s;
  switch (in.byte() % 4) {
    case 0:
      s.kind = flow::Spec::Kind::eth;
      fill(in, s.eth.dst.bytes);
      fill(in, s.eth.dst_mask.bytes);
      fill(in, s.eth.src.bytes);
      fill(in, s.eth.src_mask.bytes);
      s.eth.ether_type = uint16_t(in.word(2));
      s.eth.ether_type_mask = uint16_t(in.word(2));
      s.eth.vlan_tag = uint16_t(in.word(2));
      s.eth.vlan_tag_mask = uint16_t(in.word(2));
      break;
    case 1:
      s.kind = flow::Spec::Kind::ipv4;
      s.ipv4 = {uint32_t(in.word(4)), uint32_t(in.word(4)), uint32_t(in.word(4)), uint32_t(in.word(4)),
                in.byte(), in.byte(), in.byte(), in.byte(), in.byte(), in.byte(), in.byte(), in.byte()};
      break;
    case 2:
      s.kind = flow::Spec::Kind::ipv6;
      fill(in, s.ipv6.src);
      fill(in, s.ipv6.src_mask);
      fill(in, s.ipv6.dst);
      fill(in, s.ipv6.dst_mask);
      s.ipv6.flow_label = uint32_t(in.word(3));
      s.ipv6.flow_label_mask = uint32_t(in.word(3));
      s.ipv6.next_hdr = in.byte();
      s.ipv6.next_hdr_mask = in.byte();
      break;
    default:
      s.kind = flow::Spec::Kind::l4;
      s.l4 = {uint8_t(in.byte() % 2 ? 6 : 17), uint16_t(in.word(2)), uint16_t(in.word(2)), uint16_t(in.word(2)),
              uint16_t(in.word(2))};
      break;
  }
  return s;
}

class Target {
 public:
  explicit Target(Reader& in) : device_(sink_) {
    device_.alloc_pd(pd_);
    device_.create_cq(4096, cq_);
    device_.reg_mr(pd_, 0x10000, memory_.size(), access_local_write,
                   std::make_shared<HostMemory>(memory_.data(), memory_.size()), 0, key_);
    for (int i = 0; i < 3; ++i) {
      QpInitAttr a;
      a.pd = pd_;
      a.send_cq = a.recv_cq = cq_;
      a.type = QpType::raw_packet;
      a.cap = {16, 16, 2, 2, 64};
      uint32_t qpn = 0;
      device_.create_qp(a, qpn);
      raw_.push_back(qpn);
      to_rts(qpn, in.byte() % 4 != 0);  // now and then one stays in INIT
    }
    std::vector<uint32_t> wqs;
    for (int i = 0; i < 4; ++i) {
      uint32_t wqn = 0;
      device_.create_wq(pd_, cq_, 16, 2, wqn);
      device_.modify_wq(wqn, WqState(in.byte() % 3));
      wqs.push_back(wqn);
      wqs_.insert(wqn);
    }
    uint32_t table = 0;
    device_.create_rwq_ind_table(wqs, table);
    QpInitAttr rss;
    rss.type = QpType::raw_packet;
    rss.pd = pd_;
    rss.ind_table = table;
    rss.rx_hash_fields = in.byte() & flow::hash_known_fields & ~(flow::hash_src_port_udp | flow::hash_dst_port_udp);
    rss.rx_hash_key.resize(40);
    for (auto& b : rss.rx_hash_key) b = in.byte();
    uint32_t rss_qpn = 0;
    if (device_.create_qp(rss, rss_qpn) == 0) raw_.push_back(rss_qpn);
    for (unsigned n = in.byte() % 9; n > 0; --n) {
      flow::FlowRule rule;
      rule.type = flow::AttrType(in.byte() % 4);
      rule.priority = uint16_t(in.byte() % 4);
      rule.flags = in.byte() % 2 ? flow::flag_dont_trap : 0;
      rule.drop = in.byte() % 8 == 0;
      if (rule.type == flow::AttrType::normal) {
        for (unsigned s = in.byte() % 5; s > 0; --s) rule.specs.push_back(spec_from(in));
      }
      uint32_t handle = 0;
      device_.create_flow(raw_[in.byte() % raw_.size()], std::move(rule), handle);
    }
  }

  void frames(Reader& in) {
    while (in.more()) {
      const uint8_t how = in.byte();
      std::vector<uint8_t> frame = in.bytes(in.word(2) % 1600);
      top_up();
      if (how & 0x10) wire::offload_checksums(frame);
      const uint32_t sender = (how & 0x20) ? raw_[how % raw_.size()] : 0;
      switch (how % 4) {
        case 0:
        case 1: {
          const bool trapped = device_.steer(frame, now_, sender);
          if (!trapped) device_.steer_unclaimed(frame, now_, sender);
          break;
        }
        case 2: device_.sniff_sent(frame, now_); break;
        default: send(frame, how); break;
      }
      now_ += 1000;
      device_.run(now_);
      drain();
    }
  }

 private:
  void to_rts(uint32_t qpn, bool all_the_way) {
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    device_.modify_qp(qpn, a, attr_state | attr_port, now_);
    if (!all_the_way) return;
    a.qp_state = QpState::rtr;
    device_.modify_qp(qpn, a, attr_state, now_);
    a.qp_state = QpState::rts;
    device_.modify_qp(qpn, a, attr_state, now_);
  }

  // Every raw QP and work queue keeps a few receives posted; QPs a length error took to ERR come back.
  void top_up() {
    for (uint32_t qpn : raw_) {
      QpAttr a;
      if (device_.query_qp(qpn, a) == 0 && a.qp_state == QpState::err) {
        a.qp_state = QpState::reset;
        device_.modify_qp(qpn, a, attr_state, now_);
        to_rts(qpn, true);
      }
      RecvWr r;
      r.wr_id = next_wr_id_++;
      r.sg_list.push_back({0x10000 + (r.wr_id % 16) * 2048, uint32_t(1024 + r.wr_id % 1024), key_});
      if (device_.post_recv(qpn, r) == 0) posted_.insert(r.wr_id);
    }
    for (uint32_t wqn : wqs_) {
      WqState state;
      if (device_.query_wq_state(wqn, state) == 0 && state == WqState::error) {
        device_.modify_wq(wqn, WqState::reset);
        device_.modify_wq(wqn, WqState::ready);
      }
      RecvWr r;
      r.wr_id = next_wr_id_++;
      r.sg_list.push_back({0x10000 + (r.wr_id % 16) * 2048, 2048, key_});
      if (device_.post_srq_recv(wqn, r) == 0) posted_.insert(r.wr_id);
    }
  }

  void send(const std::vector<uint8_t>& frame, uint8_t how) {
    if (!frame.empty()) std::memcpy(memory_.data(), frame.data(), std::min(frame.size(), memory_.size()));
    SendWr wr;
    wr.wr_id = 0;
    wr.opcode = WrOpcode::send;
    wr.send_flags = send_signaled | ((how & 0x40) ? send_ip_csum : 0u);
    wr.sg_list.push_back({0x10000, uint32_t(frame.size()), key_});
    device_.post_send(raw_[how % raw_.size()], wr, now_);
  }

  void drain() {
    WorkCompletion wc[64];
    for (int n; (n = device_.poll_cq(cq_, wc)) > 0;) {
      for (int i = 0; i < n; ++i) {
        if (wc[i].opcode != WcOpcode::recv) continue;
        const bool known_qp = std::find(raw_.begin(), raw_.end(), wc[i].qp_num) != raw_.end();
        if (!known_qp && !wqs_.contains(wc[i].qp_num)) __builtin_trap();
        // A receive completes once: a second completion of the same request is a double delivery.
        if (posted_.erase(wc[i].wr_id) != 1) __builtin_trap();
      }
    }
  }

  Sent sink_;
  Device device_;
  std::vector<uint8_t> memory_ = std::vector<uint8_t>(64 * 1024);
  uint32_t pd_ = 0, cq_ = 0, key_ = 0;
  std::vector<uint32_t> raw_;
  std::set<uint32_t> wqs_;
  std::set<uint64_t> posted_;
  uint64_t next_wr_id_ = 1;
  Nanos now_ = 1;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in(data, size);
  Target t(in);
  t.frames(in);
  return 0;
}
