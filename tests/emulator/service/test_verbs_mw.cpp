// Memory windows through the verbs service: alloc_mw / dealloc_mw are a session's own objects like any
// other, a BIND_MW work request written into the send ring binds one (the engine fills the transport's
// bind from the ring entry), another session's window or region cannot be bound, a region with a window
// bound cannot be deregistered, and a session that goes away with windows bound is freed completely.
#include <unistd.h>

#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using namespace uroce::verbs;

constexpr uint32_t region_access = access_local_write | access_remote_write | access_remote_read | access_mw_bind;

// One session's PD, region (`memory`, registered for windows), CQ and RC QPs, each QP looped back to
// itself on the harness's device, with the rings the client would map.
struct WindowClient {
  WindowClient(ServiceHarness& harness, uint64_t id, size_t bytes = 4096) : h(harness), session(id), memory(bytes, 0) {
    pd = h.call(session, {{"op", "alloc_pd"}}).at("pd");
    mr = h.call(session, {{"op", "reg_mr"}, {"pd", pd}, {"addr", addr(0)}, {"length", uint64_t(bytes)},
                          {"access", region_access}})
             .at("lkey");
    std::vector<int> fds;
    const json c = h.call(session, {{"op", "create_cq"}, {"cqe", 16}}, &fds);
    cqn = c.at("cq");
    cq = client::CompletionRing(fds.at(0), c.at("ring_bytes"), c.at("cqe"));
  }

  // A new QP at RTS facing itself; returns its index in `qps`.
  size_t add_qp() {
    std::vector<int> fds;
    const json reply = h.call(session, qp_request(pd, cqn, cqn), &fds);
    REQUIRE(fds.size() == 2);
    const auto cap = reply.at("cap").get<QpCap>();
    qps.push_back(reply.at("qp_num"));
    sends.emplace_back(fds[0], reply.at("send_ring_bytes"), cap.max_send_wr, reply.at("send_entry_size"),
                       cap.max_send_sge, cap.max_inline_data);
    close(fds[1]);
    connect_qp(h, session, qps.back(), qps.back());
    return qps.size() - 1;
  }

  json alloc_mw(uint32_t type) { return h.call(session, {{"op", "alloc_mw"}, {"pd", pd}, {"type", type}}); }

  // A signalled BIND_MW on QP `qp`, as the verbs shim writes one; its completion after the engine ran.
  protocol::CompletionEntry bind(size_t qp, uint32_t mw, uint32_t rkey, uint32_t lkey, uint64_t offset,
                                 uint64_t length) {
    protocol::SendEntry e = send_entry(7, WrOpcode::bind_mw);
    e.bind_mw = mw;
    e.rkey = rkey;
    e.bind_mr_lkey = lkey;
    e.bind_addr = addr(offset);
    e.bind_length = length;
    e.bind_access = access_remote_write | access_remote_read;
    REQUIRE(sends[qp].post(e, {}, {}) == 0);
    return one_completion();
  }

  // An 8-byte RDMA WRITE from the start of the region to `to` through `rkey`; its completion.
  protocol::CompletionEntry write(size_t qp, uint32_t rkey, uint64_t to) {
    protocol::SendEntry e = send_entry(8, WrOpcode::rdma_write);
    e.remote_addr = to;
    e.rkey = rkey;
    const protocol::WireSge s = sge(addr(0), 8, mr);
    REQUIRE(sends[qp].post(e, std::span(&s, 1), {}) == 0);
    return one_completion();
  }

  protocol::CompletionEntry one_completion() {
    h.pump();
    const std::vector<protocol::CompletionEntry> done = poll_all(cq);
    REQUIRE(done.size() == 1);
    return done[0];
  }

  uint64_t addr(uint64_t offset) { return reinterpret_cast<uint64_t>(memory.data()) + offset; }

  ServiceHarness& h;
  uint64_t session;
  std::vector<uint8_t> memory;
  uint32_t pd = 0, mr = 0, cqn = 0;
  client::CompletionRing cq;
  std::vector<uint32_t> qps;
  std::vector<client::SendRing> sends;
};

bool completed(const protocol::CompletionEntry& c, WcStatus status, WcOpcode opcode) {
  return c.status == uint32_t(status) && (status != WcStatus::success || c.opcode == uint32_t(opcode));
}

uint32_t next_rkey(uint32_t rkey) { return (rkey & ~0xffu) | ((rkey + 1) & 0xff); }

}  // namespace

TEST_CASE("memory windows: allocated, bound through the ring, owned by their session", "[verbs][mw]") {
  ServiceHarness h;
  constexpr uint64_t owner = 1, other = 2;
  h.service->open_session(owner, getpid(), getuid());
  h.service->open_session(other, getpid(), getuid());
  WindowClient a(h, owner), b(h, other);
  const size_t qa = a.add_qp();

  const json w1 = a.alloc_mw(uint32_t(MwType::type1));
  const json w2 = a.alloc_mw(uint32_t(MwType::type2));
  const uint32_t mw1 = w1.at("mw"), rkey1 = w1.at("rkey"), mw2 = w2.at("mw"), rkey2 = w2.at("rkey");
  CHECK(mw1 == rkey1 >> 8);
  CHECK(mw2 == rkey2 >> 8);
  CHECK(mw1 != mw2);
  CHECK(h.error_of(owner, {{"op", "alloc_mw"}, {"pd", a.pd}, {"type", 3}}) == EINVAL);
  CHECK(h.error_of(owner, {{"op", "alloc_mw"}, {"pd", a.pd}, {"type", 0}}) == EINVAL);
  CHECK(h.error_of(owner, {{"op", "alloc_mw"}, {"pd", b.pd}, {"type", 1}}) == EINVAL);  // another's PD
  CHECK(h.error_of(owner, {{"op", "alloc_mw"}, {"type", 1}}) == EINVAL);
  CHECK(h.error_of(other, {{"op", "dealloc_mw"}, {"mw", mw1}}) == EINVAL);  // another's window

  // Bound through the send ring: the engine hands the transport the window, key, region and range.
  const uint32_t bound1 = next_rkey(rkey1), bound2 = next_rkey(rkey2);
  CHECK(completed(a.bind(qa, mw1, bound1, a.mr, 256, 512), WcStatus::success, WcOpcode::bind_mw));
  CHECK(completed(a.bind(qa, mw2, bound2, a.mr, 1024, 64), WcStatus::success, WcOpcode::bind_mw));
  std::fill(a.memory.begin(), a.memory.begin() + 8, 0x5a);
  CHECK(completed(a.write(qa, bound1, a.addr(256 + 504)), WcStatus::success, WcOpcode::rdma_write));
  CHECK(a.memory[256 + 504] == 0x5a);
  CHECK(completed(a.write(qa, bound2, a.addr(1024)), WcStatus::success, WcOpcode::rdma_write));
  CHECK(a.memory[1024] == 0x5a);
  // A region with windows bound stays registered.
  CHECK(h.error_of(owner, {{"op", "dereg_mr"}, {"key", a.mr}}) == EINVAL);

  SECTION("another session cannot bind a window or a region that is not its own") {
    const json own = b.alloc_mw(uint32_t(MwType::type1));
    const size_t q1 = b.add_qp(), q2 = b.add_qp();
    // The owner's window, onto the other session's region: refused, and the window keeps its binding.
    CHECK(completed(b.bind(q1, mw1, next_rkey(bound1), b.mr, 0, 64), WcStatus::mw_bind_err, WcOpcode::bind_mw));
    // Its own window, onto the owner's region.
    CHECK(completed(b.bind(q2, own.at("mw"), next_rkey(own.at("rkey")), a.mr, 0, 64), WcStatus::mw_bind_err,
                    WcOpcode::bind_mw));
    a.memory[256] = 0;
    CHECK(completed(a.write(qa, bound1, a.addr(256)), WcStatus::success, WcOpcode::rdma_write));
    CHECK(a.memory[256] == 0x5a);
  }
  SECTION("dealloc_mw unbinds: the region can then go") {
    h.call(owner, {{"op", "dealloc_mw"}, {"mw", mw1}});
    CHECK(h.error_of(owner, {{"op", "dealloc_mw"}, {"mw", mw1}}) == EINVAL);  // gone
    CHECK(h.error_of(owner, {{"op", "dereg_mr"}, {"key", a.mr}}) == EINVAL);  // the type 2 window is bound
    h.call(owner, {{"op", "dealloc_mw"}, {"mw", mw2}});
    h.call(owner, {{"op", "dereg_mr"}, {"key", a.mr}});
  }
}

TEST_CASE("a session that goes away with windows bound is freed completely", "[verbs][mw]") {
  // Room for one session's PD and three keys (a region and two windows) at a time: the next session gets
  // them only if everything the first held was freed.
  transport::DeviceLimits limits;
  limits.max_pd = 1;
  limits.max_mr = 3;
  ServiceHarness h(limits);
  for (uint64_t session : {1, 2}) {
    h.service->open_session(session, getpid(), getuid());
    WindowClient c(h, session);
    const size_t q = c.add_qp();
    const json w1 = c.alloc_mw(uint32_t(MwType::type1));
    const json w2 = c.alloc_mw(uint32_t(MwType::type2));
    CHECK(h.error_of(session, {{"op", "alloc_mw"}, {"pd", c.pd}, {"type", 1}}) == ENOMEM);  // the table is full
    CHECK(completed(c.bind(q, w1.at("mw"), next_rkey(w1.at("rkey")), c.mr, 0, 128), WcStatus::success,
                    WcOpcode::bind_mw));
    CHECK(completed(c.bind(q, w2.at("mw"), next_rkey(w2.at("rkey")), c.mr, 128, 128), WcStatus::success,
                    WcOpcode::bind_mw));
    h.service->close_session(session);
  }
  h.service->open_session(3, getpid(), getuid());
  CHECK(h.call(3, {{"op", "alloc_pd"}}).contains("pd"));
}

// The engine's own check, on its own: every bind here is one the transport would carry out (the window,
// the region and the QP are in one PD); only whose the engine was told they are differs.
TEST_CASE("the engine binds only the posting session's own window and region", "[queues][mw]") {
  ServedPair s;
  Pair& p = s.pair;
  constexpr uint64_t base = 0x30000000;
  const uint32_t key = p.a.add_buffer(8192, Pair::all_access | access_mw_bind, base);
  uint32_t rkey = 0;
  REQUIRE(p.a.device->alloc_mw(p.a.pd, MwType::type1, rkey) == 0);
  const uint32_t mw = rkey >> 8;
  const auto bind = [&] {
    protocol::SendEntry e = send_entry(1, WrOpcode::bind_mw);
    e.bind_mw = mw;
    e.rkey = next_rkey(rkey);
    e.bind_mr_lkey = key;
    e.bind_addr = base + 4096;
    e.bind_length = 4096;
    e.bind_access = access_remote_write;
    REQUIRE(s.ca.send.post(e, {}, {}) == 0);
    s.pump();
    const std::vector<protocol::CompletionEntry> done = poll_all(s.ca.send_cq);
    REQUIRE(done.size() == 1);
    return WcStatus(done[0].status);
  };
  const engine::SessionId own = ServedPair::session_a, other = ServedPair::session_b;

  // Who the service believes owns the window and the region.
  const auto owners = [&](engine::SessionId window, engine::SessionId region) {
    s.qa.attach_mw(window, mw);
    s.qa.attach_mr(region, key);
  };
  SECTION("its own window and region: bound") {
    owners(own, own);
    CHECK(bind() == WcStatus::success);
  }
  SECTION("another session's window: refused") {
    owners(other, own);
    CHECK(bind() == WcStatus::mw_bind_err);
  }
  SECTION("another session's region: refused") {
    owners(own, other);
    CHECK(bind() == WcStatus::mw_bind_err);
  }
  SECTION("a window or region the service never made: refused") {
    s.qa.attach_mr(own, key);
    CHECK(bind() == WcStatus::mw_bind_err);
  }
  SECTION("a window no longer attached: refused") {
    owners(own, own);
    s.qa.detach_mw(mw);
    CHECK(bind() == WcStatus::mw_bind_err);
  }
}

}  // namespace uroce::test::service
