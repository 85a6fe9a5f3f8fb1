#include "pcap_tools/replay_device.hpp"

#include <memory>

#include "transport/memory/memory_backend.hpp"

namespace uroce::pcap_tools {

ReplayDevice::ReplayDevice(transport::PacketSink& sink, const wire::IpAddress& own_address, verbs::Mtu mtu)
    : device_(sink), mtu_(mtu) {
  device_.set_gids({own_address});
  device_.set_active_mtu(mtu);
}

std::string ReplayDevice::open(uint32_t cq_depth, const verbs::QpCap& cap, const ReplayPeer& peer) {
  if (device_.alloc_pd(pd_) != 0 || device_.create_cq(cq_depth, cq_) != 0) return "cannot create a PD or CQ";
  transport::QpInitAttr init;
  init.pd = pd_;
  init.send_cq = init.recv_cq = cq_;
  init.cap = cap;
  if (device_.create_qp(init, qpn_) != 0) return "cannot create the QP";
  if (!connect(peer, mtu_)) return "cannot bring the QP to RTS";
  return {};
}

bool ReplayDevice::register_memory(uint64_t va, uint64_t length, uint32_t& key) {
  memory_.emplace_back(length);
  auto backend = std::make_shared<transport::HostMemory>(memory_.back().data(), length);
  return device_.reg_mr(pd_, va, length, replay_all_access, std::move(backend), 0, key) == 0;
}

bool ReplayDevice::feed(wire::FrameSpec spec) {
  spec.headers.bth.dest_qp = qpn_;
  rebuilt_.resize(wire::frame_size(spec));
  const wire::BuildResult b = wire::build_frame(spec, rebuilt_);
  if (!b.ok()) return false;
  device_.receive(std::span<const uint8_t>(rebuilt_.data(), b.size), 0);
  device_.run(0);
  return true;
}

// RESET -> INIT -> RTR -> RTS with the masks ibv_rc_pingpong uses.
bool ReplayDevice::connect(const ReplayPeer& peer, verbs::Mtu mtu) {
  verbs::QpAttr a;
  a.qp_state = verbs::QpState::init;
  a.port_num = 1;
  a.qp_access_flags = replay_all_access;
  if (device_.modify_qp(qpn_, a, verbs::attr_state | verbs::attr_pkey_index | verbs::attr_port |
                                     verbs::attr_access_flags, 0) != 0) {
    return false;
  }
  a.qp_state = verbs::QpState::rtr;
  a.path_mtu = mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.rq_psn;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;  // 0.64 ms, rxe's
  a.ah_attr.dgid = peer.address;
  if (device_.modify_qp(qpn_, a, verbs::attr_state | verbs::attr_av | verbs::attr_path_mtu | verbs::attr_dest_qpn |
                                     verbs::attr_rq_psn | verbs::attr_max_dest_rd_atomic | verbs::attr_min_rnr_timer,
                        0) != 0) {
    return false;
  }
  a.qp_state = verbs::QpState::rts;
  a.sq_psn = peer.sq_psn;
  a.timeout = peer.timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  return device_.modify_qp(qpn_, a, verbs::attr_state | verbs::attr_timeout | verbs::attr_retry_cnt |
                                        verbs::attr_rnr_retry | verbs::attr_sq_psn | verbs::attr_max_qp_rd_atomic,
                           0) == 0;
}

}  // namespace uroce::pcap_tools
