// A session sees only its own objects: another session's handles are refused exactly like handles that do
// not exist (EINVAL), whether it tries to destroy, modify, query or build on them, and on the data path
// another session's memory keys and address handles get it nothing.
#include <unistd.h>

#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

constexpr uint64_t owner = 1, intruder = 2;

struct TwoSessions {
  TwoSessions() {
    h.service->open_session(owner, getpid(), getuid());
    h.service->open_session(intruder, getpid(), getuid());
    a = create_one_of_each(h, owner, mem_a.data(), mem_a.size());
    b = create_one_of_each(h, intruder, mem_b.data(), mem_b.size());
  }
  ServiceHarness h;
  std::vector<uint8_t> mem_a = std::vector<uint8_t>(8192, 0xaa), mem_b = std::vector<uint8_t>(8192, 0xbb);
  SessionObjects a, b;
};

// A QP of the intruder's (on its own PD and CQ), with the send ring the create_qp reply hands out.
struct IntruderQp {
  IntruderQp(ServiceHarness& h, const SessionObjects& own, verbs::QpType type) {
    json r = qp_request(own.pd, own.cq, own.cq);
    r["qp_type"] = uint32_t(type);
    std::vector<int> fds;
    const json reply = h.call(intruder, r, &fds);
    REQUIRE(fds.size() == 2);
    qpn = reply.at("qp_num");
    const auto cap = reply.at("cap").get<verbs::QpCap>();
    send = client::SendRing(fds[0], reply.at("send_ring_bytes"), cap.max_send_wr, reply.at("send_entry_size"),
                            cap.max_send_sge, cap.max_inline_data);
    close(fds[1]);
  }
  uint32_t qpn = 0;
  client::SendRing send;
};

}  // namespace

TEST_CASE("another session's objects cannot be destroyed, modified, queried or built on", "[verbs][isolation]") {
  TwoSessions t;
  ServiceHarness& h = t.h;
  const SessionObjects& a = t.a;
  const SessionObjects& b = t.b;
  const uint64_t addr = reinterpret_cast<uint64_t>(t.mem_b.data());
  verbs::QpAttr attr;
  attr.qp_state = verbs::QpState::err;

  const std::vector<json> refused = {
      {{"op", "dealloc_pd"}, {"pd", a.pd}},
      {{"op", "reg_mr"}, {"pd", a.pd}, {"addr", addr}, {"length", 64}, {"access", 1}},
      {{"op", "rereg_mr"}, {"key", a.mr}, {"pd", b.pd}, {"addr", addr}, {"length", 64}, {"access", 1}},
      {{"op", "rereg_mr"}, {"key", b.mr}, {"pd", a.pd}, {"addr", addr}, {"length", 64}, {"access", 1}},
      {{"op", "dereg_mr"}, {"key", a.mr}},
      {{"op", "destroy_comp_channel"}, {"channel", a.channel}},
      {{"op", "create_cq"}, {"cqe", 4}, {"channel", a.channel}},
      {{"op", "destroy_cq"}, {"cq", a.cq}},
      {{"op", "create_srq"}, {"pd", a.pd}, {"max_wr", 4}, {"max_sge", 1}},
      {{"op", "modify_srq"}, {"srq", a.srq}, {"srq_limit", 1}},
      {{"op", "destroy_srq"}, {"srq", a.srq}},
      {{"op", "create_ah"}, {"pd", a.pd}, {"ah_attr", {{"dgid", "10.0.0.1"}}}},
      {{"op", "destroy_ah"}, {"ah", a.ah}},
      qp_request(a.pd, b.cq, b.cq),         // A's PD
      qp_request(b.pd, a.cq, b.cq),         // A's CQ, as send CQ
      qp_request(b.pd, b.cq, a.cq),         // ... as receive CQ
      qp_request(b.pd, b.cq, b.cq, a.srq),  // A's SRQ
      {{"op", "modify_qp"}, {"qp_num", a.qp}, {"attr", attr}, {"attr_mask", verbs::attr_state}},
      {{"op", "query_qp"}, {"qp_num", a.qp}},
      {{"op", "destroy_qp"}, {"qp_num", a.qp}},
  };
  for (const json& r : refused) {
    INFO(r.dump());
    CHECK(h.error_of(intruder, r) == EINVAL);
  }

  // The owner's objects are untouched and still its own: it can use and destroy every one of them.
  CHECK(h.call(owner, {{"op", "query_qp"}, {"qp_num", a.qp}}).at("attr").at("qp_state") ==
        uint32_t(verbs::QpState::reset));
  h.call(owner, {{"op", "destroy_qp"}, {"qp_num", a.qp}});
  h.call(owner, {{"op", "destroy_ah"}, {"ah", a.ah}});
  h.call(owner, {{"op", "destroy_srq"}, {"srq", a.srq}});
  h.call(owner, {{"op", "destroy_cq"}, {"cq", a.cq}});
  h.call(owner, {{"op", "destroy_comp_channel"}, {"channel", a.channel}});
  h.call(owner, {{"op", "dereg_mr"}, {"key", a.mr}});
  h.call(owner, {{"op", "dealloc_pd"}, {"pd", a.pd}});
}

TEST_CASE("a session that never said open_device or does not exist is refused", "[verbs][isolation]") {
  ServiceHarness h;
  std::vector<int> fds;
  CHECK_THROWS_AS(h.service->handle(42, {{"op", "alloc_pd"}}, fds), ServiceError);
  CHECK(fds.empty());
}

TEST_CASE("another session's memory keys get nothing on the data path", "[verbs][isolation]") {
  TwoSessions t;
  ServiceHarness& h = t.h;
  const uint64_t owner_memory = reinterpret_cast<uint64_t>(t.mem_a.data());
  const uint64_t own_memory = reinterpret_cast<uint64_t>(t.mem_b.data());

  SECTION("the owner's lkey as the local side of a WRITE: another PD, nothing is read") {
    IntruderQp qp(h, t.b, verbs::QpType::rc);
    connect_qp(h, intruder, qp.qpn, qp.qpn);
    protocol::SendEntry steal = send_entry(1, verbs::WrOpcode::rdma_write);
    steal.remote_addr = own_memory;
    steal.rkey = t.b.mr;
    const protocol::WireSge from_owner = sge(owner_memory, 64, t.a.mr);
    REQUIRE(qp.send.post(steal, std::span(&from_owner, 1), {}) == 0);
    h.pump();
    CHECK((t.mem_b == std::vector<uint8_t>(8192, 0xbb)));
  }
  SECTION("the owner's rkey as the target of a WRITE: another PD, nothing is written") {
    IntruderQp qp(h, t.b, verbs::QpType::rc);
    connect_qp(h, intruder, qp.qpn, qp.qpn);
    protocol::SendEntry scribble_wr = send_entry(2, verbs::WrOpcode::rdma_write);
    scribble_wr.remote_addr = owner_memory;
    scribble_wr.rkey = t.a.mr;
    const protocol::WireSge own = sge(own_memory, 64, t.b.mr);
    REQUIRE(qp.send.post(scribble_wr, std::span(&own, 1), {}) == 0);
    h.pump();
    CHECK((t.mem_a == std::vector<uint8_t>(8192, 0xaa)));
  }
}

TEST_CASE("another session's address handle cannot be used in a UD send", "[verbs][isolation]") {
  TwoSessions t;
  ServiceHarness& h = t.h;
  IntruderQp qp(h, t.b, verbs::QpType::ud);
  const uint32_t qpn = qp.qpn;
  // UD bring-up: INIT with a Q_Key, RTR, RTS.
  verbs::QpAttr a;
  a.qp_state = verbs::QpState::init;
  a.qkey = 0x11111111;
  h.call(intruder, {{"op", "modify_qp"}, {"qp_num", qpn}, {"attr", a},
                    {"attr_mask", verbs::attr_state | verbs::attr_pkey_index | verbs::attr_port | verbs::attr_qkey}});
  a.qp_state = verbs::QpState::rtr;
  h.call(intruder, {{"op", "modify_qp"}, {"qp_num", qpn}, {"attr", a}, {"attr_mask", verbs::attr_state}});
  a.qp_state = verbs::QpState::rts;
  h.call(intruder, {{"op", "modify_qp"}, {"qp_num", qpn}, {"attr", a},
                    {"attr_mask", verbs::attr_state | verbs::attr_sq_psn}});

  const uint64_t frames_before = h.net.stats().transmitted;
  protocol::SendEntry wr = send_entry(5, verbs::WrOpcode::send, verbs::send_signaled | verbs::send_inline);
  wr.ah = t.a.ah;  // the owner's
  wr.remote_qpn = t.a.qp;
  wr.remote_qkey = 0x11111111;
  const std::vector<uint8_t> data(8, 1);
  REQUIRE(qp.send.post(wr, {}, data) == 0);
  h.pump();
  CHECK(h.net.stats().transmitted == frames_before);  // nothing left the device
  CHECK(h.queues->counters().malformed_wr == 1);      // completed with an error instead

  // With its own address handle the same request goes out.
  wr.ah = t.b.ah;
  REQUIRE(qp.send.post(wr, {}, data) == 0);
  h.pump();
  CHECK(h.net.stats().transmitted == frames_before + 1);
}

}  // namespace uroce::test::service
