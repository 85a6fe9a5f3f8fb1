// Two (or more) transport::Devices on the simulation network, with the bring-up an application does:
// a PD, CQs, registered buffers, and QPs taken RESET -> INIT -> RTR -> RTS with the masks rc_pingpong uses.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <vector>

#include "transport/device.hpp"
#include "transport/sim/device_endpoint.hpp"
#include "transport/sim/pcap_writer.hpp"
#include "transport/sim/sim_network.hpp"

namespace uroce::test {

namespace sim = uroce::sim;

using namespace uroce::transport;
using namespace uroce::verbs;

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
inline void connect(Host& h, uint32_t qpn, QpType type, const wire::IpAddress& remote, uint32_t remote_qpn,
                    uint32_t sq_psn, uint32_t rq_psn, const QpParams& p = {}) {
  QpAttr a;
  a.qp_state = QpState::init;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = p.access;
  a.qkey = p.qkey;
  uint32_t mask = attr_state | attr_pkey_index | attr_port;
  mask |= type == QpType::ud ? attr_qkey : attr_access_flags;
  REQUIRE(h.device->modify_qp(qpn, a, mask, 0) == 0);

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
  REQUIRE(h.device->modify_qp(qpn, a, mask, 0) == 0);

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
  REQUIRE(h.device->modify_qp(qpn, a, mask, 0) == 0);
}

inline wire::IpAddress ip(const char* text) { return *wire::parse_ip(text); }

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

}  // namespace uroce::test
