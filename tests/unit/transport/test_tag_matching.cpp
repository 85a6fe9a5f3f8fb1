// Tag matching SRQs (transport/qp/tag_matching.cpp), driven through two devices on the simulated network:
// a sender with a plain RC QP, and a receiver whose RC QP takes its receives from a TM SRQ (with no send
// queue of its own to speak of: max_send_wr 0, as rdma-core's tests create it). Checked: where each kind of
// message lands (eager matched, over one and several packets; unexpected; NO_TAG, FIN and too short), with
// which completions on the SRQ's CQ (opcode, flags, length, wr_id, tag and app_ctx); the unexpected count
// and its synchronisation; the rendezvous (MATCH, the READ, DATA_VALID, the FIN the sender receives), too
// long a one and a failing one; and what the list operations refuse. The messages are built here byte by
// byte from the header layout in infiniband/tm_types.h, not with the code under test.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

// The same addresses and rights as the fixture's Pair, with a TM SRQ on b.
constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;
constexpr uint8_t no_tag = 0, rndv = 1, fin = 2, eager = 3;

void put_be(std::vector<uint8_t>& v, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) v.push_back(uint8_t(value >> (8 * i)));
}

// struct ibv_tmh: opcode, 3 reserved bytes, app_ctx, tag (big-endian).
std::vector<uint8_t> tmh(uint8_t opcode, uint32_t app_ctx, uint64_t tag) {
  std::vector<uint8_t> v{opcode, 0, 0, 0};
  put_be(v, app_ctx, 4);
  put_be(v, tag, 8);
  return v;
}

// struct ibv_rvh: va, rkey, len.
std::vector<uint8_t> rvh(uint64_t va, uint32_t rkey, uint32_t len) {
  std::vector<uint8_t> v;
  put_be(v, va, 8);
  put_be(v, rkey, 4);
  put_be(v, len, 4);
  return v;
}

std::vector<uint8_t> join(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct TagPair {
  explicit TagPair(uint32_t max_tags = 8) {
    a_key = a.add_buffer(1 << 20, Pair::all_access, a_base);
    b_key = b.add_buffer(1 << 20, Pair::all_access, b_base);
    REQUIRE(b.device->create_cq(256, tm_cq) == 0);
    REQUIRE(b.device->create_tm_srq(b.pd, tm_cq, 64, 4, 0, max_tags, 16, srq) == 0);
    qa = a.create_qp(QpType::rc);
    QpInitAttr attr;
    attr.pd = b.pd;
    attr.send_cq = b.send_cq;
    attr.recv_cq = b.recv_cq;
    attr.srq = srq;
    attr.type = QpType::rc;
    attr.cap = {0, 0, 0, 0, 0};  // the TM SRQ owns the send queue: the application posts nothing to it
    REQUIRE(b.device->create_qp(attr, qb) == 0);
    connect(a, qa, QpType::rc, b.address, qb, 100, 200);
    connect(b, qb, QpType::rc, a.address, qa, 200, 100);
  }
  void run() { REQUIRE(net.run_until_idle(net.now() + 10'000'000'000ull)); }

  // A SEND of `message` from a (its bytes at a_base + offset).
  void send(const std::vector<uint8_t>& message, uint64_t offset = 0, uint64_t id = 1) {
    put(a.buffer(0), offset, message);
    REQUIRE(a.device->post_send(qa, send_wr(id, WrOpcode::send, a_base + offset, uint32_t(message.size()), a_key),
                                net.now()) == 0);
    run();
  }
  TagOp op(TagOpcode code, uint64_t wr_id, uint32_t flags = tag_op_signaled, uint32_t unexpected = 0) {
    TagOp o;
    o.wr_id = wr_id;
    o.opcode = code;
    o.flags = flags;
    o.unexpected_cnt = unexpected;
    return o;
  }
  // ADD of a tagged buffer at b_base + offset; its handle.
  uint32_t add(uint64_t tag, uint64_t recv_wr_id, uint64_t offset, uint32_t len, uint64_t mask = ~0ull,
               uint32_t flags = tag_op_signaled) {
    TagOp o = op(TagOpcode::add, 1000 + recv_wr_id, flags);
    o.tag = tag;
    o.mask = mask;
    o.recv_wr_id = recv_wr_id;
    o.sg_list.push_back({b_base + offset, len, b_key});
    uint32_t handle = 0;
    REQUIRE(b.device->post_srq_op(srq, o, handle, net.now()) == 0);
    return handle;
  }
  // TAG_SYNC reporting `handled` unexpected messages; its completion.
  WorkCompletion sync(uint32_t handled) {
    uint32_t unused = 0;
    REQUIRE(b.device->post_srq_op(srq, op(TagOpcode::sync, 77, tag_op_signaled | tag_op_sync, handled), unused,
                                  net.now()) == 0);
    auto wc = b.poll(tm_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].opcode == WcOpcode::tm_sync);
    CHECK(wc[0].wr_id == 77);
    return wc[0];
  }
  void post_plain(uint64_t id, uint64_t offset, uint32_t len = 4096) {
    REQUIRE(b.device->post_srq_recv(srq, recv_wr(id, b_base + offset, len, b_key)) == 0);
  }

  sim::SimNetwork net{1};
  WireLog wire{net};
  Host a{net, ip("10.0.0.1")};
  Host b{net, ip("10.0.0.2")};
  uint32_t a_key = 0, b_key = 0, tm_cq = 0, srq = 0, qa = 0, qb = 0;
};

}  // namespace

TEST_CASE("tag matching: an eager message lands in the buffer its tag matches, without its TMH",
          "[transport][tm]") {
  TagPair p;
  for (uint64_t t = 1; t <= 3; ++t) p.add(t, t, t * 8192, 4096);
  auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 3);
  for (uint64_t t = 1; t <= 3; ++t) {
    CHECK(wc[t - 1].opcode == WcOpcode::tm_add);
    CHECK(wc[t - 1].wr_id == 1000 + t);
    CHECK(wc[t - 1].wc_flags == 0);  // in step: no TAG_SYNC wanted
  }
  // Tags sent in reverse order: each message finds its own buffer, wherever it is in the list.
  for (uint64_t t = 3; t >= 1; --t) {
    const auto data = pattern(500 + t, uint8_t(t));
    p.send(join(tmh(eager, uint32_t(0xc0de0000 + t), t), data));
    wc = p.b.poll(p.tm_cq);
    REQUIRE(wc.size() == 1);
    CHECK(wc[0].status == WcStatus::success);
    CHECK(wc[0].opcode == WcOpcode::tm_recv);
    CHECK(wc[0].wc_flags == (wc_tm_match | wc_tm_data_valid));  // one packet: both at once
    CHECK(wc[0].wr_id == t);
    CHECK(wc[0].byte_len == data.size());
    CHECK(wc[0].tm_tag == t);
    CHECK(wc[0].tm_priv == 0xc0de0000 + t);
    CHECK(wc[0].qp_num == p.qb);
    CHECK(slice(p.b.buffer(0), t * 8192, data.size()) == data);
  }
  CHECK(p.b.poll(p.b.recv_cq).empty());  // the QP's own CQ takes nothing: the SRQ's CQ takes it all
  CHECK(p.b.poll(p.b.send_cq).empty());
  CHECK(p.a.poll(p.a.send_cq).size() == 3);
}

TEST_CASE("tag matching: the mask decides which tag bits count; the first matching buffer is taken",
          "[transport][tm]") {
  TagPair p;
  p.add(0x1200, 1, 0, 4096, 0xff00);     // matches 0x12XX
  p.add(0x1234, 2, 8192, 4096);          // would match exactly, but comes second
  p.b.poll(p.tm_cq);
  p.send(join(tmh(eager, 0, 0x1234), pattern(100, 1)));
  auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 1);
  p.send(join(tmh(eager, 0, 0x1234), pattern(100, 2)));
  wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 2);
  CHECK(wc[0].wc_flags == (wc_tm_match | wc_tm_data_valid));
}

TEST_CASE("tag matching: an eager message of several packets completes with MATCH first, DATA_VALID at its end",
          "[transport][tm]") {
  TagPair p;  // path MTU 1024
  p.add(9, 42, 0, 8192);
  p.b.poll(p.tm_cq);
  const auto data = pattern(5000, 9);  // 5016 bytes with the TMH: five packets, the MIDDLEs placed early
  p.send(join(tmh(eager, 7, 9), data));
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].opcode == WcOpcode::tm_recv);
  CHECK(wc[0].wc_flags == wc_tm_match);
  CHECK(wc[0].wr_id == 42);
  CHECK(wc[0].tm_tag == 9);
  CHECK(wc[0].tm_priv == 7);
  CHECK(wc[1].opcode == WcOpcode::tm_recv);
  CHECK(wc[1].wc_flags == wc_tm_data_valid);
  CHECK(wc[1].wr_id == 42);
  CHECK(wc[1].byte_len == data.size());
  CHECK(wc[1].tm_tag == 0);  // the buffer is named by wr_id; the tag came with the MATCH
  CHECK(slice(p.b.buffer(0), 0, data.size()) == data);
  CHECK(p.b.buffer(0)[data.size()] == 0);  // nothing past it
}

TEST_CASE("tag matching: an eager message too long for its tagged buffer fails it, as any receive",
          "[transport][tm]") {
  TagPair p;
  p.add(9, 42, 0, 100);
  p.b.poll(p.tm_cq);
  p.send(join(tmh(eager, 0, 9), pattern(101, 1)));
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == WcStatus::loc_len_err);
  CHECK(wc[0].opcode == WcOpcode::tm_recv);
  CHECK(wc[0].wr_id == 42);
  CHECK(wc[0].tm_tag == 9);
  const auto sent = p.a.poll(p.a.send_cq);
  REQUIRE(sent.size() == 1);
  CHECK(sent[0].status == WcStatus::rem_inv_req_err);
}

TEST_CASE("tag matching: an unexpected message goes whole to an ordinary receive; new tags wait for TAG_SYNC",
          "[transport][tm]") {
  TagPair p;
  p.add(5, 5, 0, 4096);  // added in step: it keeps matching after an unexpected message
  p.b.poll(p.tm_cq);
  p.post_plain(900, 64 * 1024);
  p.post_plain(901, 72 * 1024);
  const auto first = join(tmh(eager, 1, 0x77), pattern(300, 3));
  p.send(first);
  auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].opcode == WcOpcode::tm_recv);
  CHECK(wc[0].wc_flags == 0);  // no MATCH: software matches it
  CHECK(wc[0].wr_id == 900);
  CHECK(wc[0].byte_len == first.size());
  CHECK(wc[0].tm_tag == 0);
  CHECK(slice(p.b.buffer(0), 64 * 1024, first.size()) == first);  // TMH included

  // Out of step now: a buffer added before software catches up matches nothing, and says so. (A count
  // counts only with IBV_OPS_TM_SYNC: this ADD's, without it, reports nothing.)
  TagOp add = p.op(TagOpcode::add, 1078, tag_op_signaled, 1);
  add.tag = 0x78;
  add.mask = ~0ull;
  add.recv_wr_id = 78;
  add.sg_list.push_back({b_base + 8192, 4096, p.b_key});
  uint32_t handle = 0;
  REQUIRE(p.b.device->post_srq_op(p.srq, add, handle, p.net.now()) == 0);
  wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].opcode == WcOpcode::tm_add);
  CHECK(wc[0].wc_flags == wc_tm_sync_req);
  const auto second = join(tmh(eager, 2, 0x78), pattern(200, 4));
  p.send(second);
  wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 901);  // unexpected again: the ordinary receive took it
  CHECK(wc[0].wc_flags == 0);
  // The buffer added in step still matches.
  p.send(join(tmh(eager, 3, 5), pattern(50, 5)));
  wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 5);
  CHECK(wc[0].wc_flags == (wc_tm_match | wc_tm_data_valid));

  // A sync that undercounts changes nothing; the right count brings the waiting buffer in.
  CHECK(p.sync(1).wc_flags == wc_tm_sync_req);
  CHECK(p.sync(2).wc_flags == 0);
  p.send(join(tmh(eager, 4, 0x78), pattern(60, 6)));
  wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 78);
  CHECK(wc[0].wc_flags == (wc_tm_match | wc_tm_data_valid));
}

TEST_CASE("tag matching: an unexpected message with no receive posted is RNR-NAKed and counted once",
          "[transport][tm]") {
  TagPair p;
  const auto message = join(tmh(eager, 0, 1), pattern(64, 1));
  put(p.a.buffer(0), 0, message);
  REQUIRE(p.a.device->post_send(p.qa, send_wr(1, WrOpcode::send, a_base, uint32_t(message.size()), p.a_key),
                                p.net.now()) == 0);
  p.net.run_until(p.net.now() + 1'000'000);  // 1 ms: several RNR rounds (min_rnr_timer 0.01 ms)
  CHECK(p.b.poll(p.tm_cq).empty());
  CHECK(p.b.device->counters().rnr_naks_sent >= 2);
  p.post_plain(900, 0);
  p.run();
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 900);
  CHECK(p.sync(1).wc_flags == 0);  // one unexpected message, however many times it was refused
}

TEST_CASE("tag matching: NO_TAG and FIN go whole to an ordinary receive as TM_NO_TAG, a message without a "
          "whole TMH as a plain RECV; neither is unexpected",
          "[transport][tm]") {
  TagPair p;
  p.add(0x10, 1, 0, 4096);  // a buffer their tags would match: it must stay untouched
  p.b.poll(p.tm_cq);
  for (uint64_t id = 900; id < 903; ++id) p.post_plain(id, 64 * 1024 + (id - 900) * 4096);
  const auto plain_no_tag = join(tmh(no_tag, 0, 0x10), pattern(40, 1));
  const auto a_fin = join(tmh(fin, 0, 0x10), rvh(0x1000, 5, 6));
  const std::vector<uint8_t> too_short(15, 0x03);  // an EAGER opcode, but no room for the tag
  p.send(plain_no_tag);
  p.send(a_fin);
  p.send(too_short);
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 3);
  CHECK(wc[0].opcode == WcOpcode::tm_no_tag);
  CHECK(wc[0].byte_len == plain_no_tag.size());
  CHECK(wc[1].opcode == WcOpcode::tm_no_tag);
  CHECK(wc[2].opcode == WcOpcode::recv);
  CHECK(wc[2].byte_len == too_short.size());
  for (size_t i = 0; i < 3; ++i) {
    CHECK(wc[i].wr_id == 900 + i);
    CHECK(wc[i].wc_flags == 0);
  }
  CHECK(slice(p.b.buffer(0), 64 * 1024, plain_no_tag.size()) == plain_no_tag);
  CHECK(p.sync(0).wc_flags == 0);  // still in step
  CHECK(p.b.buffer(0)[0] == 0);
}

TEST_CASE("tag matching: a rendezvous request is matched, READ into the tagged buffer, and FIN'd to the sender",
          "[transport][tm]") {
  TagPair p;
  p.add(0x5151, 61, 0, 8192);
  p.b.poll(p.tm_cq);
  // The sender's data, and a receive for the FIN.
  const auto data = pattern(6000, 0x61);
  put(p.a.buffer(0), 64 * 1024, data);
  REQUIRE(p.a.device->post_recv(p.qa, recv_wr(555, a_base + 128 * 1024, 64, p.a_key)) == 0);
  const auto request = join(join(tmh(rndv, 0xabcd, 0x5151), rvh(a_base + 64 * 1024, p.a_key, uint32_t(data.size()))),
                            pattern(16, 0xee));  // 48 bytes: the optional data software would read
  p.send(request);

  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].opcode == WcOpcode::tm_recv);
  CHECK(wc[0].wc_flags == wc_tm_match);  // matched at once; the data follows
  CHECK(wc[0].wr_id == 61);
  CHECK(wc[0].tm_tag == 0x5151);
  CHECK(wc[0].tm_priv == 0xabcd);
  CHECK(wc[1].status == WcStatus::success);
  CHECK(wc[1].opcode == WcOpcode::tm_recv);
  CHECK(wc[1].wc_flags == wc_tm_data_valid);
  CHECK(wc[1].wr_id == 61);
  CHECK(wc[1].byte_len == data.size());
  CHECK(wc[1].tm_tag == 0);  // as mlx5 (rdma-core's test_tm_rndv expects it): the tag came with the MATCH
  CHECK(slice(p.b.buffer(0), 0, data.size()) == data);
  CHECK(p.b.poll(p.b.send_cq).empty());  // the READ and the FIN complete nothing there

  // The FIN: the request's TMH and RVH with the opcode FIN.
  const auto fins = p.a.poll(p.a.recv_cq);
  REQUIRE(fins.size() == 1);
  CHECK(fins[0].status == WcStatus::success);
  CHECK(fins[0].opcode == WcOpcode::recv);
  CHECK(fins[0].byte_len == 32);
  auto expected_fin = slice(request, 0, 32);
  expected_fin[0] = fin;
  CHECK(slice(p.a.buffer(0), 128 * 1024, 32) == expected_fin);
  // On the wire: the RNDV SEND from a, then b's READ request, and b's FIN.
  size_t reads = 0;
  for (const WireFrame& f : p.wire.frames) {
    if (f.point == sim::CapturePoint::delivered && f.is(wire::Opcode::rc_rdma_read_request)) ++reads;
  }
  CHECK(reads == 1);
}

TEST_CASE("tag matching: a rendezvous too long for its buffer leaves TMH and RVH there, RNDV_INCOMPLETE",
          "[transport][tm]") {
  TagPair p;
  p.add(3, 31, 0, 1000);
  p.b.poll(p.tm_cq);
  const auto request = join(tmh(rndv, 9, 3), rvh(a_base, p.a_key, 1001));
  p.send(request);
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].status == WcStatus::tm_rndv_incomplete);
  CHECK(wc[0].opcode == WcOpcode::tm_recv);
  CHECK(wc[0].wc_flags == wc_tm_match);
  CHECK(wc[0].wr_id == 31);
  CHECK(wc[0].byte_len == 32);
  CHECK(slice(p.b.buffer(0), 0, 32) == request);
  for (const WireFrame& f : p.wire.frames) CHECK_FALSE(f.is(wire::Opcode::rc_rdma_read_request));
  CHECK(p.a.poll(p.a.recv_cq).empty());  // no FIN: software finishes it
}

TEST_CASE("tag matching: a rendezvous whose READ fails completes its buffer with the error",
          "[transport][tm]") {
  TagPair p;
  p.add(3, 31, 0, 8192);
  p.b.poll(p.tm_cq);
  p.send(join(tmh(rndv, 0, 3), rvh(a_base, p.a_key ^ 0x5500, 4000)));  // an rkey a does not have
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].wc_flags == wc_tm_match);
  CHECK(wc[1].status == WcStatus::rem_access_err);
  CHECK(wc[1].opcode == WcOpcode::tm_recv);
  CHECK(wc[1].wr_id == 31);
  CHECK(p.b.poll(p.b.send_cq).empty());
}

TEST_CASE("tag matching: a rendezvous request beyond max_rndv_hdr_size, or without a whole RVH, is unexpected",
          "[transport][tm]") {
  TagPair p;
  p.add(3, 31, 0, 8192);
  p.b.poll(p.tm_cq);
  p.post_plain(900, 64 * 1024);
  p.post_plain(901, 72 * 1024);
  p.send(join(join(tmh(rndv, 0, 3), rvh(a_base, p.a_key, 100)), std::vector<uint8_t>(33, 0)));  // 65 bytes
  p.send(join(tmh(rndv, 0, 3), std::vector<uint8_t>(15, 0)));                                    // 31 bytes
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].wr_id == 900);
  CHECK(wc[0].byte_len == 65);
  CHECK(wc[1].wr_id == 901);
  for (const auto& c : wc) CHECK(c.wc_flags == 0);
}

TEST_CASE("tag matching: list operations, and what they refuse", "[transport][tm]") {
  TagPair p(2);
  uint32_t handle = 0;
  // Unsignalled operations complete nothing; a DEL of a live entry works, a second DEL of it fails.
  const uint32_t h1 = p.add(1, 1, 0, 64, ~0ull, 0);
  const uint32_t h2 = p.add(2, 2, 64, 64, ~0ull, 0);
  CHECK(h1 != h2);
  CHECK(p.b.poll(p.tm_cq).empty());
  TagOp add = p.op(TagOpcode::add, 3);
  add.sg_list.push_back({b_base, 64, p.b_key});
  CHECK(p.b.device->post_srq_op(p.srq, add, handle, p.net.now()) == ENOMEM);  // max_tags is 2
  TagOp del = p.op(TagOpcode::del, 4);
  del.handle = h1;
  REQUIRE(p.b.device->post_srq_op(p.srq, del, handle, p.net.now()) == 0);
  REQUIRE(p.b.device->post_srq_op(p.srq, del, handle, p.net.now()) == 0);
  auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].opcode == WcOpcode::tm_del);
  CHECK(wc[0].status == WcStatus::success);
  CHECK(wc[1].status == WcStatus::tm_err);
  // A consumed entry cannot be deleted either; the failure completes even when not signalled.
  p.send(join(tmh(eager, 0, 2), pattern(10, 1)));
  CHECK(p.b.poll(p.tm_cq).size() == 1);
  del = p.op(TagOpcode::del, 5, 0);
  del.handle = h2;
  REQUIRE(p.b.device->post_srq_op(p.srq, del, handle, p.net.now()) == 0);
  wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 1);
  CHECK(wc[0].wr_id == 5);
  CHECK(wc[0].status == WcStatus::tm_err);

  TagOp two_sges = add;
  two_sges.sg_list.push_back({b_base + 64, 64, p.b_key});  // more than max_tm_sge
  CHECK(p.b.device->post_srq_op(p.srq, two_sges, handle, p.net.now()) == EINVAL);
  add.flags = 1u << 5;
  CHECK(p.b.device->post_srq_op(p.srq, add, handle, p.net.now()) == EINVAL);
  add.flags = 0;
  add.opcode = TagOpcode(7);
  CHECK(p.b.device->post_srq_op(p.srq, add, handle, p.net.now()) == EINVAL);
  uint32_t plain_srq = 0;
  REQUIRE(p.b.device->create_srq(p.b.pd, 16, 1, 0, plain_srq) == 0);
  CHECK(p.b.device->post_srq_op(plain_srq, p.op(TagOpcode::sync, 1), handle, p.net.now()) == EINVAL);

  // Creation: limits, a CQ, and RC only.
  uint32_t srq = 0;
  CHECK(p.b.device->create_tm_srq(p.b.pd, p.tm_cq, 16, 1, 0, 0, 1, srq) == EINVAL);
  CHECK(p.b.device->create_tm_srq(p.b.pd, p.tm_cq, 16, 1, 0, 1 << 20, 1, srq) == EINVAL);
  CHECK(p.b.device->create_tm_srq(p.b.pd, 999, 16, 1, 0, 4, 1, srq) == EINVAL);
  QpInitAttr uc;
  uc.pd = p.b.pd;
  uc.send_cq = uc.recv_cq = p.b.send_cq;
  uc.srq = p.srq;
  uc.type = QpType::uc;
  uc.cap = {1, 0, 1, 0, 0};
  uint32_t qpn = 0;
  CHECK(p.b.device->create_qp(uc, qpn) == EINVAL);
  // The SRQ holds its CQ.
  CHECK(p.b.device->destroy_cq(p.tm_cq) == EBUSY);
}

TEST_CASE("tag matching: a QP that fails flushes a rendezvous READ still waiting to its tagged buffer",
          "[transport][tm]") {
  TagPair p;
  p.add(3, 31, 0, 8192);
  p.b.poll(p.tm_cq);
  // The READ is queued when the request completes; the QP is moved to the error state before it is sent.
  const auto request = join(tmh(rndv, 0, 3), rvh(a_base, p.a_key, 4000));
  put(p.a.buffer(0), 0, request);
  REQUIRE(p.a.device->post_send(p.qa, send_wr(1, WrOpcode::send, a_base, uint32_t(request.size()), p.a_key),
                                p.net.now()) == 0);
  // Deliver the request but nothing b sends back: b's READ leaves and is lost.
  sim::LinkProfile cut;
  cut.blackhole = true;
  p.net.set_link_profile(p.b.node, p.a.node, cut);
  p.net.run_until(p.net.now() + 100'000);
  CHECK(p.wire.sent(p.b.node, [](const WireFrame& f) { return f.is(wire::Opcode::rc_rdma_read_request); }).size() == 1);
  QpAttr err;
  err.qp_state = QpState::err;
  REQUIRE(p.b.device->modify_qp(p.qb, err, attr_state, p.net.now()) == 0);
  const auto wc = p.b.poll(p.tm_cq);
  REQUIRE(wc.size() == 2);
  CHECK(wc[0].wc_flags == wc_tm_match);
  CHECK(wc[1].status == WcStatus::wr_flush_err);
  CHECK(wc[1].opcode == WcOpcode::tm_recv);
  CHECK(wc[1].wr_id == 31);
  CHECK(p.b.poll(p.b.send_cq).empty());
}
