// The solicited-event bit: a SEND posted with IBV_SEND_SOLICITED marks the receive completion it produces
// (what ibv_req_notify_cq(solicited_only) waits for); one without does not. RC, UC and UD alike.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;

TEST_CASE("solicited: the SE bit of a SEND reaches the receive completion", "[transport][solicited]") {
  for (QpType type : {QpType::rc, QpType::uc, QpType::ud}) {
    INFO("type " << int(type));
    sim::SimNetwork net{5};
    Host a{net, ip("10.0.0.1")};
    Host b{net, ip("10.0.0.2")};
    const uint32_t a_key = a.add_buffer(1 << 16, QpParams{}.access, 0x10000000);
    const uint32_t b_key = b.add_buffer(1 << 16, QpParams{}.access, 0x20000000);
    const uint32_t qa = a.create_qp(type), qb = b.create_qp(type);
    connect(a, qa, type, b.address, qb, 1000, 5000, {});
    connect(b, qb, type, a.address, qa, 5000, 1000, {});
    for (bool solicited : {true, false, true}) {
      REQUIRE(b.device->post_recv(qb, recv_wr(2, 0x20000000, 4096, b_key)) == 0);
      auto wr = send_wr(1, WrOpcode::send, 0x10000000, 2000, a_key);
      if (solicited) wr.send_flags |= uroce::verbs::send_solicited;
      if (type == QpType::ud) {
        uroce::verbs::AddressVector av;
        av.dgid = b.address;
        REQUIRE(a.device->create_ah(a.pd, av, wr.ah) == 0);
        wr.remote_qpn = qb;
        wr.remote_qkey = QpParams{}.qkey;
        wr.sg_list[0].length = 512;
      }
      REQUIRE(a.device->post_send(qa, wr, net.now()) == 0);
      REQUIRE(net.run_until_idle(net.now() + 1'000'000'000));
      const auto rc = b.poll(b.recv_cq);
      REQUIRE(rc.size() == 1);
      CHECK(rc[0].status == WcStatus::success);
      CHECK(rc[0].solicited == solicited);
    }
  }
}
