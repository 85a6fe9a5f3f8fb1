// Raw packet QPs and flow steering (transport/qp/raw_packet.cpp, transport/flow/flow_table.hpp) on the
// simulated network: frames sent as posted, received only through rules, with the rules' priorities,
// DONT_TRAP, drop, sniffer and default rules, checksum offload, and the length and state errors; then RSS
// over receive work queues (transport/qp/work_queues.cpp).
#include "tests/unit/support/test_frames.hpp"
#include "tests/unit/transport/transport_fixture.hpp"

#include <set>

#include "transport/flow/flow_rule.hpp"
#include "transport/flow/rss_hash.hpp"
#include "transport/wire/checksum_offload.hpp"

using namespace uroce::test;
namespace flow = uroce::transport::flow;

namespace {

constexpr uint64_t send_base = 0x10000, recv_base = 0x20000;
constexpr uint32_t buffer_size = 16384;

// An Ethernet + IPv4 + UDP frame with `payload_size` bytes of payload and both checksums left zero: what an
// application posts on a raw packet QP is the whole frame, so the tests write it by hand, as one would
// (tests/unit/support/test_frames.hpp). No DF bit and identification 0, from 10.0.0.1 port 12345 to 10.0.0.2.
std::vector<uint8_t> udp_frame(const uroce::wire::MacAddress& dst, const uroce::wire::MacAddress& src,
                               uint16_t dst_port, size_t payload_size = 32) {
  frames::FrameParts p{.dst = dst,
                       .src = src,
                       .identification = 0,
                       .flags_fragment = 0,
                       .src4 = 0x0a000001,
                       .dst4 = 0x0a000002,
                       .sport = 12345,
                       .dport = dst_port,
                       .payload = frames::Bytes(payload_size)};
  for (size_t i = 0; i < payload_size; ++i) p.payload[i] = uint8_t(i * 13 + 1);
  return frames::build(p).bytes;
}

flow::FlowRule dst_mac_rule(const uroce::wire::MacAddress& mac, uint16_t priority = 0, uint32_t flags = 0) {
  flow::FlowRule r;
  r.priority = priority;
  r.flags = flags;
  flow::Spec s;
  s.kind = flow::Spec::Kind::eth;
  s.eth.dst = mac;
  s.eth.dst_mask = uroce::wire::MacAddress::broadcast();
  r.specs.push_back(s);
  return r;
}

flow::FlowRule udp_port_rule(uint16_t port, uint16_t priority = 0, uint32_t flags = 0) {
  flow::FlowRule r;
  r.priority = priority;
  r.flags = flags;
  flow::Spec s;
  s.kind = flow::Spec::Kind::l4;
  s.l4.protocol = 17;
  s.l4.dst_port = port;
  s.l4.dst_port_mask = 0xffff;
  r.specs.push_back(s);
  return r;
}

struct RawPair {
  sim::SimNetwork net{7};
  Host a{net, ip("10.0.0.1")};
  Host b{net, ip("10.0.0.2")};
  uint32_t a_key = a.add_buffer(buffer_size, access_local_write, send_base);
  uint32_t b_key = b.add_buffer(buffer_size, access_local_write, recv_base);
  uint32_t qa = a.create_qp(QpType::raw_packet);
  uint32_t qb = b.create_qp(QpType::raw_packet);
  RawPair() {
    raw_to_rts(*a.device, qa);
    raw_to_rts(*b.device, qb);
  }

  uroce::wire::MacAddress mac_a() const { return net.mac(a.node); }
  uroce::wire::MacAddress mac_b() const { return net.mac(b.node); }

  // Puts `frame` in A's buffer and sends it from QP `qpn` of A.
  int send(const std::vector<uint8_t>& frame, uint32_t flags = send_signaled, uint32_t qpn = 0) {
    put(a.buffer(0), 0, frame);
    SendWr wr = send_wr(1, WrOpcode::send, send_base, uint32_t(frame.size()), a_key);
    wr.send_flags = flags;
    const int rc = a.device->post_send(qpn ? qpn : qa, wr, net.now());
    net.run_until_idle(net.now() + 1'000'000'000);
    return rc;
  }
  void post_receives(Host& h, uint32_t qpn, uint32_t key, unsigned n, uint32_t length = 2048) {
    for (unsigned i = 0; i < n; ++i) {
      REQUIRE(h.device->post_recv(qpn, recv_wr(100 + i, recv_base + i * length, length, key)) == 0);
    }
  }
};

}  // namespace

TEST_CASE("raw packet QP: a frame sent as posted reaches the QP whose rule matches, byte for byte",
          "[transport][raw]") {
  RawPair p;
  uint32_t rule = 0;
  REQUIRE(p.b.device->create_flow(p.qb, dst_mac_rule(p.mac_b()), rule) == 0);
  p.post_receives(p.b, p.qb, p.b_key, 1);
  const auto frame = udp_frame(p.mac_b(), p.mac_a(), 5000, 300);
  REQUIRE(p.send(frame) == 0);

  const auto sent = expect_success(p.a, p.a.send_cq, 1);
  CHECK(sent[0].opcode == WcOpcode::send);
  const auto got = expect_success(p.b, p.b.recv_cq, 1);
  REQUIRE(got.size() == 1);
  CHECK(got[0].opcode == WcOpcode::recv);
  CHECK(got[0].byte_len == frame.size());
  CHECK(got[0].qp_num == p.qb);
  CHECK((got[0].wc_flags & wc_ip_csum_ok) == 0);  // sent with zero checksums and no offload
  CHECK(slice(p.b.buffer(0), 0, frame.size()) == frame);
  CHECK(p.b.device->counters().rx_raw == 1);
  CHECK(p.a.device->counters().tx_raw == 1);
}

TEST_CASE("raw packet QP: IBV_SEND_IP_CSUM fills in the checksums and the receiver reports IP_CSUM_OK",
          "[transport][raw]") {
  RawPair p;
  uint32_t rule = 0;
  REQUIRE(p.b.device->create_flow(p.qb, dst_mac_rule(p.mac_b()), rule) == 0);
  p.post_receives(p.b, p.qb, p.b_key, 1);
  const auto frame = udp_frame(p.mac_b(), p.mac_a(), 5000, 100);
  REQUIRE(p.send(frame, send_signaled | send_ip_csum) == 0);
  const auto got = expect_success(p.b, p.b.recv_cq, 1);
  REQUIRE(got.size() == 1);
  CHECK((got[0].wc_flags & wc_ip_csum_ok) != 0);
  const auto received = slice(p.b.buffer(0), 0, frame.size());
  CHECK(received != frame);  // the checksums were written
  CHECK(uroce::wire::ipv4_checksums_ok(received));
  auto expected = frame;
  uroce::wire::offload_checksums(expected);
  CHECK(received == expected);
}

TEST_CASE("raw packet QP: no rule, no frame; the frame goes to the RoCE side, which does not want it",
          "[transport][raw]") {
  RawPair p;
  uint32_t rule = 0;
  REQUIRE(p.b.device->create_flow(p.qb, dst_mac_rule(uroce::wire::MacAddress{{2, 9, 9, 9, 9, 9}}), rule) == 0);
  p.post_receives(p.b, p.qb, p.b_key, 1);
  REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 5000)) == 0);
  CHECK(p.b.poll(p.b.recv_cq).empty());
  CHECK(p.b.device->counters().rx_raw == 0);
  CHECK(p.b.device->counters().rx_not_roce == 1);
}

TEST_CASE("flow rules: the strongest matching priority wins, equals each get a copy, DONT_TRAP passes on",
          "[transport][raw]") {
  RawPair p;
  const uint32_t q2 = p.b.create_qp(QpType::raw_packet), q3 = p.b.create_qp(QpType::raw_packet);
  raw_to_rts(*p.b.device, q2);
  raw_to_rts(*p.b.device, q3);
  const uint32_t k2 = p.b.add_buffer(buffer_size, access_local_write, 0x40000);
  const uint32_t k3 = p.b.add_buffer(buffer_size, access_local_write, 0x60000);
  for (unsigned i = 0; i < 4; ++i) {
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(10 + i, recv_base + i * 2048, 2048, p.b_key)) == 0);
    REQUIRE(p.b.device->post_recv(q2, recv_wr(20 + i, 0x40000 + i * 2048, 2048, k2)) == 0);
    REQUIRE(p.b.device->post_recv(q3, recv_wr(30 + i, 0x60000 + i * 2048, 2048, k3)) == 0);
  }
  auto received_by = [&] {
    std::vector<uint32_t> qps;
    for (const auto& wc : p.b.poll(p.b.recv_cq)) qps.push_back(wc.qp_num);
    std::sort(qps.begin(), qps.end());
    return qps;
  };
  uint32_t weak = 0, strong = 0;
  REQUIRE(p.b.device->create_flow(p.qb, dst_mac_rule(p.mac_b(), 5), weak) == 0);
  REQUIRE(p.b.device->create_flow(q2, udp_port_rule(7000, 1), strong) == 0);

  SECTION("only the stronger rule's QP gets a frame both match; the weaker one gets the rest") {
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7000)) == 0);
    CHECK(received_by() == std::vector<uint32_t>{q2});
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7001)) == 0);
    CHECK(received_by() == std::vector<uint32_t>{p.qb});
  }
  SECTION("a second rule of the same priority: both QPs get the frame") {
    uint32_t same = 0;
    REQUIRE(p.b.device->create_flow(q3, udp_port_rule(7000, 1), same) == 0);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7000)) == 0);
    CHECK(received_by() == std::vector<uint32_t>{std::min(q2, q3), std::max(q2, q3)});
  }
  SECTION("DONT_TRAP on the stronger rule: the weaker one gets the frame too") {
    REQUIRE(p.b.device->destroy_flow(strong) == 0);
    REQUIRE(p.b.device->create_flow(q2, udp_port_rule(7000, 1, flow::flag_dont_trap), strong) == 0);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7000)) == 0);
    CHECK(received_by() == std::vector<uint32_t>{std::min(p.qb, q2), std::max(p.qb, q2)});
  }
  SECTION("a drop rule at the strongest priority: no one gets it, and it is counted") {
    flow::FlowRule drop = udp_port_rule(7000, 0);
    drop.drop = true;
    uint32_t dropper = 0;
    REQUIRE(p.b.device->create_flow(q3, drop, dropper) == 0);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7000)) == 0);
    CHECK(received_by().empty());
    CHECK(p.b.device->counters().rx_raw_dropped_by_rule == 1);
    REQUIRE(p.b.device->destroy_flow(dropper) == 0);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7000)) == 0);
    CHECK(received_by() == std::vector<uint32_t>{q2});
  }
  SECTION("a removed rule takes nothing more") {
    REQUIRE(p.b.device->destroy_flow(strong) == 0);
    CHECK(p.b.device->destroy_flow(strong) == EINVAL);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7000)) == 0);
    CHECK(received_by() == std::vector<uint32_t>{p.qb});
  }
}

TEST_CASE("flow rules: sniffers see every frame, default rules what nothing took, never the sender's own",
          "[transport][raw]") {
  RawPair p;
  const uint32_t q2 = p.b.create_qp(QpType::raw_packet);
  raw_to_rts(*p.b.device, q2);
  const uint32_t k2 = p.b.add_buffer(buffer_size, access_local_write, 0x40000);
  p.post_receives(p.b, p.qb, p.b_key, 4);
  for (unsigned i = 0; i < 4; ++i) REQUIRE(p.b.device->post_recv(q2, recv_wr(20 + i, 0x40000 + i * 2048, 2048, k2)) == 0);
  flow::FlowRule sniffer;
  sniffer.type = flow::AttrType::sniffer;
  flow::FlowRule all_default;
  all_default.type = flow::AttrType::all_default;
  uint32_t s = 0, d = 0, n = 0;
  REQUIRE(p.b.device->create_flow(p.qb, sniffer, s) == 0);
  REQUIRE(p.b.device->create_flow(q2, all_default, d) == 0);
  REQUIRE(p.b.device->create_flow(q2, udp_port_rule(7000), n) == 0);

  // From the wire: the sniffer always, the normal rule when it matches.
  REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 7000)) == 0);
  auto wc = p.b.poll(p.b.recv_cq);
  REQUIRE(wc.size() == 2);
  CHECK(std::count_if(wc.begin(), wc.end(), [&](const WorkCompletion& c) { return c.qp_num == p.qb; }) == 1);
  CHECK(std::count_if(wc.begin(), wc.end(), [&](const WorkCompletion& c) { return c.qp_num == q2; }) == 1);
  // The port's stack did not want this one: the default rule's (the daemon's engine asks; here, directly).
  const auto other = udp_frame(p.mac_b(), p.mac_a(), 7001);
  CHECK_FALSE(p.b.device->steer(other, p.net.now()));
  p.b.device->steer_unclaimed(other, p.net.now());
  wc = p.b.poll(p.b.recv_cq);
  REQUIRE(wc.size() == 2);  // the sniffer, then the default rule
  CHECK(wc[0].qp_num == p.qb);
  CHECK(wc[1].qp_num == q2);
  // A frame q2 itself sent and that loops back: q2's own rules do not take it; the sniffer still sees it.
  CHECK_FALSE(p.b.device->steer(udp_frame(p.mac_b(), p.mac_a(), 7000), p.net.now(), q2));
  p.b.device->steer_unclaimed(other, p.net.now(), q2);
  wc = p.b.poll(p.b.recv_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].qp_num == p.qb);
  // What the port sends, the sniffer gets too.
  p.b.device->sniff_sent(other, p.net.now());
  CHECK(p.b.poll(p.b.recv_cq).size() == 1);
}

TEST_CASE("flow rules: a rule on RoCE's UDP port takes RoCE frames from the transport; DONT_TRAP shares them",
          "[transport][raw]") {
  sim::SimNetwork net(3);
  Host a(net, ip("10.0.0.1")), b(net, ip("10.0.0.2"));
  const uint32_t ka = a.add_buffer(buffer_size, access_local_write, send_base);
  const uint32_t kb = b.add_buffer(buffer_size, access_local_write, recv_base);
  const uint32_t kr = b.add_buffer(buffer_size, access_local_write, 0x40000);
  const uint32_t rc_a = a.create_qp(QpType::ud), rc_b = b.create_qp(QpType::ud);
  connect(a, rc_a, QpType::ud, b.address, rc_b, 0, 0);
  connect(b, rc_b, QpType::ud, a.address, rc_a, 0, 0);
  const uint32_t raw = b.create_qp(QpType::raw_packet);
  raw_to_rts(*b.device, raw);
  uint32_t ah = 0;
  AddressVector av;
  av.dgid = b.address;
  REQUIRE(a.device->create_ah(a.pd, av, ah) == 0);
  for (unsigned i = 0; i < 2; ++i) {
    REQUIRE(b.device->post_recv(rc_b, recv_wr(i, recv_base + i * 2048, 2048, kb)) == 0);
    REQUIRE(b.device->post_recv(raw, recv_wr(50 + i, 0x40000 + i * 2048, 2048, kr)) == 0);
  }
  auto send_datagram = [&] {
    SendWr wr = send_wr(1, WrOpcode::send, send_base, 64, ka);
    wr.ah = ah;
    wr.remote_qpn = rc_b;
    wr.remote_qkey = QpParams{}.qkey;
    REQUIRE(a.device->post_send(rc_a, wr, net.now()) == 0);
    net.run_until_idle(net.now() + 1'000'000'000);
  };
  uint32_t rule = 0;
  REQUIRE(b.device->create_flow(raw, udp_port_rule(4791), rule) == 0);
  send_datagram();
  auto wc = b.poll(b.recv_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].qp_num == raw);  // trapped: the UD QP never saw it
  REQUIRE(b.device->destroy_flow(rule) == 0);
  REQUIRE(b.device->create_flow(raw, udp_port_rule(4791, 0, flow::flag_dont_trap), rule) == 0);
  send_datagram();
  wc = b.poll(b.recv_cq);
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].qp_num == raw);
  CHECK(wc[1].qp_num == rc_b);
}

TEST_CASE("raw packet QP: length errors, a short receive, no receive, and the states that take frames",
          "[transport][raw]") {
  RawPair p;
  uint32_t rule = 0;
  REQUIRE(p.b.device->create_flow(p.qb, dst_mac_rule(p.mac_b()), rule) == 0);

  SECTION("a frame shorter than an Ethernet header completes with a length error; the QP goes to error") {
    REQUIRE(p.send(std::vector<uint8_t>(13, 0xab)) == 0);
    const auto wc = p.a.poll(p.a.send_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::loc_len_err);
    QpAttr attr;
    REQUIRE(p.a.device->query_qp(p.qa, attr) == 0);
    CHECK(attr.qp_state == QpState::err);
    CHECK(p.a.device->counters().tx_raw_bad_length == 1);
  }
  SECTION("a frame longer than the port's MTU allows, likewise") {
    p.a.device->set_max_raw_frame(1518);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 5000, 1519 - 42)) == 0);
    const auto wc = p.a.poll(p.a.send_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::loc_len_err);
    CHECK(p.b.device->counters().rx_raw == 0);
  }
  SECTION("the longest frame the MTU allows goes") {
    p.a.device->set_max_raw_frame(1518);
    p.post_receives(p.b, p.qb, p.b_key, 1);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 5000, 1518 - 42)) == 0);
    expect_success(p.a, p.a.send_cq, 1);
    CHECK(expect_success(p.b, p.b.recv_cq, 1).at(0).byte_len == 1518);
  }
  SECTION("a receive too small for the frame: a length error, and the QP goes to error") {
    p.post_receives(p.b, p.qb, p.b_key, 1, 64);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 5000, 100)) == 0);
    const auto wc = p.b.poll(p.b.recv_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::loc_len_err);
    QpAttr attr;
    REQUIRE(p.b.device->query_qp(p.qb, attr) == 0);
    CHECK(attr.qp_state == QpState::err);
  }
  SECTION("no receive posted: the frame is lost and counted (raw QPs have no RNR)") {
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 5000)) == 0);
    CHECK(p.b.device->counters().rx_raw_no_receive == 1);
    p.post_receives(p.b, p.qb, p.b_key, 1);
    CHECK(p.b.poll(p.b.recv_cq).empty());
  }
  SECTION("a QP in INIT takes no frames") {
    const uint32_t q = p.b.create_qp(QpType::raw_packet);
    QpAttr a;
    a.qp_state = QpState::init;
    a.port_num = 1;
    REQUIRE(p.b.device->modify_qp(q, a, attr_state | attr_port, 0) == 0);
    uint32_t r2 = 0;
    REQUIRE(p.b.device->create_flow(q, udp_port_rule(5000, 0, flow::flag_dont_trap), r2) == 0);
    REQUIRE(p.b.device->post_recv(q, recv_wr(9, recv_base, 2048, p.b_key)) == 0);
    REQUIRE(p.send(udp_frame(p.mac_b(), p.mac_a(), 5000)) == 0);
    CHECK(p.b.device->counters().rx_raw_no_receive == 2);  // q (INIT), and qb (no receive posted)
    CHECK(p.b.poll(p.b.recv_cq).empty());
  }
}

TEST_CASE("raw packet QP: the kernel's rules for its state machine, its rules' QP and their lifetime",
          "[transport][raw]") {
  sim::SimNetwork net(1);
  Host h(net, ip("10.0.0.1"));
  const uint32_t q = h.create_qp(QpType::raw_packet);
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  a.pkey_index = 0;
  CHECK(h.device->modify_qp(q, a, attr_state, 0) == EINVAL);                                    // no port
  CHECK(h.device->modify_qp(q, a, attr_state | attr_port | attr_pkey_index, 0) == EINVAL);      // no P_Key here
  REQUIRE(h.device->modify_qp(q, a, attr_state | attr_port, 0) == 0);
  a.qp_state = QpState::rtr;
  a.path_mtu = Mtu::mtu_1024;
  CHECK(h.device->modify_qp(q, a, attr_state | attr_path_mtu, 0) == EINVAL);  // nothing but the state
  REQUIRE(h.device->modify_qp(q, a, attr_state, 0) == 0);
  a.qp_state = QpState::rts;
  REQUIRE(h.device->modify_qp(q, a, attr_state | attr_rate_limit, 0) == 0);  // a rate limit may come along
  a.qp_state = QpState::sqd;
  CHECK(h.device->modify_qp(q, a, attr_state, 0) == EINVAL);  // no SQD for raw packet QPs

  // Only a SEND: the frame.
  SendWr write = send_wr(1, WrOpcode::rdma_write, 0, 0, 0);
  CHECK(h.device->post_send(q, write, 0) == EINVAL);

  flow::FlowRule rule;
  uint32_t handle = 0;
  const uint32_t rc = h.create_qp(QpType::rc);
  CHECK(h.device->create_flow(rc, rule, handle) == EINVAL);      // not a raw packet QP
  CHECK(h.device->create_flow(0x999, rule, handle) == EINVAL);   // no such QP
  rule.flags = flow::flag_egress;
  CHECK(h.device->create_flow(q, rule, handle) == EOPNOTSUPP);
  rule.flags = 0x80;
  CHECK(h.device->create_flow(q, rule, handle) == EINVAL);       // an unknown flag
  rule = dst_mac_rule(uroce::wire::MacAddress{});
  rule.type = flow::AttrType::sniffer;
  CHECK(h.device->create_flow(q, rule, handle) == EINVAL);       // specs belong to normal rules only
  rule.type = flow::AttrType::normal;
  REQUIRE(h.device->create_flow(q, rule, handle) == 0);
  CHECK(h.device->has_flows());
  CHECK(h.device->destroy_qp(q) == EBUSY);  // its rule holds it, as in the kernel
  REQUIRE(h.device->destroy_flow(handle) == 0);
  CHECK_FALSE(h.device->has_flows());
  CHECK(h.device->destroy_qp(q) == 0);
}

// -- RSS: receive work queues, an indirection table and an RSS QP (transport/qp/work_queues.cpp) -------------

namespace {

// The RSS specification's verification key (40 bytes, as mlx5 requires).
const std::vector<uint8_t> rss_key{0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                                   0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                                   0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
constexpr uint64_t ipv4_addresses = flow::hash_src_ipv4 | flow::hash_dst_ipv4;

// On B: four work queues (RDY unless told) in a table, and an RSS QP over it hashing IPv4 addresses, with a
// rule that takes every frame to B's MAC.
struct RssSetup {
  explicit RssSetup(RawPair& p, bool ready = true) : host(p.b) {
    Device& d = *host.device;
    REQUIRE(d.create_cq(256, cq) == 0);
    key = host.add_buffer(64 * 2048, access_local_write, 0x100000);
    for (int i = 0; i < 4; ++i) {
      uint32_t wqn = 0;
      REQUIRE(d.create_wq(host.pd, cq, 64, 1, wqn) == 0);
      if (ready) REQUIRE(d.modify_wq(wqn, WqState::ready) == 0);
      wqs.push_back(wqn);
    }
    REQUIRE(d.create_rwq_ind_table(wqs, table) == 0);
    QpInitAttr a;
    a.type = QpType::raw_packet;
    a.pd = host.pd;
    a.ind_table = table;
    a.rx_hash_fields = ipv4_addresses;
    a.rx_hash_key = rss_key;
    REQUIRE(d.create_qp(a, qpn) == 0);
    REQUIRE(d.create_flow(qpn, dst_mac_rule(p.mac_b()), rule) == 0);
  }
  // Receive i of work queue w lands at its own 2 KiB of the buffer.
  void post(unsigned per_queue) {
    for (size_t w = 0; w < wqs.size(); ++w) {
      for (unsigned i = 0; i < per_queue; ++i) {
        const uint64_t slot = w * 16 + (posted_ + i) % 16;
        REQUIRE(host.device->post_srq_recv(wqs[w], recv_wr(slot, 0x100000 + slot * 2048, 2048, key)) == 0);
      }
    }
    posted_ += per_queue;
  }
  uint32_t expected_wq(const std::vector<uint8_t>& frame) const {
    return wqs[flow::rss_hash(rss_key, ipv4_addresses, frame) % wqs.size()];
  }

  Host& host;
  uint32_t cq = 0, key = 0, table = 0, qpn = 0, rule = 0;
  std::vector<uint32_t> wqs;
  unsigned posted_ = 0;
};

std::vector<uint8_t> frame_from(const uroce::wire::MacAddress& dst, uint32_t src4) {
  frames::FrameParts parts{.dst = dst, .src4 = src4, .payload = frames::Bytes(64, uint8_t(src4))};
  return frames::build(parts).bytes;
}

}  // namespace

TEST_CASE("RSS: frames spread over the work queues as the Toeplitz hash says, each completing on its queue's CQ",
          "[transport][raw][rss]") {
  RawPair p;
  RssSetup rss(p);
  rss.post(16);
  std::vector<uint32_t> expected;
  std::vector<std::vector<uint8_t>> sent;
  for (uint32_t i = 0; i < 32; ++i) {
    sent.push_back(frame_from(p.mac_b(), 0x0a000000 + i * 7919));
    expected.push_back(rss.expected_wq(sent.back()));
    // Odd frames go with IBV_SEND_IP_CSUM; the even ones keep their zero checksums.
    REQUIRE(p.send(sent.back(), send_signaled | (i % 2 ? send_ip_csum : 0u)) == 0);
    if (i % 2) uroce::wire::offload_checksums(sent.back());
  }
  const auto wc = p.b.poll(rss.cq);
  REQUIRE(wc.size() == 32);
  std::set<uint32_t> used;
  for (size_t i = 0; i < wc.size(); ++i) {
    INFO("frame " << i);
    CHECK(wc[i].status == WcStatus::success);
    CHECK(wc[i].qp_num == expected[i]);  // the work queue's number, as mlx5 reports it
    CHECK(wc[i].byte_len == sent[i].size());
    CHECK(((wc[i].wc_flags & wc_ip_csum_ok) != 0) == (i % 2 == 1));  // as a raw QP's completion, as mlx5
    CHECK(slice(p.b.buffer(1), wc[i].wr_id * 2048, sent[i].size()) == sent[i]);
    used.insert(wc[i].qp_num);
  }
  CHECK(used.size() == 4);  // 32 addresses reach every queue of the table
  CHECK(p.b.poll(p.b.recv_cq).empty());  // nothing went anywhere else
}

TEST_CASE("RSS: a work queue takes frames in RDY only; ERR flushes its receives; RESET then RDY brings it back",
          "[transport][raw][rss]") {
  RawPair p;
  RssSetup rss(p, false);
  rss.post(2);
  const auto frame = frame_from(p.mac_b(), 0x01020304);
  const uint32_t wq = rss.expected_wq(frame);
  REQUIRE(p.send(frame) == 0);
  CHECK(p.b.poll(rss.cq).empty());  // RESET: the frame is lost
  CHECK(p.b.device->counters().rx_raw_no_receive == 1);

  Device& d = *p.b.device;
  CHECK(d.modify_wq(wq, WqState::error) == 0);
  auto wc = p.b.poll(rss.cq);
  REQUIRE(wc.size() == 2);  // its two receives, flushed
  for (const auto& c : wc) {
    CHECK(c.status == WcStatus::wr_flush_err);
    CHECK(c.qp_num == wq);
  }
  CHECK(d.modify_wq(wq, WqState::ready) == EINVAL);  // not straight from ERR
  REQUIRE(d.post_srq_recv(wq, recv_wr(99, 0x100000, 2048, rss.key)) == 0);
  wc = p.b.poll(rss.cq);
  REQUIRE(wc.size() == 1);  // posted in ERR: flushed at once
  CHECK(wc[0].status == WcStatus::wr_flush_err);
  REQUIRE(d.modify_wq(wq, WqState::reset) == 0);
  REQUIRE(d.modify_wq(wq, WqState::ready) == 0);
  REQUIRE(d.post_srq_recv(wq, recv_wr(7, 0x100000, 2048, rss.key)) == 0);
  REQUIRE(p.send(frame) == 0);
  wc = p.b.poll(rss.cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == WcStatus::success);
  CHECK(wc[0].wr_id == 7);
  WqState state{};
  REQUIRE(d.query_wq_state(wq, state) == 0);
  CHECK(state == WqState::ready);

  SECTION("a receive too small for the frame: a length error, and the work queue goes to ERR") {
    REQUIRE(d.post_srq_recv(wq, recv_wr(8, 0x100000, 32, rss.key)) == 0);
    REQUIRE(d.post_srq_recv(wq, recv_wr(9, 0x100000, 2048, rss.key)) == 0);
    REQUIRE(p.send(frame) == 0);
    wc = p.b.poll(rss.cq);
    REQUIRE(wc.size() == 2);
    CHECK(wc[0].status == WcStatus::loc_len_err);
    CHECK(wc[1].status == WcStatus::wr_flush_err);
    REQUIRE(d.query_wq_state(wq, state) == 0);
    CHECK(state == WqState::error);
  }
}

TEST_CASE("RSS: what holds what, and the requests refused", "[transport][raw][rss]") {
  RawPair p;
  RssSetup rss(p);
  Device& d = *p.b.device;
  CHECK(d.destroy_wq(rss.wqs[0]) == EBUSY);             // in the table
  CHECK(d.destroy_rwq_ind_table(rss.table) == EBUSY);   // the RSS QP uses it
  CHECK(d.destroy_srq(rss.wqs[0]) == EINVAL);           // a work queue is no SRQ ...
  QpInitAttr on_wq;
  on_wq.pd = p.b.pd;
  on_wq.send_cq = on_wq.recv_cq = p.b.recv_cq;
  on_wq.srq = rss.wqs[0];
  on_wq.cap = {4, 0, 1, 0, 0};
  uint32_t qpn = 0;
  CHECK(d.create_qp(on_wq, qpn) == EINVAL);             // ... for a QP to receive from
  uint32_t table = 0;
  CHECK(d.create_rwq_ind_table({rss.wqs[0], rss.wqs[1], rss.wqs[2]}, table) == EINVAL);  // not 2^n
  CHECK(d.create_rwq_ind_table({}, table) == EINVAL);
  CHECK(d.create_rwq_ind_table({rss.wqs[0], 0x777}, table) == EINVAL);  // no such work queue
  CHECK(d.create_rwq_ind_table({rss.wqs[0], p.qb}, table) == EINVAL);   // a QP number is no work queue
  QpInitAttr a;
  a.type = QpType::raw_packet;
  a.pd = p.b.pd;
  a.ind_table = rss.table;
  a.rx_hash_fields = ipv4_addresses;
  a.rx_hash_key = std::vector<uint8_t>(39, 1);
  CHECK(d.create_qp(a, qpn) == EINVAL);  // the key must be 40 bytes
  a.rx_hash_key = rss_key;
  a.rx_hash_fields = flow::hash_src_port_tcp | flow::hash_dst_port_udp;
  CHECK(d.create_qp(a, qpn) == EINVAL);  // TCP's and UDP's ports at once
  a.rx_hash_fields = 1u << 8;            // IPSEC_SPI
  CHECK(d.create_qp(a, qpn) == EINVAL);
  a.rx_hash_fields = ipv4_addresses;
  a.type = QpType::ud;
  CHECK(d.create_qp(a, qpn) == EINVAL);  // RSS is for raw packet QPs
  a.type = QpType::raw_packet;
  a.ind_table = 0x555;
  CHECK(d.create_qp(a, qpn) == EINVAL);  // no such table
  // An RSS QP sends nothing.
  CHECK(d.post_send(rss.qpn, send_wr(1, WrOpcode::send, 0x100000, 64, rss.key), 0) == EINVAL);
  // Taken apart in order, everything goes.
  REQUIRE(d.destroy_flow(rss.rule) == 0);
  REQUIRE(d.destroy_qp(rss.qpn) == 0);
  REQUIRE(d.destroy_rwq_ind_table(rss.table) == 0);
  for (uint32_t wq : rss.wqs) REQUIRE(d.destroy_wq(wq) == 0);
  CHECK(d.destroy_wq(rss.wqs[0]) == EINVAL);
}
