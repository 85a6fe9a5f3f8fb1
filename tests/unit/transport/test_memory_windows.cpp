// Memory windows: type 1 (bound with ibv_bind_mw, usable through any QP of the PD) and type 2 (bound by a
// work request, usable only through the QP that bound it, invalidated by LOCAL_INV or SEND_WITH_INV).
// Host b owns a region and opens windows on it; host a reaches b's memory through the windows' rkeys.
#include "transport_fixture.hpp"

namespace uroce::test {
namespace {

constexpr uint64_t a_base = Pair::a_base;
constexpr uint64_t region = 0x40000000;  // b's region that windows open: 64 KiB
constexpr uint32_t remote_rw = access_remote_read | access_remote_write;

SendWr local_inv(uint32_t rkey) {
  SendWr wr;
  wr.wr_id = 2;
  wr.opcode = WrOpcode::local_inv;
  wr.send_flags = send_signaled;
  wr.invalidate_rkey = rkey;
  return wr;
}

struct WindowPair : Pair {
  explicit WindowPair(uint32_t region_access = all_access | access_mw_bind) {
    region_key = b.add_buffer(64 << 10, region_access, region);
  }
  uint32_t alloc(MwType type) {
    uint32_t rkey = 0;
    REQUIRE(b.device->alloc_mw(b.pd, type, rkey) == 0);
    return rkey;
  }
  // b binds window `rkey` (its number and a new key byte) to [addr, addr+length) of its region.
  SendWr bind_wr(uint32_t rkey, uint8_t new_key_byte, uint64_t addr, uint64_t length, uint32_t access) const {
    SendWr wr;
    wr.wr_id = 0xb1;
    wr.opcode = WrOpcode::bind_mw;
    wr.send_flags = send_signaled;
    wr.bind = {rkey >> 8, (rkey & ~0xffu) | new_key_byte, region_key, addr, length, access};
    return wr;
  }
  // Posts the bind on b's QP and returns the rkey the window answers to if it succeeds.
  uint32_t bind(uint32_t rkey, uint8_t new_key_byte, uint64_t addr, uint64_t length, uint32_t access,
                WcStatus expected = WcStatus::success) {
    REQUIRE(post_b(bind_wr(rkey, new_key_byte, addr, length, access)) == 0);
    REQUIRE(run());
    const auto wc = b.poll(b.send_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].wr_id == 0xb1);
    CHECK(wc[0].status == expected);
    if (expected == WcStatus::success) CHECK(wc[0].opcode == WcOpcode::bind_mw);
    return (rkey & ~0xffu) | new_key_byte;
  }
  // a's RDMA operation through `rkey` at `remote`; the status of its completion.
  WcStatus remote_op(WrOpcode op, uint64_t remote, uint32_t len, uint32_t rkey, uint32_t qpn_a = 0) {
    REQUIRE(post(a, qpn_a != 0 ? qpn_a : qa, rdma_wr(7, op, a_base, len, a_key, remote, rkey)) == 0);
    REQUIRE(run());
    const auto wc = a.poll(a.send_cq);
    REQUIRE(wc.size() == 1);
    return wc[0].status;
  }
  uint8_t* region_bytes() { return b.buffer(1).data(); }
  uint32_t region_key = 0;
};

}  // namespace

TEST_CASE("memory windows: an unbound window opens nothing", "[transport][mw]") {
  WindowPair p;
  const uint32_t mw = p.alloc(MwType::type1);
  CHECK(p.remote_op(WrOpcode::rdma_write, region + 0x1000, 16, mw) == WcStatus::rem_access_err);  // unbound
}

TEST_CASE("memory windows: type 1 WRITE and READ through the window, and its bounds", "[transport][mw]") {
  WindowPair p;
  const uint32_t mw = p.alloc(MwType::type1);
  const uint32_t rkey = p.bind(mw, 0x17, region + 0x1000, 0x1000, remote_rw);
  CHECK(rkey != mw);
  const auto data = pattern(300, 5);
  std::copy(data.begin(), data.end(), p.a.buffer(0).begin());
  REQUIRE(p.remote_op(WrOpcode::rdma_write, region + 0x1010, 300, rkey) == WcStatus::success);
  CHECK(std::equal(data.begin(), data.end(), p.region_bytes() + 0x1010));
  std::fill_n(p.a.buffer(0).begin(), 300, 0);
  REQUIRE(p.remote_op(WrOpcode::rdma_read, region + 0x1010, 300, rkey) == WcStatus::success);
  CHECK(std::equal(data.begin(), data.end(), p.a.buffer(0).begin()));
  // The last byte of the window is in, the next one out; so is the byte before it.
  CHECK(p.remote_op(WrOpcode::rdma_read, region + 0x1fff, 1, rkey) == WcStatus::success);
  SECTION("past the end") {
    CHECK(p.remote_op(WrOpcode::rdma_write, region + 0x1ff0, 17, rkey) == WcStatus::rem_access_err);
  }
  SECTION("before the start, though inside the region") {
    CHECK(p.remote_op(WrOpcode::rdma_read, region + 0xfff, 2, rkey) == WcStatus::rem_access_err);
  }
  SECTION("a right the window does not grant, though the region does") {
    CHECK(p.remote_op(WrOpcode::atomic_fetch_and_add, region + 0x1008, 8, rkey) == WcStatus::rem_access_err);
  }
  SECTION("the window's key is no lkey") {
    REQUIRE(p.post_b(send_wr(3, WrOpcode::rdma_write, region + 0x1000, 16, rkey)) == 0);
    REQUIRE(p.run());
    const auto wc = p.b.poll(p.b.send_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::loc_prot_err);
  }
}

TEST_CASE("memory windows: a rebind retires the old rkey, and length 0 unbinds a type 1 window",
          "[transport][mw]") {
  WindowPair p;
  const uint32_t mw = p.alloc(MwType::type1);
  const uint32_t first = p.bind(mw, 0x21, region, 0x2000, remote_rw);
  const uint32_t second = p.bind(first, 0x22, region + 0x8000, 0x100, access_remote_read);
  CHECK(p.remote_op(WrOpcode::rdma_read, region + 0x8000, 0x100, second) == WcStatus::success);
  SECTION("the old rkey") {
    CHECK(p.remote_op(WrOpcode::rdma_read, region, 16, first) == WcStatus::rem_access_err);
  }
  SECTION("the new window is read-only") {
    CHECK(p.remote_op(WrOpcode::rdma_write, region + 0x8000, 16, second) == WcStatus::rem_access_err);
  }
  SECTION("unbound") {
    SendWr wr = p.bind_wr(second, 0x23, 0, 0, 0);
    wr.bind.mr_lkey = 0;
    REQUIRE(p.post_b(wr) == 0);
    REQUIRE(p.run());
    const auto wc = p.b.poll(p.b.send_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::success);
    CHECK(p.remote_op(WrOpcode::rdma_read, region + 0x8000, 16, (second & ~0xffu) | 0x23) ==
          WcStatus::rem_access_err);
    CHECK(p.b.device->dereg_mr(p.region_key) == 0);  // nothing bound to the region any more
  }
}

TEST_CASE("memory windows: a region cannot be deregistered while windows are bound to it", "[transport][mw]") {
  WindowPair p;
  const uint32_t mw = p.alloc(MwType::type1);
  p.bind(mw, 1, region, 64, remote_rw);
  CHECK(p.b.device->dereg_mr(p.region_key) == EINVAL);  // as rxe
  uint32_t new_key = 0;
  CHECK(p.b.device->rereg_mr(p.region_key, p.b.pd, region, 64, Pair::all_access,
                             std::make_shared<HostMemory>(p.region_bytes(), 64), 0, true, new_key) == EINVAL);
  CHECK(p.b.device->dereg_mr(mw) == EINVAL);   // a window's key is no region's
  CHECK(p.b.device->dealloc_pd(p.b.pd) == EBUSY);
  CHECK(p.b.device->dealloc_mw(mw >> 8) == 0);
  CHECK(p.b.device->dealloc_mw(mw >> 8) == EINVAL);
  CHECK(p.b.device->dereg_mr(p.region_key) == 0);
}

TEST_CASE("memory windows: the region must allow binding, and writing if the window does", "[transport][mw]") {
  SECTION("a region without MW_BIND") {
    WindowPair p(Pair::all_access);
    p.bind(p.alloc(MwType::type1), 1, region, 64, remote_rw, WcStatus::mw_bind_err);
    CHECK(p.state(p.b, p.qb) == QpState::err);
  }
  SECTION("remote write through a window on a region without LOCAL_WRITE") {
    WindowPair p(access_remote_read | access_mw_bind);
    p.bind(p.alloc(MwType::type1), 1, region, 64, access_remote_write, WcStatus::mw_bind_err);
    CHECK(p.state(p.b, p.qb) == QpState::err);
  }
  SECTION("... which a read-only window does not need") {
    WindowPair p(access_remote_read | access_mw_bind);
    const uint32_t rkey = p.bind(p.alloc(MwType::type1), 1, region, 64, access_remote_read);
    CHECK(p.remote_op(WrOpcode::rdma_read, region, 64, rkey) == WcStatus::success);
  }
}

TEST_CASE("memory windows: binds that break a rule complete with MW_BIND_ERR and stop the QP", "[transport][mw]") {
  WindowPair p;
  SECTION("a range outside the region") {
    p.bind(p.alloc(MwType::type1), 1, region + (64 << 10) - 32, 64, remote_rw, WcStatus::mw_bind_err);
  }
  SECTION("a zero-based type 1 window") {
    p.bind(p.alloc(MwType::type1), 1, region, 64, remote_rw | access_zero_based, WcStatus::mw_bind_err);
  }
  SECTION("a window of another protection domain") {
    uint32_t pd2 = 0, mw = 0;
    REQUIRE(p.b.device->alloc_pd(pd2) == 0);
    REQUIRE(p.b.device->alloc_mw(pd2, MwType::type1, mw) == 0);
    p.bind(mw, 1, region, 64, remote_rw, WcStatus::mw_bind_err);
  }
  SECTION("a type 2 window bound already") {
    const uint32_t mw = p.alloc(MwType::type2);
    const uint32_t rkey = p.bind(mw, 1, region, 64, remote_rw);
    p.bind(rkey, 2, region, 64, remote_rw, WcStatus::mw_bind_err);
  }
  SECTION("a type 2 window given no length") {
    p.bind(p.alloc(MwType::type2), 1, region, 0, remote_rw, WcStatus::mw_bind_err);
  }
  SECTION("no such window") {
    p.bind(0x7777700, 1, region, 64, remote_rw, WcStatus::mw_bind_err);
  }
  CHECK(p.state(p.b, p.qb) == QpState::err);
}

TEST_CASE("memory windows: a type 2 window serves only the QP that bound it", "[transport][mw]") {
  WindowPair p;
  // A second connection between the same two PDs.
  const uint32_t qa2 = p.a.create_qp(QpType::rc), qb2 = p.b.create_qp(QpType::rc);
  connect(p.a, qa2, QpType::rc, p.b.address, qb2, 100, 200);
  connect(p.b, qb2, QpType::rc, p.a.address, qa2, 200, 100);
  const uint32_t rkey = p.bind(p.alloc(MwType::type2), 9, region + 0x100, 0x100, remote_rw);
  CHECK(p.remote_op(WrOpcode::rdma_write, region + 0x100, 0x100, rkey) == WcStatus::success);
  CHECK(p.remote_op(WrOpcode::rdma_write, region + 0x100, 16, rkey, qa2) == WcStatus::rem_access_err);
  SECTION("a type 1 window serves both") {
    WindowPair q;
    const uint32_t qa3 = q.a.create_qp(QpType::rc), qb3 = q.b.create_qp(QpType::rc);
    connect(q.a, qa3, QpType::rc, q.b.address, qb3, 100, 200);
    connect(q.b, qb3, QpType::rc, q.a.address, qa3, 200, 100);
    const uint32_t k = q.bind(q.alloc(MwType::type1), 9, region, 0x100, remote_rw);
    CHECK(q.remote_op(WrOpcode::rdma_write, region, 16, k) == WcStatus::success);
    CHECK(q.remote_op(WrOpcode::rdma_write, region, 16, k, qa3) == WcStatus::success);
  }
  SECTION("destroying the QP unbinds it") {
    CHECK(p.b.device->dereg_mr(p.region_key) == EINVAL);
    REQUIRE(p.b.device->destroy_qp(p.qb) == 0);
    CHECK(p.b.device->dereg_mr(p.region_key) == 0);
  }
}

TEST_CASE("memory windows: a zero-based type 2 window takes offsets", "[transport][mw]") {
  WindowPair p;
  const uint32_t rkey = p.bind(p.alloc(MwType::type2), 3, region + 0x3000, 0x200, remote_rw | access_zero_based);
  const auto data = pattern(64, 77);
  std::copy(data.begin(), data.end(), p.a.buffer(0).begin());
  REQUIRE(p.remote_op(WrOpcode::rdma_write, 0x40, 64, rkey) == WcStatus::success);
  CHECK(std::equal(data.begin(), data.end(), p.region_bytes() + 0x3040));
  CHECK(p.remote_op(WrOpcode::rdma_write, 0x1f0, 32, rkey) == WcStatus::rem_access_err);
}

TEST_CASE("memory windows: LOCAL_INV and SEND_WITH_INV invalidate a type 2 window, not a type 1",
          "[transport][mw]") {
  WindowPair p;
  const uint32_t mw = p.alloc(MwType::type2);
  uint32_t rkey = p.bind(mw, 0x40, region, 0x1000, remote_rw);
  SECTION("LOCAL_INV, then a new bind") {
    REQUIRE(p.post_b(local_inv(rkey)) == 0);
    REQUIRE(p.run());
    auto wc = p.b.poll(p.b.send_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::success);
    CHECK(wc[0].opcode == WcOpcode::local_inv);
    const uint32_t old = rkey;
    rkey = p.bind(rkey, 0x41, region, 0x1000, access_remote_read);  // free again: it may be bound
    CHECK(p.remote_op(WrOpcode::rdma_read, region, 16, rkey) == WcStatus::success);
    CHECK(p.remote_op(WrOpcode::rdma_read, region, 16, old) == WcStatus::rem_access_err);
  }
  SECTION("LOCAL_INV: access fails at once") {
    REQUIRE(p.post_b(local_inv(rkey)) == 0);
    REQUIRE(p.run());
    REQUIRE(p.b.poll(p.b.send_cq).size() == 1);
    CHECK(p.b.device->dereg_mr(p.region_key) == 0);  // nothing is bound to the region any more
  }
  SECTION("SEND_WITH_INV from the peer") {
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(5, Pair::b_base, 4096, p.b_key)) == 0);
    SendWr send = send_wr(1, WrOpcode::send_with_inv, a_base, 8, p.a_key);
    send.invalidate_rkey = rkey;
    REQUIRE(p.post_a(send) == 0);
    REQUIRE(p.run());
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].status == WcStatus::success);
    CHECK((rc[0].wc_flags & wc_with_inv) != 0);
    CHECK(rc[0].imm_data == rkey);
    REQUIRE(p.a.poll(p.a.send_cq).size() == 1);
    CHECK(p.remote_op(WrOpcode::rdma_read, region, 16, rkey) == WcStatus::rem_access_err);
  }
  SECTION("a type 1 window cannot be invalidated") {
    const uint32_t k1 = p.bind(p.alloc(MwType::type1), 5, region, 0x1000, remote_rw);
    REQUIRE(p.post_b(local_inv(k1)) == 0);
    REQUIRE(p.run());
    const auto wc = p.b.poll(p.b.send_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::loc_prot_err);
  }
}

}  // namespace uroce::test
