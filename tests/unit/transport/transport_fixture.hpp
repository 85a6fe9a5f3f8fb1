// Two (or more) transport::Devices on the simulation network, with the bring-up an application does:
// a PD, CQs, registered buffers, and QPs taken RESET -> INIT -> RTR -> RTS with the masks rc_pingpong uses.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <functional>
#include <memory>
#include <vector>

#include "transport/device.hpp"
#include "transport/sim/device_endpoint.hpp"
#include "transport/sim/pcap_writer.hpp"
#include "transport/sim/sim_network.hpp"
#include "transport/wire/build.hpp"
#include "transport/wire/frame.hpp"

namespace uroce::test {

namespace sim = uroce::sim;

using namespace uroce::transport;
using namespace uroce::verbs;

// glibc's malloc adapts its mmap and trim thresholds to the blocks a program frees. The property test
// allocates and frees two 4 MiB buffers per seed, and whether glibc keeps that memory between seeds or
// returns it to the kernel and faults it in again (five times slower: tens of seconds of page zeroing)
// then depends on what the tests that ran before it left in the heap. Fixed thresholds make the run
// time independent of test order: blocks up to 32 MiB come from the heap, which is never trimmed.
#if defined(__GLIBC__)
inline const bool malloc_thresholds_fixed = [] {
  return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 256 << 20) == 1;
}();
#endif

struct Host {
  Host(sim::SimNetwork& net, wire::IpAddress ip) : address(ip) {
    node = net.add_node({.addresses = {ip}});
    device = std::make_unique<Device>(net.sink(node));
    endpoint = std::make_unique<sim::DeviceEndpoint>(*device);
    net.set_endpoint(node, *endpoint);
    device->set_gids({ip});
    device->set_active_mtu(Mtu::mtu_4096);  // the simulated link carries jumbo frames: every path MTU is usable
    REQUIRE(device->alloc_pd(pd) == 0);
    REQUIRE(device->create_cq(4096, send_cq) == 0);
    REQUIRE(device->create_cq(4096, recv_cq) == 0);
  }

  // A registered buffer of `size` bytes at a recognisable fake address.
  uint32_t add_buffer(size_t size, uint32_t access, uint64_t iova) {
    buffers.push_back(std::make_unique<std::vector<uint8_t>>(size));
    auto& b = *buffers.back();
    uint32_t key = 0;
    REQUIRE(device->reg_mr(pd, iova, size, access, std::make_shared<HostMemory>(b.data(), b.size()), 0, key) == 0);
    return key;
  }
  std::vector<uint8_t>& buffer(size_t i) { return *buffers.at(i); }

  uint32_t create_qp(QpType type, uint32_t max_wr = 1024, uint32_t srq = 0) {
    QpInitAttr a;
    a.pd = pd;
    a.send_cq = send_cq;
    a.recv_cq = recv_cq;
    a.srq = srq;
    a.type = type;
    a.cap = {max_wr, max_wr, 16, 16, 128};
    uint32_t qpn = 0;
    REQUIRE(device->create_qp(a, qpn) == 0);
    return qpn;
  }

  std::vector<WorkCompletion> poll(uint32_t cq, size_t max = 4096) {
    std::vector<WorkCompletion> wc(max);
    const int n = device->poll_cq(cq, wc);
    REQUIRE(n >= 0);
    wc.resize(size_t(n));
    return wc;
  }

  wire::IpAddress address;
  sim::NodeId node{};
  std::unique_ptr<Device> device;
  std::unique_ptr<sim::DeviceEndpoint> endpoint;
  uint32_t pd = 0, send_cq = 0, recv_cq = 0;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;
};

struct QpParams {
  Mtu mtu = Mtu::mtu_1024;
  uint8_t timeout = 14;       // 67 ms
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 0.01 ms
  uint8_t max_rd_atomic = 16;
  uint32_t access = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
  uint32_t qkey = 0x11111111;
};

// Brings a QP to RTS facing (remote address, remote QPN), with the masks ibv_rc_pingpong uses (UD: those
// of ibv_ud_pingpong).
inline void connect(Device& device, uint32_t qpn, QpType type, const wire::IpAddress& remote, uint32_t remote_qpn,
                    uint32_t sq_psn, uint32_t rq_psn, const QpParams& p = {}) {
  QpAttr a;
  a.qp_state = QpState::init;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = p.access;
  a.qkey = p.qkey;
  uint32_t mask = attr_state | attr_pkey_index | attr_port;
  mask |= type == QpType::ud ? attr_qkey : attr_access_flags;
  REQUIRE(device.modify_qp(qpn, a, mask, 0) == 0);

  a.qp_state = QpState::rtr;
  a.path_mtu = p.mtu;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = rq_psn;
  a.max_dest_rd_atomic = p.max_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.dgid = remote;
  if (type == QpType::rc) {
    mask = attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic |
           attr_min_rnr_timer;
  } else if (type == QpType::uc) {
    mask = attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn;
  } else {
    mask = attr_state;
  }
  REQUIRE(device.modify_qp(qpn, a, mask, 0) == 0);

  a.qp_state = QpState::rts;
  a.sq_psn = sq_psn;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.max_rd_atomic;
  if (type == QpType::rc) {
    mask = attr_state | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_sq_psn | attr_max_qp_rd_atomic;
  } else {
    mask = attr_state | attr_sq_psn;
  }
  REQUIRE(device.modify_qp(qpn, a, mask, 0) == 0);
}

inline void connect(Host& h, uint32_t qpn, QpType type, const wire::IpAddress& remote, uint32_t remote_qpn,
                    uint32_t sq_psn, uint32_t rq_psn, const QpParams& p = {}) {
  connect(*h.device, qpn, type, remote, remote_qpn, sq_psn, rq_psn, p);
}

inline wire::IpAddress ip(const char* text) { return *wire::parse_ip(text); }

// Brings a raw packet QP to RTS with the masks the kernel's table asks for: a port, then nothing.
inline void raw_to_rts(Device& d, uint32_t qpn) {
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  REQUIRE(d.modify_qp(qpn, a, attr_state | attr_port, 0) == 0);
  a.qp_state = QpState::rtr;
  REQUIRE(d.modify_qp(qpn, a, attr_state, 0) == 0);
  a.qp_state = QpState::rts;
  REQUIRE(d.modify_qp(qpn, a, attr_state, 0) == 0);
}

// With UROCE_TEST_PCAP=FILE in the environment, a test's frames are written to FILE as it runs, for
// `uroce dissect` / `uroce explain` when something has to be understood.
inline std::unique_ptr<sim::PcapWriter> capture_if_asked(sim::SimNetwork& net) {
  const char* path = std::getenv("UROCE_TEST_PCAP");
  if (path == nullptr || *path == 0) return nullptr;
  auto writer = std::make_unique<sim::PcapWriter>(path);
  net.set_capture(writer->hook({sim::CapturePoint::delivered}));
  return writer;
}

inline SendWr send_wr(uint64_t id, WrOpcode op, uint64_t addr, uint32_t len, uint32_t lkey, bool signaled = true) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = signaled ? uint32_t(send_signaled) : 0u;
  if (len != 0 || op == WrOpcode::atomic_cmp_and_swp || op == WrOpcode::atomic_fetch_and_add) {
    wr.sg_list.push_back({addr, len, lkey});
  }
  return wr;
}

inline RecvWr recv_wr(uint64_t id, uint64_t addr, uint32_t len, uint32_t lkey) {
  RecvWr wr;
  wr.wr_id = id;
  wr.sg_list.push_back({addr, len, lkey});
  return wr;
}


// ---------------------------------------------------------------------------------------------------------
// Helpers for the per-feature transport tests (errors, RNR and retry, UC, UD, SRQ, features, QP states).

inline SendWr rdma_wr(uint64_t id, WrOpcode op, uint64_t addr, uint32_t len, uint32_t lkey, uint64_t remote_addr,
                      uint32_t rkey, bool signaled = true) {
  SendWr wr = send_wr(id, op, addr, len, lkey, signaled);
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  return wr;
}

// Polls `cq` and expects exactly `n` completions, all successful.
inline std::vector<WorkCompletion> expect_success(Host& h, uint32_t cq, size_t n) {
  auto wc = h.poll(cq);
  CHECK(wc.size() == n);
  for (const auto& c : wc) CHECK(c.status == WcStatus::success);
  return wc;
}

// Recognisable bytes: pattern(n, seed)[i] differs between neighbours and between seeds.
inline std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7 + (i >> 8));
  return v;
}

inline void put(std::vector<uint8_t>& buffer, size_t offset, const std::vector<uint8_t>& bytes) {
  std::copy(bytes.begin(), bytes.end(), buffer.begin() + std::ptrdiff_t(offset));
}

inline std::vector<uint8_t> slice(const std::vector<uint8_t>& buffer, size_t offset, size_t n) {
  return {buffer.begin() + std::ptrdiff_t(offset), buffer.begin() + std::ptrdiff_t(offset + n)};
}

// One capture event of the simulated network, with its frame decoded when it is a RoCEv2 frame.
struct WireFrame {
  sim::CapturePoint point = sim::CapturePoint::transmitted;
  Nanos time = 0;
  sim::NodeId from = sim::no_node;
  sim::NodeId to = sim::no_node;
  sim::DropReason reason = sim::DropReason::none;
  std::vector<uint8_t> bytes;
  bool roce = false;
  wire::TransportHeaders headers;  // when roce
  std::vector<uint8_t> payload;    // when roce: the packet's payload, without pad and ICRC
  size_t l3_offset = 0;            // where the IP header starts in `bytes`

  uint8_t opcode() const { return headers.bth.opcode; }
  uint32_t psn() const { return headers.bth.psn; }
  bool is(wire::Opcode op) const { return roce && headers.bth.opcode == uint8_t(op); }
  // ACK, NAK, RNR NAK or atomic ACK (RC responses that are not READ responses).
  bool is_acknowledge() const { return is(wire::Opcode::rc_acknowledge) || is(wire::Opcode::rc_atomic_acknowledge); }
  bool is_read_response() const {
    return roce && opcode() >= uint8_t(wire::Opcode::rc_rdma_read_response_first) &&
           opcode() <= uint8_t(wire::Opcode::rc_rdma_read_response_only);
  }
  bool ends_read_response() const {
    return is(wire::Opcode::rc_rdma_read_response_last) || is(wire::Opcode::rc_rdma_read_response_only);
  }
};

using FrameFilter = std::function<bool(const WireFrame&)>;

// Records every frame the network builds, delivers and drops, decoded; still writes the UROCE_TEST_PCAP
// file when one is asked for. It takes the network's (single) capture hook, so build it before traffic and
// keep it alive as long as the network runs.
class WireLog {
 public:
  explicit WireLog(sim::SimNetwork& net) : pcap_(capture_if_asked(net)) {
    sim::CaptureHook to_pcap = pcap_ ? pcap_->hook({sim::CapturePoint::delivered}) : sim::CaptureHook{};
    net.set_capture([this, to_pcap](const sim::CaptureEvent& e) {
      record(e);
      if (to_pcap) to_pcap(e);
    });
  }
  WireLog(const WireLog&) = delete;
  WireLog& operator=(const WireLog&) = delete;

  // The events of `point` for frames sent by `from`, in order, that `keep` accepts (all without one).
  std::vector<WireFrame> at(sim::CapturePoint point, sim::NodeId from, const FrameFilter& keep = {}) const {
    std::vector<WireFrame> out;
    for (const WireFrame& f : frames) {
      if (f.point == point && f.from == from && (!keep || keep(f))) out.push_back(f);
    }
    return out;
  }
  std::vector<WireFrame> sent(sim::NodeId from, const FrameFilter& keep = {}) const {
    return at(sim::CapturePoint::transmitted, from, keep);
  }
  std::vector<WireFrame> delivered(sim::NodeId from, const FrameFilter& keep = {}) const {
    return at(sim::CapturePoint::delivered, from, keep);
  }
  void clear() { frames.clear(); }

  std::vector<WireFrame> frames;

 private:
  void record(const sim::CaptureEvent& e) {
    WireFrame f;
    f.point = e.point;
    f.time = e.time;
    f.from = e.from;
    f.to = e.to;
    f.reason = e.reason;
    f.bytes.assign(e.frame.begin(), e.frame.end());
    wire::Frame parsed;
    if (!f.bytes.empty() && wire::parse_frame(f.bytes, parsed) == wire::ParseError::none && parsed.is_roce()) {
      f.roce = true;
      f.headers = parsed.roce.headers;
      f.payload.assign(parsed.roce.payload.begin(), parsed.roce.payload.end());
      f.l3_offset = parsed.l3_offset;
    }
    frames.push_back(std::move(f));
  }

  std::unique_ptr<sim::PcapWriter> pcap_;
};

// An IPv4 Ethernet frame carrying one RoCEv2 packet, built the way a port builds it (lengths, checksum,
// pad, ICRC), for handing straight to Device::receive().
inline std::vector<uint8_t> roce_frame(const wire::IpAddress& src, const wire::IpAddress& dst,
                                       const wire::TransportHeaders& headers,
                                       std::span<const uint8_t> payload = {}) {
  wire::FrameSpec s;
  s.eth.src = wire::MacAddress{{0x02, 0, 0, 0, 0, 0x99}};
  s.eth.dst = wire::MacAddress{{0x02, 0, 0, 0, 0, 0x02}};
  s.eth.ethertype = wire::ethertype_ipv4;
  s.ip_version = wire::IpVersion::v4;
  s.ipv4.src = src.v4();
  s.ipv4.dst = dst.v4();
  s.headers = headers;
  s.payload = payload;
  std::vector<uint8_t> out(wire::frame_size(s));
  const wire::BuildResult r = wire::build_frame(s, out);
  REQUIRE(r.ok());
  out.resize(r.size);
  return out;
}

struct PairConfig {
  QpType type = QpType::rc;
  QpParams a;                 // a's QP
  QpParams b;                 // b's QP
  uint32_t a_psn = 1000;      // a's sq_psn, which is b's rq_psn
  uint32_t b_psn = 5000;      // b's sq_psn, which is a's rq_psn
  size_t buffer_size = 1 << 20;
  uint32_t max_wr = 1024;     // send and receive queue depths
  uint64_t seed = 1;
};

// Two hosts a (10.0.0.1) and b (10.0.0.2) on a clean network, each with one buffer registered with every
// access right (at a_base and b_base) and one QP of config.type connected to the other's (UD: at RTS).
// `wire` sees every frame.
struct Pair {
  static constexpr uint64_t a_base = 0x10000000, b_base = 0x20000000;
  static constexpr uint32_t all_access =
      access_local_write | access_remote_write | access_remote_read | access_remote_atomic;

  explicit Pair(PairConfig c = {}) : config(c), net(c.seed) {
    a_key = a.add_buffer(c.buffer_size, all_access, a_base);
    b_key = b.add_buffer(c.buffer_size, all_access, b_base);
    qa = a.create_qp(c.type, c.max_wr);
    qb = b.create_qp(c.type, c.max_wr);
    connect(a, qa, c.type, b.address, qb, c.a_psn, c.b_psn, c.a);
    connect(b, qb, c.type, a.address, qa, c.b_psn, c.a_psn, c.b);
  }

  // Runs until nothing is left to do (at most `budget` of virtual time); false if that was not enough.
  bool run(Nanos budget = 10'000'000'000ull) { return net.run_until_idle(net.now() + budget); }
  // Lets exactly `d` of virtual time pass.
  void run_for(Nanos d) { net.run_until(net.now() + d); }

  int post(Host& h, uint32_t qpn, const SendWr& wr) { return h.device->post_send(qpn, wr, net.now()); }
  int post_a(const SendWr& wr) { return post(a, qa, wr); }
  int post_b(const SendWr& wr) { return post(b, qb, wr); }

  QpAttr query(Host& h, uint32_t qpn) const {
    QpAttr attr;
    REQUIRE(h.device->query_qp(qpn, attr) == 0);
    return attr;
  }
  QpState state(Host& h, uint32_t qpn) const { return query(h, qpn).qp_state; }

  PairConfig config;
  sim::SimNetwork net;
  WireLog wire{net};
  Host a{net, ip("10.0.0.1")};
  Host b{net, ip("10.0.0.2")};
  uint32_t a_key = 0, b_key = 0;
  uint32_t qa = 0, qb = 0;
};

}  // namespace uroce::test
