// UD multicast: attach_mcast / detach_mcast (ib_attach_mcast's rules, rxe's limits) and the delivery of a
// datagram sent to the multicast QPN: every QP attached to the group named by the destination IP address
// gets a copy, each checked as a datagram addressed to it would be.
//
// The simulated network has no multicast: what a host sends to a group is dropped there as having no
// destination. The tests play the port instead: they take the frame the sender transmitted and hand it to
// the devices that should see it (the sender's own, too, for loopback).
#include "tests/unit/transport/transport_fixture.hpp"

#include <iterator>
#include <optional>

using namespace uroce::test;
namespace wire = uroce::wire;

namespace {

constexpr uint32_t grh = 40;
constexpr uint32_t group_qkey = 0x11111111;
constexpr uint64_t base = 0x10000000;
constexpr uint64_t send_from = base + (1 << 19);  // the sender's payload; receive slots lie below
constexpr uint32_t slot = 2048;                    // one receive per slot

// A sender host `a` and a receiving host `b`, each with one registered buffer, and `qa`, a's UD QP.
struct Multicast {
  Multicast(const char* sender, const char* receiver) : a(net, ip(sender)), b(net, ip(receiver)) {
    a_key = a.add_buffer(1 << 20, access_local_write, base);
    b_key = b.add_buffer(1 << 20, access_local_write, base);
    qa = ud_qp(a);
    put(a.buffer(0), send_from - base, pattern(1024, 3));
  }

  uint32_t key_of(const Host& h) const { return &h == &a ? a_key : b_key; }

  // A UD QP at RTS with Q_Key `qkey` and `receives` receives posted; see post_receives().
  uint32_t ud_qp(Host& h, uint32_t qkey = group_qkey, int receives = 4) {
    const uint32_t qpn = h.create_qp(QpType::ud);
    QpParams p;
    p.qkey = qkey;
    connect(h, qpn, QpType::ud, h.address, 0, 0, 0, p);
    post_receives(h, qpn, receives);
    return qpn;
  }

  // Each receive gets a slot of its own in the host's buffer, and the slot's address as its wr_id.
  void post_receives(Host& h, uint32_t qpn, int n) {
    for (int i = 0; i < n; ++i) {
      const uint64_t address = base + next_slot++ * slot;
      REQUIRE(h.device->post_recv(qpn, recv_wr(address, address, slot, key_of(h))) == 0);
    }
  }

  // What a's QP `from` transmits for one UD SEND (with immediate when `imm` is given) of `length` bytes to
  // `group` with the multicast QPN.
  WireFrame send(uint32_t from, const wire::IpAddress& group, uint32_t length, std::optional<uint32_t> imm = {}) {
    wire.clear();
    AddressVector av;
    av.dgid = group;
    uint32_t ah = 0;
    REQUIRE(a.device->create_ah(a.pd, av, ah) == 0);
    SendWr wr = send_wr(1, imm ? WrOpcode::send_with_imm : WrOpcode::send, send_from, length, a_key);
    wr.ah = ah;
    wr.remote_qpn = wire::multicast_qpn;
    wr.remote_qkey = group_qkey;
    wr.imm_data = imm.value_or(0);
    REQUIRE(a.device->post_send(from, wr, net.now()) == 0);
    REQUIRE(net.run_until_idle(net.now() + 1'000'000'000));
    const auto sent = wire.sent(a.node);
    REQUIRE(sent.size() == 1);
    REQUIRE(sent[0].roce);
    return sent[0];
  }

  void deliver(Host& h, const WireFrame& f) { h.device->receive(f.bytes, net.now()); }

  // The receive completions of QP `qpn` on host `h` among `all`.
  static std::vector<WorkCompletion> of_qp(const std::vector<WorkCompletion>& all, uint32_t qpn) {
    std::vector<WorkCompletion> out;
    std::copy_if(all.begin(), all.end(), std::back_inserter(out),
                 [&](const WorkCompletion& wc) { return wc.qp_num == qpn; });
    return out;
  }

  sim::SimNetwork net{1};
  WireLog wire{net};
  Host a;
  Host b;
  uint32_t a_key = 0, b_key = 0;
  uint32_t qa = 0;
  uint64_t next_slot = 0;
};

struct Ipv4Multicast : Multicast {
  Ipv4Multicast() : Multicast("10.0.0.1", "10.0.0.2") {}
};

// A device on its own (no network), for the verbs' bookkeeping.
struct NoWire final : PacketSink {
  void transmit(const OutPacket&) override {}
};

struct LoneDevice {
  explicit LoneDevice(DeviceLimits limits = {}) : device(sink, limits) {
    REQUIRE(device.alloc_pd(pd) == 0);
    REQUIRE(device.create_cq(16, cq) == 0);
  }
  uint32_t qp(QpType type) {
    QpInitAttr attr;
    attr.pd = pd;
    attr.send_cq = attr.recv_cq = cq;
    attr.cap = {4, 4, 1, 1, 0};
    attr.type = type;
    uint32_t qpn = 0;
    REQUIRE(device.create_qp(attr, qpn) == 0);
    return qpn;
  }
  NoWire sink;
  Device device;
  uint32_t pd = 0, cq = 0;
};

// Checks one datagram's completion and what landed in its receive slot: the GRH area (IPv4: twenty zero
// bytes, then the IPv4 header; IPv6: its header) and the payload.
void check_datagram(const WorkCompletion& wc, uint32_t qpn, uint32_t src_qp, const std::vector<uint8_t>& buffer,
                    const WireFrame& frame, std::optional<uint32_t> imm) {
  CHECK(wc.status == WcStatus::success);
  CHECK(wc.opcode == WcOpcode::recv);
  CHECK(wc.qp_num == qpn);
  CHECK(wc.src_qp == src_qp);
  CHECK((wc.wc_flags & wc_grh) != 0);
  CHECK(wc.byte_len == grh + frame.payload.size());
  CHECK(((wc.wc_flags & wc_with_imm) != 0) == imm.has_value());
  if (imm) CHECK(wc.imm_data == *imm);
  const size_t at = wc.wr_id - base;
  const bool v4 = frame.bytes[frame.l3_offset] >> 4 == 4;
  if (v4) {
    CHECK(slice(buffer, at, 20) == std::vector<uint8_t>(20, 0));
    CHECK(slice(buffer, at + 20, 20) == slice(frame.bytes, frame.l3_offset, 20));
  } else {
    CHECK(slice(buffer, at, grh) == slice(frame.bytes, frame.l3_offset, grh));
  }
  CHECK(slice(buffer, at + grh, frame.payload.size()) == frame.payload);
}

}  // namespace

TEST_CASE("multicast: group addresses are those rdma_is_multicast_addr accepts", "[transport][multicast]") {
  for (const char* group : {"224.0.0.0", "224.0.0.1", "239.1.1.1", "239.255.255.255", "ff02::1", "ff0e::1",
                            "ff00::"}) {
    INFO(group);
    CHECK(ip(group).is_multicast());
  }
  for (const char* unicast : {"10.0.0.1", "223.255.255.255", "240.0.0.0", "255.255.255.255", "::", "fe80::1",
                              "fd00::e000:1", "::e000:1", "::ffff:0:e000:1"}) {
    INFO(unicast);
    CHECK_FALSE(ip(unicast).is_multicast());
  }
  CHECK(wire::multicast_qpn == 0xffffff);
}

TEST_CASE("multicast: attach and detach follow ib_attach_mcast's rules", "[transport][multicast]") {
  LoneDevice d;
  Device& dev = d.device;
  const uint32_t ud = d.qp(QpType::ud);
  const uint32_t other = d.qp(QpType::ud);
  const auto group = ip("239.1.1.1");

  SECTION("only a UD QP that exists joins, and only a multicast address") {
    CHECK(dev.attach_mcast(d.qp(QpType::rc), group) == EINVAL);
    CHECK(dev.attach_mcast(d.qp(QpType::uc), group) == EINVAL);
    CHECK(dev.attach_mcast(0x999, group) == EINVAL);
    CHECK(dev.attach_mcast(ud, ip("10.0.0.5")) == EINVAL);
    CHECK(dev.attach_mcast(ud, ip("fd00::1")) == EINVAL);
    CHECK(dev.multicast_groups().empty());
    CHECK(dev.multicast_generation() == 0);
  }

  SECTION("attaching twice changes nothing; detaching needs an attachment") {
    REQUIRE(dev.attach_mcast(ud, group) == 0);
    const uint64_t generation = dev.multicast_generation();
    CHECK(generation != 0);
    CHECK(dev.attach_mcast(ud, group) == 0);
    CHECK(dev.multicast_generation() == generation);
    CHECK(dev.detach_mcast(other, group) == EINVAL);       // the group exists, but without this QP
    CHECK(dev.detach_mcast(ud, ip("239.1.1.2")) == EINVAL);  // no such group
    CHECK(dev.detach_mcast(0x999, group) == EINVAL);       // no such QP
    REQUIRE(dev.detach_mcast(ud, group) == 0);             // once is enough: the group is gone
    CHECK_FALSE(dev.has_multicast_group(group));
    CHECK(dev.multicast_generation() != generation);
    CHECK(dev.detach_mcast(ud, group) == EINVAL);
  }

  SECTION("the set of groups and its generation") {
    const uint64_t g0 = dev.multicast_generation();
    REQUIRE(dev.attach_mcast(ud, ip("ff0e::1")) == 0);
    REQUIRE(dev.attach_mcast(ud, ip("239.1.1.2")) == 0);
    REQUIRE(dev.attach_mcast(ud, group) == 0);
    const uint64_t g1 = dev.multicast_generation();
    CHECK(g1 != g0);
    // v4-mapped addresses (::ffff:...) sort before ff00::/8.
    CHECK(dev.multicast_groups() == std::vector<wire::IpAddress>{group, ip("239.1.1.2"), ip("ff0e::1")});
    CHECK(dev.has_multicast_group(ip("ff0e::1")));
    // A second member changes the members, not the set of groups.
    REQUIRE(dev.attach_mcast(other, group) == 0);
    CHECK(dev.multicast_generation() == g1);
    REQUIRE(dev.detach_mcast(ud, group) == 0);
    CHECK(dev.multicast_generation() == g1);
    CHECK(dev.has_multicast_group(group));
    REQUIRE(dev.detach_mcast(other, group) == 0);
    CHECK(dev.multicast_generation() != g1);
    CHECK(dev.multicast_groups() == std::vector<wire::IpAddress>{ip("239.1.1.2"), ip("ff0e::1")});
  }
}

TEST_CASE("multicast: the limits on groups, members and attachments", "[transport][multicast]") {
  DeviceLimits limits;
  limits.max_mcast_grp = 2;
  limits.max_mcast_qp_attach = 2;
  limits.max_total_mcast_qp_attach = 3;
  LoneDevice d(limits);
  Device& dev = d.device;
  const uint32_t q1 = d.qp(QpType::ud), q2 = d.qp(QpType::ud), q3 = d.qp(QpType::ud), q4 = d.qp(QpType::ud);
  const auto g1 = ip("239.0.0.1"), g2 = ip("239.0.0.2"), g3 = ip("239.0.0.3");

  REQUIRE(dev.attach_mcast(q1, g1) == 0);
  REQUIRE(dev.attach_mcast(q2, g1) == 0);
  CHECK(dev.attach_mcast(q3, g1) == ENOMEM);  // two QPs per group
  REQUIRE(dev.attach_mcast(q3, g2) == 0);
  CHECK(dev.attach_mcast(q4, g2) == ENOMEM);  // three attachments in all
  CHECK(dev.attach_mcast(q1, g1) == 0);       // already attached: nothing to add
  REQUIRE(dev.detach_mcast(q2, g1) == 0);
  CHECK(dev.attach_mcast(q4, g3) == ENOMEM);  // two groups
  CHECK_FALSE(dev.has_multicast_group(g3));
  CHECK(dev.attach_mcast(q4, g2) == 0);
  CHECK(dev.multicast_groups() == std::vector<wire::IpAddress>{g1, g2});
}

TEST_CASE("multicast: a SEND to a group reaches every attached QP", "[transport][multicast]") {
  struct Family {
    const char* sender;
    const char* receiver;
    const char* group;
  };
  for (const Family& family : {Family{"10.0.0.1", "10.0.0.2", "239.1.1.1"}, Family{"fd00::1", "fd00::2", "ff0e::1"}}) {
    INFO("group " << family.group);
    Multicast m(family.sender, family.receiver);
    const auto group = ip(family.group);
    const uint32_t members[3] = {m.ud_qp(m.b), m.ud_qp(m.b), m.ud_qp(m.b)};
    const uint32_t outsider = m.ud_qp(m.b);
    for (const uint32_t qpn : members) REQUIRE(m.b.device->attach_mcast(qpn, group) == 0);

    const WireFrame plain = m.send(m.qa, group, 100);
    const WireFrame with_imm = m.send(m.qa, group, 50, 0xcafef00d);
    for (const WireFrame* f : {&plain, &with_imm}) {
      CHECK(f->headers.bth.dest_qp == wire::multicast_qpn);
      CHECK(f->headers.deth.src_qp == m.qa);
      m.deliver(m.b, *f);
    }

    const auto completions = m.b.poll(m.b.recv_cq);
    CHECK(completions.size() == 6);
    for (const uint32_t qpn : members) {
      INFO("QP " << qpn);
      const auto got = Multicast::of_qp(completions, qpn);
      REQUIRE(got.size() == 2);
      check_datagram(got[0], qpn, m.qa, m.b.buffer(0), plain, std::nullopt);
      check_datagram(got[1], qpn, m.qa, m.b.buffer(0), with_imm, 0xcafef00d);
    }
    CHECK(Multicast::of_qp(completions, outsider).empty());
    const DeviceCounters& c = m.b.device->counters();
    CHECK(c.rx_multicast == 2);
    CHECK(c.rx_multicast_no_members == 0);
    CHECK(c.rx_unknown_qp == 0);
    m.b.device->for_each_qp_counters([&](uint32_t qpn, const QpCounters& q) {
      const bool member = std::find(std::begin(members), std::end(members), qpn) != std::end(members);
      CHECK(q.rx_packets == (member ? 2u : 0u));
    });
  }
}

TEST_CASE("multicast: each copy is checked as a datagram to that QP would be", "[transport][multicast]") {
  Ipv4Multicast m;
  const auto group = ip("239.1.1.1");
  const uint32_t good = m.ud_qp(m.b);
  const uint32_t wrong_qkey = m.ud_qp(m.b, 0x22222222);
  const uint32_t not_ready = m.b.create_qp(QpType::ud);  // attached in RESET, then INIT: never RTR
  REQUIRE(m.b.device->attach_mcast(not_ready, group) == 0);
  QpAttr init;
  init.qp_state = QpState::init;
  init.port_num = 1;
  init.qkey = group_qkey;
  REQUIRE(m.b.device->modify_qp(not_ready, init, attr_state | attr_pkey_index | attr_port | attr_qkey, 0) == 0);
  m.post_receives(m.b, not_ready, 1);
  for (const uint32_t qpn : {good, wrong_qkey}) REQUIRE(m.b.device->attach_mcast(qpn, group) == 0);

  m.deliver(m.b, m.send(m.qa, group, 64));
  const auto completions = m.b.poll(m.b.recv_cq);
  REQUIRE(completions.size() == 1);
  CHECK(completions[0].qp_num == good);
  const DeviceCounters& c = m.b.device->counters();
  CHECK(c.rx_multicast == 1);
  CHECK(c.rx_bad_qkey == 1);
  CHECK(c.rx_qp_not_ready == 1);

  SECTION("a wrong P_Key or a transport other than UD reaches no QP") {
    wire::TransportHeaders h;
    h.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
    h.bth.dest_qp = wire::multicast_qpn;
    h.bth.pkey = 0x1234;
    h.deth = {group_qkey, 0, m.qa};
    const auto payload = pattern(16, 1);
    m.b.device->receive(roce_frame(m.a.address, group, h, payload), 0);
    CHECK(c.rx_bad_pkey == 3);  // one per member
    h.bth.pkey = wire::default_pkey;
    h.bth.opcode = uint8_t(wire::Opcode::uc_send_only);
    m.b.device->receive(roce_frame(m.a.address, group, h, payload), 0);
    CHECK(c.rx_wrong_transport == 3);
    CHECK(c.rx_multicast == 1);
    CHECK(m.b.poll(m.b.recv_cq).empty());
  }
}

TEST_CASE("multicast: a datagram to a group without members is counted and dropped", "[transport][multicast]") {
  Ipv4Multicast m;
  const uint32_t member = m.ud_qp(m.b);
  REQUIRE(m.b.device->attach_mcast(member, ip("239.1.1.1")) == 0);
  m.deliver(m.b, m.send(m.qa, ip("239.1.1.2"), 32));
  // The multicast QPN to a unicast address: no group can have that address.
  wire::TransportHeaders h;
  h.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
  h.bth.dest_qp = wire::multicast_qpn;
  h.deth = {group_qkey, 0, m.qa};
  m.b.device->receive(roce_frame(m.a.address, m.b.address, h), 0);

  const DeviceCounters& c = m.b.device->counters();
  CHECK(c.rx_multicast_no_members == 2);
  CHECK(c.rx_multicast == 0);
  CHECK(c.rx_unknown_qp == 0);
  CHECK(m.b.poll(m.b.recv_cq).empty());
}

TEST_CASE("multicast: a detached QP gets no more copies", "[transport][multicast]") {
  Ipv4Multicast m;
  const auto group = ip("239.1.1.1");
  const uint32_t stays = m.ud_qp(m.b), leaves = m.ud_qp(m.b);
  REQUIRE(m.b.device->attach_mcast(stays, group) == 0);
  REQUIRE(m.b.device->attach_mcast(leaves, group) == 0);
  REQUIRE(m.b.device->detach_mcast(leaves, group) == 0);

  m.deliver(m.b, m.send(m.qa, group, 32));
  auto completions = m.b.poll(m.b.recv_cq);
  REQUIRE(completions.size() == 1);
  CHECK(completions[0].qp_num == stays);

  REQUIRE(m.b.device->detach_mcast(stays, group) == 0);
  CHECK_FALSE(m.b.device->has_multicast_group(group));
  m.deliver(m.b, m.send(m.qa, group, 32));
  CHECK(m.b.poll(m.b.recv_cq).empty());
  CHECK(m.b.device->counters().rx_multicast == 1);
  CHECK(m.b.device->counters().rx_multicast_no_members == 1);
}

TEST_CASE("multicast: destroy_qp detaches the QP from every group", "[transport][multicast]") {
  Ipv4Multicast m;
  Device& dev = *m.b.device;
  const auto only_doomed = ip("239.1.1.1"), shared = ip("ff0e::1");
  const uint32_t doomed = m.ud_qp(m.b), survivor = m.ud_qp(m.b);
  REQUIRE(dev.attach_mcast(doomed, only_doomed) == 0);
  REQUIRE(dev.attach_mcast(doomed, shared) == 0);
  REQUIRE(dev.attach_mcast(survivor, shared) == 0);
  const uint64_t generation = dev.multicast_generation();

  REQUIRE(dev.destroy_qp(doomed) == 0);
  CHECK(dev.multicast_generation() != generation);
  CHECK(dev.multicast_groups() == std::vector<wire::IpAddress>{shared});
  CHECK(dev.detach_mcast(doomed, shared) == EINVAL);
  m.deliver(m.b, m.send(m.qa, only_doomed, 16));
  CHECK(dev.counters().rx_multicast_no_members == 1);
  // The survivor is still the group's only member.
  REQUIRE(dev.detach_mcast(survivor, shared) == 0);
  CHECK(dev.multicast_groups().empty());
}

TEST_CASE("multicast: the sender's QP in the group gets its own datagram back", "[transport][multicast]") {
  // rxe delivers a looped-back multicast datagram to every attached QP, the sending one included.
  Ipv4Multicast m;
  const auto group = ip("239.1.1.1");
  const uint32_t neighbour = m.ud_qp(m.a);
  const uint32_t remote = m.ud_qp(m.b);
  REQUIRE(m.a.device->attach_mcast(m.qa, group) == 0);
  REQUIRE(m.a.device->attach_mcast(neighbour, group) == 0);
  REQUIRE(m.b.device->attach_mcast(remote, group) == 0);

  const WireFrame f = m.send(m.qa, group, 200, 7);
  m.deliver(m.a, f);  // the port loops it back to its own device, as it forwards it to the network
  m.deliver(m.b, f);
  const auto local = m.a.poll(m.a.recv_cq);
  REQUIRE(local.size() == 2);
  for (const uint32_t qpn : {m.qa, neighbour}) {
    INFO("QP " << qpn);
    const auto got = Multicast::of_qp(local, qpn);
    REQUIRE(got.size() == 1);
    check_datagram(got[0], qpn, m.qa, m.a.buffer(0), f, 7u);
  }
  const auto far = m.b.poll(m.b.recv_cq);
  REQUIRE(far.size() == 1);
  check_datagram(far[0], remote, m.qa, m.b.buffer(0), f, 7u);
}
