// Device::source_gids_in_use: the GID table entries an address handle or a connected QP names as its
// source, which the daemon's address service must not give to a new address while they are named (Linux's
// GID cache keeps such an entry pending deletion; else the QP would go on from the new address).
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;

TEST_CASE("source GIDs in use: address handles, and connected QPs from RTR until reset or destroyed",
          "[transport][gid]") {
  sim::SimNetwork net(1);
  Host h(net, ip("10.0.0.1"));
  h.device->set_gids({ip("10.0.0.1"), ip("fd00::1"), ip("10.0.2.1"), ip("10.0.3.1")});
  CHECK(h.device->source_gids_in_use().none());

  AddressVector to_peer;
  to_peer.dgid = ip("10.0.2.7");
  to_peer.sgid_index = 2;
  uint32_t ah = 0;
  REQUIRE(h.device->create_ah(h.pd, to_peer, ah) == 0);
  CHECK(h.device->source_gids_in_use().count() == 1);
  CHECK(h.device->source_gids_in_use().test(2));

  // An RC QP names its entry once it has an address vector (RTR), not in RESET or INIT.
  const uint32_t qp = h.create_qp(QpType::rc);
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  REQUIRE(h.device->modify_qp(qp, a, attr_state | attr_pkey_index | attr_port | attr_access_flags, 0) == 0);
  CHECK_FALSE(h.device->source_gids_in_use().test(3));
  a.qp_state = QpState::rtr;
  a.path_mtu = Mtu::mtu_1024;
  a.dest_qp_num = 0x99;
  a.max_dest_rd_atomic = 1;
  a.ah_attr.dgid = ip("10.0.3.9");
  a.ah_attr.sgid_index = 3;
  REQUIRE(h.device->modify_qp(qp, a, attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                         attr_max_dest_rd_atomic | attr_min_rnr_timer, 0) == 0);
  CHECK(h.device->source_gids_in_use().test(3));
  // In the error state it still holds it (as Linux's QP holds its GID attribute until destroyed).
  a.qp_state = QpState::err;
  REQUIRE(h.device->modify_qp(qp, a, attr_state, 0) == 0);
  CHECK(h.device->source_gids_in_use().test(3));
  a.qp_state = QpState::reset;
  REQUIRE(h.device->modify_qp(qp, a, attr_state, 0) == 0);
  CHECK_FALSE(h.device->source_gids_in_use().test(3));

  // A UD QP names no source of its own: its address handles do.
  const uint32_t ud = h.create_qp(QpType::ud);
  connect(h, ud, QpType::ud, ip("10.0.0.2"), 0, 0, 0);
  CHECK(h.device->source_gids_in_use().count() == 1);

  REQUIRE(h.device->destroy_ah(ah) == 0);
  CHECK(h.device->source_gids_in_use().none());
  REQUIRE(h.device->destroy_qp(qp) == 0);
}
