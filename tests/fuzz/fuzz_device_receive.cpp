// libFuzzer target: hostile packets into the transport engine. Random bytes almost never carry a valid
// ICRC, so most inputs are turned into well-formed frames (any opcode, PSN, header fields and payload the
// fuzzer chooses, with a correct ICRC) aimed at a device with live RC, UC and UD QPs, an XRC initiator and
// an XRC target (whose requests name one of its domain's two XRC SRQs, another domain's, or any number) and
// registered memory with two memory windows on it (type 1, and a zero-based type 2 that SEND with
// invalidate may close and that is bound again after), or at a multicast group both UD QPs are attached to
// (or one nobody is), some with one bit flipped after building; the rest go in raw. An RC QP takes its
// receives from a tag matching SRQ whose tagged buffers are topped up before every input, so a SEND's
// payload (the fuzzer's bytes) is a TMH of any opcode and tag: eager matches, unexpected messages,
// rendezvous READs that go nowhere and are retried until the QP fails, and TAG_SYNCs with any count. Under
// ASan/UBSan this checks that no packet sequence crashes, corrupts memory, leaks or loops, whatever state
// the QPs are driven into.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "transport/device.hpp"
#include "transport/outgoing_frame.hpp"
#include "transport/wire/build.hpp"

using namespace uroce;
using namespace uroce::transport;
using namespace uroce::verbs;

namespace {

constexpr uint32_t attached_group = 0xef010101;  // 239.1.1.1, joined by both UD QPs
constexpr uint32_t empty_group = 0xef010102;     // 239.1.1.2, joined by none

struct Discard final : PacketSink {
  std::vector<uint8_t> frame = std::vector<uint8_t>(16384);
  PortAddressing port{wire::IpAddress::from_v4(0x0a000001), {}, {}, 0, std::nullopt};
  void transmit(const OutPacket& p) override {
    // Build what the device sends, as a port would: the responses must be well-formed too.
    if (!wire::build_frame(frame_spec_for(p, port), frame).ok()) __builtin_trap();
  }
};

class Target {
 public:
  Target() : device_(sink_) {
    device_.set_gids({wire::IpAddress::from_v4(0x0a000001)});
    device_.set_active_mtu(Mtu::mtu_4096);
    device_.alloc_pd(pd_);
    device_.create_cq(256, cq_);
    const uint32_t all = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
    device_.reg_mr(pd_, 0x1000, memory_.size(), all | access_mw_bind,
                   std::make_shared<HostMemory>(memory_.data(), memory_.size()), 0, key_);
    device_.alloc_mw(pd_, MwType::type1, windows_[0]);
    device_.alloc_mw(pd_, MwType::type2, windows_[1]);
    for (QpType t : {QpType::rc, QpType::uc, QpType::ud, QpType::ud}) {
      QpInitAttr init;
      init.pd = pd_;
      init.send_cq = init.recv_cq = cq_;
      init.type = t;
      init.cap = {16, 16, 2, 2, 0};
      uint32_t qpn = 0;
      device_.create_qp(init, qpn);
      qps_.push_back({qpn, t});
      if (t == QpType::ud) device_.attach_mcast(qpn, wire::IpAddress::from_v4(attached_group));
    }
    // XRC: a domain with two SRQs and a target, an initiator, and another domain's SRQ to be named wrongly.
    uint32_t xrcd = 0, other_xrcd = 0;
    device_.alloc_xrcd(xrcd);
    device_.alloc_xrcd(other_xrcd);
    device_.create_xrc_srq(pd_, xrcd, cq_, 16, 2, 4, srqs_[0]);
    device_.create_xrc_srq(pd_, xrcd, cq_, 16, 2, 0, srqs_[1]);
    device_.create_xrc_srq(pd_, other_xrcd, cq_, 16, 2, 0, srqs_[2]);
    QpInitAttr target;
    target.type = QpType::xrc_recv;
    target.xrcd = xrcd;
    QpInitAttr initiator;
    initiator.type = QpType::xrc_send;
    initiator.pd = pd_;
    initiator.send_cq = cq_;
    initiator.cap = {16, 0, 2, 0, 0};
    for (const QpInitAttr& a : {target, initiator}) {
      uint32_t qpn = 0;
      device_.create_qp(a, qpn);
      qps_.push_back({qpn, a.type});
    }
    // Tag matching: an RC QP on a TM SRQ of 8 tagged buffers.
    device_.create_tm_srq(pd_, cq_, 16, 2, 0, 8, 8, tm_srq_);
    QpInitAttr on_tm = QpInitAttr{};
    on_tm.pd = pd_;
    on_tm.send_cq = on_tm.recv_cq = cq_;
    on_tm.srq = tm_srq_;
    on_tm.type = QpType::rc;
    device_.create_qp(on_tm, tm_qpn_);
    qps_.push_back({tm_qpn_, QpType::rc});
  }

  void one(const uint8_t* data, size_t size) {
    now_ += 1'000'000;
    for (const auto& [qpn, type] : qps_) ready(qpn, type);
    bind_windows();
    for (uint32_t srq : srqs_) {  // topped up (ENOMEM once full); the first re-arms its limit event
      RecvWr r;
      r.sg_list.push_back({0x1000 + uint64_t(srq % 8) * 1024, 1024, key_});
      for (int i = 0; i < 4; ++i) device_.post_srq_recv(srq, r);
    }
    device_.modify_srq(srqs_[0], 4);
    top_up_tags(size > 3 ? data[2] : 0, size > 3 ? data[3] : 0);
    if (size > 0 && data[0] == 0xff) {
      device_.receive({data + 1, size - 1}, now_);  // raw bytes: the parser and the drop counters
    } else if (size >= 40) {
      inject(data, size);
    }
    device_.run(now_);
    device_.run(now_ + 10'000'000'000ull);  // let every timer fire
    WorkCompletion wc[64];
    for (int n; (n = device_.poll_cq(cq_, wc)) > 0;) {
      for (int i = 0; i < n; ++i) {
        // The type 2 window is unbound by a SEND with invalidate naming it; a failed bind (the region was
        // invalidated) leaves either unbound.
        if ((wc[i].wc_flags & wc_with_inv) && wc[i].imm_data == windows_[1]) bound_[1] = false;
        if (wc[i].status == WcStatus::mw_bind_err) bound_[0] = bound_[1] = false;
        // An unexpected tag matching message, which the next TAG_SYNC counts.
        if (wc[i].opcode == WcOpcode::tm_recv && wc[i].status == WcStatus::success &&
            (wc[i].wc_flags & (wc_tm_match | wc_tm_data_valid)) == 0) {
          ++unexpected_seen_;
        }
      }
    }
    device_.take_events();
  }

 private:
  // Binds the windows through the RC QP when they are not: the type 1 window to 8 KiB of the region, the
  // type 2 window zero-based to 4 KiB, each time under a new key byte.
  void bind_windows() {
    for (int i = 0; i < 2; ++i) {
      if (bound_[i]) continue;
      SendWr wr;
      wr.opcode = WrOpcode::bind_mw;
      windows_[i] = (windows_[i] & ~0xffu) | uint8_t(windows_[i] + 1);
      wr.bind = {windows_[i] >> 8, windows_[i], key_, i == 0 ? 0x1100u : 0x5000u, i == 0 ? 0x2000u : 0x1000u,
                 access_remote_write | access_remote_read | (i == 0 ? access_remote_atomic : access_zero_based)};
      bound_[i] = device_.post_send(qps_[0].first, wr, now_) == 0;
    }
  }

  // The TM SRQ's ordinary receives and tagged buffers topped up (ENOMEM once full); tags 0-7 under a mask
  // of 0xff, so that a TMH tag's low byte decides. Then a TAG_SYNC: with the top bit of `how` it reports
  // `count` (most likely wrong), with the next bit none is sent, else it reports the unexpected messages
  // seen so far, as software would (without it every buffer added after the first unexpected message would
  // wait forever, and nothing would match again).
  void top_up_tags(uint8_t how, uint8_t count) {
    RecvWr r;
    r.sg_list.push_back({0x1000 + 9 * 1024, 1024, key_});
    for (int i = 0; i < 4; ++i) device_.post_srq_recv(tm_srq_, r);
    uint32_t handle = 0;
    TagOp add;
    add.opcode = TagOpcode::add;
    add.flags = (how & 1) ? tag_op_signaled : 0;
    add.mask = 0xff;
    for (uint64_t tag = 0; tag < 8; ++tag) {
      add.tag = tag;
      add.recv_wr_id = tag;
      add.sg_list = SgeList{{0x1000 + 10 * 1024 + tag * 512, uint32_t(256 << (tag % 3)), key_}};
      if (device_.post_srq_op(tm_srq_, add, handle, now_) == ENOMEM) break;
    }
    if (how & 0x40) return;
    TagOp sync;
    sync.opcode = TagOpcode::sync;
    sync.flags = tag_op_signaled | tag_op_sync;
    sync.unexpected_cnt = (how & 0x80) ? count : unexpected_seen_;
    device_.post_srq_op(tm_srq_, sync, handle, now_);
  }

  // Brings a QP (back) to RTS with receives posted, so that every input meets a live QP.
  void ready(uint32_t qpn, QpType type) {
    QpAttr q;
    device_.query_qp(qpn, q);
    if (q.qp_state == QpState::rts) return;
    q = QpAttr{};
    q.qp_state = QpState::reset;
    device_.modify_qp(qpn, q, attr_state, now_);
    q.qp_state = QpState::init;
    q.port_num = 1;
    q.qkey = 0x11111111;
    q.qp_access_flags = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
    device_.modify_qp(qpn, q, attr_state | attr_pkey_index | attr_port |
                                  (type == QpType::ud ? attr_qkey : attr_access_flags), now_);
    // RC's masks, less what each XRC half does not take (the kernel's XRC_INI / XRC_TGT rows).
    const bool reliable = is_reliable(type);
    q.qp_state = QpState::rtr;
    q.path_mtu = Mtu::mtu_256;
    q.dest_qp_num = 0x99;
    q.rq_psn = 0;
    q.max_dest_rd_atomic = 4;
    q.min_rnr_timer = 1;
    q.ah_attr.dgid = wire::IpAddress::from_v4(0x0a000002);
    const uint32_t connected = attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn;
    const uint32_t rtr = reliable && type != QpType::xrc_send ? connected | attr_max_dest_rd_atomic | attr_min_rnr_timer
                         : type == QpType::ud                 ? 0u
                                                              : connected;
    device_.modify_qp(qpn, q, attr_state | rtr, now_);
    q.qp_state = QpState::rts;
    q.sq_psn = 0;
    q.timeout = 10;
    q.retry_cnt = 1;
    q.rnr_retry = 1;
    q.max_rd_atomic = 4;
    const uint32_t rts = type == QpType::xrc_recv ? attr_timeout
                         : reliable               ? attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_max_qp_rd_atomic
                                                  : 0u;
    device_.modify_qp(qpn, q, attr_state | attr_sq_psn | rts, now_);
    if (type == QpType::xrc_send || type == QpType::xrc_recv) return;  // no receive queue: XRC SRQs take them
    for (int i = 0; i < 4; ++i) {
      RecvWr r;
      r.sg_list.push_back({0x1000 + uint64_t(i) * 1024, 1024, key_});
      device_.post_recv(qpn, r);
    }
  }

  // A well-formed frame whose fields come from the input.
  void inject(const uint8_t* d, size_t size) {
    wire::FrameSpec s;
    s.ipv4.src = 0x0a000002;
    s.ipv4.dst = 0x0a000001;
    wire::Bth& b = s.headers.bth;
    b.opcode = d[0];
    if (!wire::opcode_info(b.opcode).valid()) b.opcode = uint8_t(d[0] % 0x18);
    b.solicited = d[1] & 1;
    b.ack_req = d[1] & 2;
    b.fecn = d[1] & 4;
    b.becn = d[1] & 8;
    b.pkey = (d[1] & 0x10) ? uint16_t(d[2] << 8 | d[3]) : 0xffff;
    b.dest_qp = qps_[d[4] % qps_.size()].first;
    if (d[1] & 0x20) b.dest_qp = uint32_t(d[5]) << 16 | uint32_t(d[6]) << 8 | d[7];
    if (d[1] & 0x80) {  // a multicast datagram: every attached QP gets a copy
      b.dest_qp = wire::multicast_qpn;
      s.ipv4.dst = (d[5] & 1) ? attached_group : empty_group;
    }
    b.psn = (d[1] & 0x40) ? (uint32_t(d[8]) << 16 | uint32_t(d[9]) << 8 | d[10]) : uint32_t(d[8] % 8);
    auto& h = s.headers;
    uint64_t words[4];
    std::memcpy(words, d + 8, sizeof words);
    // Addresses mostly inside the registered region, sometimes anywhere.
    // The key: the region's, a window's (the zero-based one takes offsets), or any number.
    const unsigned key_choice = (d[15] >> 3) % 3;
    const uint32_t known_key = key_choice == 0 ? key_ : windows_[key_choice - 1];
    uint64_t va = (d[11] & 0x80) ? words[0] : 0x1000 + (words[0] % 70000);
    if (key_choice == 2 && !(d[11] & 0x80)) va = words[0] % 0x1100;
    const uint32_t rkey = (d[11] & 0x40) ? uint32_t(words[1]) : known_key;
    const uint32_t len = (d[11] & 0x20) ? uint32_t(words[2]) : uint32_t(words[2] % 5000);
    h.reth = {va, rkey, len};
    h.atomic_eth = {va & ~uint64_t(d[11] & 1 ? 0 : 7), rkey, words[2], words[3]};
    h.aeth.syndrome = d[12];
    h.aeth.msn = uint32_t(words[3]) & 0xffffff;
    h.deth.qkey = (d[13] & 1) ? uint32_t(words[3]) : 0x11111111;
    h.deth.src_qp = uint32_t(words[1]) & 0xffffff;
    h.immdt = uint32_t(words[1]);
    h.ieth = (d[13] & 2) ? known_key : uint32_t(words[0]);
    // An XRC request's SRQ: one of the target's domain's, another domain's, or any number at all.
    h.xrceth.srq = (d[13] & 8) ? uint32_t(words[2]) & 0xffffff : srqs_[(d[13] >> 4) % 3];
    const wire::OpcodeInfo& info = wire::opcode_info(b.opcode);
    size_t payload = info.has_payload ? size - 40 : 0;
    const bool first_or_middle = info.position == wire::Position::first || info.position == wire::Position::middle;
    if (first_or_middle) payload &= ~size_t(3);
    // To the tag matching QP, most payloads are made a TMH the SRQ acts on: an opcode of the four, and a
    // tag whose low byte names one of the tagged buffers half of the time (the fuzzer rarely finds both).
    std::vector<uint8_t> bytes(d + 40, d + 40 + payload);
    if (b.dest_qp == tm_qpn_ && bytes.size() >= 16 && !(d[14] & 0x80)) {
      bytes[0] %= 4;
      bytes[15] %= 16;
    }
    s.payload = bytes;
    std::vector<uint8_t> frame(wire::frame_size(s));
    if (!wire::build_frame(s, frame).ok()) return;
    // Sometimes one bit flipped past the Ethernet header: a frame that fails its ICRC, which early placement
    // (transport/qp/early_placement.cpp) may already have copied into memory when it finds out.
    if (d[13] & 4) frame[14 + size_t(d[14]) * 17 % (frame.size() - 14)] ^= uint8_t(1u << (d[15] & 7));
    device_.receive(frame, now_);
  }

  Discard sink_;
  Device device_;
  std::vector<uint8_t> memory_ = std::vector<uint8_t>(65536 + 8);
  uint32_t pd_ = 0, cq_ = 0, key_ = 0;
  std::vector<std::pair<uint32_t, QpType>> qps_;
  uint32_t srqs_[3] = {};  // XRC SRQs: two in the target's domain, one in another
  uint32_t tm_srq_ = 0;    // the tag matching SRQ, and the QP on it
  uint32_t tm_qpn_ = 0;
  uint32_t unexpected_seen_ = 0;
  uint32_t windows_[2] = {};  // rkeys of the type 1 and the type 2 window
  bool bound_[2] = {};
  Nanos now_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target target;  // one device, fed every input: state carries over, as on a real port
  target.one(data, size);
  return 0;
}
