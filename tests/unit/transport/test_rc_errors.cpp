// RC error paths one at a time (requester a, responder b): what each side reports when a request breaks a
// rule (completion status, QP state, affiliated event, the NAK on the wire), and the frames a device drops
// before they reach a QP, each with its counter. The expected outcomes are the IBTA's, as rxe and
// hardware RNICs implement them.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;

std::vector<uint64_t> all_counters(const DeviceCounters& c) {
  return {c.rx_frames,         c.rx_malformed,       c.rx_bad_icrc,      c.rx_not_roce,        c.rx_unknown_qp,
          c.rx_bad_pkey,       c.rx_bad_qkey,        c.rx_wrong_transport, c.rx_qp_not_ready,  c.rx_duplicates,
          c.rx_out_of_sequence, c.tx_packets,        c.tx_retransmitted, c.naks_sent,          c.naks_received,
          c.rnr_naks_sent,     c.rnr_naks_received,  c.timeouts,         c.cq_overflows};
}

// The AETH NAKs b sent back to a.
std::vector<WireFrame> naks_from(const Pair& p, sim::NodeId from) {
  return p.wire.sent(from, [](const WireFrame& f) {
    return f.is(wire::Opcode::rc_acknowledge) && f.headers.aeth.kind() == wire::AethKind::nak;
  });
}

// A request of a's that b refuses for good: a's WQE completes with `a_status`, b NAKs it once with
// `nak`, both QPs end in ERR, and b's application hears of it through `b_event` (and nothing else).
// `nak_offset` is the refused packet's place in the message (the NAK carries its PSN).
void expect_refused(Pair& p, uint64_t wr_id, WcStatus a_status, wire::NakCode nak, EventType b_event,
                    uint32_t nak_offset = 0) {
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == wr_id);
  CHECK(sc[0].status == a_status);
  CHECK(sc[0].qp_num == p.qa);
  CHECK(p.state(p.a, p.qa) == QpState::err);
  CHECK(p.state(p.b, p.qb) == QpState::err);
  const auto naks = naks_from(p, p.b.node);
  REQUIRE(naks.size() == 1);
  CHECK(naks[0].headers.aeth.low_bits() == uint8_t(nak));
  CHECK(naks[0].psn() == p.config.a_psn + nak_offset);  // the PSN of the refused packet
  const auto events = p.b.device->take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].type == b_event);
  CHECK(events[0].object == p.qb);
  CHECK(p.b.device->counters().naks_sent == 1);
  CHECK(p.a.device->counters().naks_received == 1);
  // a's error is reported by its completion; an affiliated event is for errors no completion can report.
  CHECK(p.a.device->take_events().empty());
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Remote access errors (NAK code 2, IBV_WC_REM_ACCESS_ERR, b: IBV_EVENT_QP_ACCESS_ERR).

TEST_CASE("rc errors: WRITE with an unknown rkey", "[transport][rc][errors]") {
  Pair p;
  put(p.b.buffer(0), 0, std::vector<uint8_t>(4096, 0x5a));
  const uint32_t bad_rkey = p.b_key ^ 0x40;  // same slot, another key byte: not a current key
  SECTION("single packet") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base, bad_rkey)) == 0);
  }
  SECTION("multi-packet") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 4000, p.a_key, b_base, bad_rkey)) == 0);
  }
  SECTION("with immediate") {
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(70, b_base + 8192, 64, p.b_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write_with_imm, a_base, 100, p.a_key, b_base, bad_rkey)) == 0);
  }
  expect_refused(p, 1, WcStatus::rem_access_err, wire::NakCode::remote_access_error, EventType::qp_access_err);
  CHECK(slice(p.b.buffer(0), 0, 4096) == std::vector<uint8_t>(4096, 0x5a));  // nothing written
}

TEST_CASE("rc errors: WRITE and READ outside the region", "[transport][rc][errors]") {
  PairConfig c;
  c.buffer_size = 65536;
  Pair p(c);
  SECTION("WRITE past the end") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base + 65536 - 99, p.b_key)) == 0);
  }
  SECTION("WRITE before the start") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base - 8, p.b_key)) == 0);
  }
  SECTION("WRITE longer than the region") {
    const uint32_t key = p.a.add_buffer(131072, Pair::all_access, 0x40000000);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, 0x40000000, 65537, key, b_base, p.b_key)) == 0);
  }
  SECTION("READ past the end") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 100, p.a_key, b_base + 65536 - 99, p.b_key)) == 0);
  }
  SECTION("READ before the start") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 100, p.a_key, b_base - 1, p.b_key)) == 0);
  }
  SECTION("atomic past the end") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key, b_base + 65536, p.b_key)) ==
            0);
  }
  expect_refused(p, 1, WcStatus::rem_access_err, wire::NakCode::remote_access_error, EventType::qp_access_err);
  // A READ that was refused returned no data.
  CHECK(p.wire.sent(p.b.node, [](const WireFrame& f) { return f.is_read_response(); }).empty());
}

TEST_CASE("rc errors: a region without the remote right, on a QP that grants it", "[transport][rc][errors]") {
  Pair p;  // the QPs allow remote write, read and atomics
  SECTION("WRITE to a region without REMOTE_WRITE") {
    const uint32_t key = p.b.add_buffer(4096, access_local_write | access_remote_read | access_remote_atomic,
                                        0x30000000);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, 0x30000000, key)) == 0);
  }
  SECTION("READ from a region without REMOTE_READ") {
    const uint32_t key = p.b.add_buffer(4096, access_local_write | access_remote_write, 0x30000000);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 100, p.a_key, 0x30000000, key)) == 0);
  }
  SECTION("atomic on a region without REMOTE_ATOMIC") {
    const uint32_t key = p.b.add_buffer(4096, access_local_write | access_remote_write | access_remote_read,
                                        0x30000000);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::atomic_cmp_and_swp, a_base, 8, p.a_key, 0x30000000, key)) == 0);
  }
  expect_refused(p, 1, WcStatus::rem_access_err, wire::NakCode::remote_access_error, EventType::qp_access_err);
}

TEST_CASE("rc errors: a re-registration keeps the keys unless the translation changes", "[transport][rc][errors]") {
  // As rxe and mlx5 (and rdma-core's test_mr): new access rights or a new PD keep the rkey a peer holds; a
  // new address range gets a new key byte, so that the old rkey cannot reach what the region now is.
  Pair p;
  std::vector<uint8_t> other(4096);
  const auto memory = [&] { return std::make_shared<HostMemory>(p.b.buffer(0).data(), p.b.buffer(0).size()); };
  uint32_t key = 0;
  REQUIRE(p.b.device->rereg_mr(p.b_key, p.b.pd, b_base, p.b.buffer(0).size(), Pair::all_access, memory(), 0, false,
                               key) == 0);
  CHECK(key == p.b_key);
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == WcStatus::success);
  REQUIRE(p.b.device->rereg_mr(p.b_key, p.b.pd, 0x30000000, other.size(), Pair::all_access,
                               std::make_shared<HostMemory>(other.data(), other.size()), 0, true, key) == 0);
  CHECK((key & ~0xffu) == (p.b_key & ~0xffu));  // the same slot
  CHECK(key != p.b_key);
  REQUIRE(p.post_a(rdma_wr(2, WrOpcode::rdma_write, a_base, 100, p.a_key, 0x30000000, p.b_key)) == 0);
  expect_refused(p, 2, WcStatus::rem_access_err, wire::NakCode::remote_access_error, EventType::qp_access_err,
                 1);  // the second WRITE's PSN
}

TEST_CASE("rc errors: a region of another protection domain than the QP's", "[transport][rc][errors]") {
  Pair p;
  uint32_t other_pd = 0;
  REQUIRE(p.b.device->alloc_pd(other_pd) == 0);
  REQUIRE(other_pd != p.b.pd);
  std::vector<uint8_t> memory(4096);
  uint32_t key = 0;
  REQUIRE(p.b.device->reg_mr(other_pd, 0x30000000, memory.size(), Pair::all_access,
                             std::make_shared<HostMemory>(memory.data(), memory.size()), 0, key) == 0);
  SECTION("WRITE") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 64, p.a_key, 0x30000000, key)) == 0);
  }
  SECTION("READ") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 64, p.a_key, 0x30000000, key)) == 0);
  }
  SECTION("atomic") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key, 0x30000000, key)) == 0);
  }
  expect_refused(p, 1, WcStatus::rem_access_err, wire::NakCode::remote_access_error, EventType::qp_access_err);
  CHECK(memory == std::vector<uint8_t>(4096, 0));
}

// ---------------------------------------------------------------------------------------------------------
// Invalid requests (NAK code 1, IBV_WC_REM_INV_REQ_ERR, b: IBV_EVENT_QP_REQ_ERR).

TEST_CASE("rc errors: an operation the responder QP does not allow", "[transport][rc][errors]") {
  PairConfig c;
  SECTION("WRITE without REMOTE_WRITE") {
    c.b.access = access_local_write | access_remote_read | access_remote_atomic;
    Pair p(c);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
    expect_refused(p, 1, WcStatus::rem_inv_req_err, wire::NakCode::invalid_request, EventType::qp_req_err);
  }
  SECTION("WRITE with immediate without REMOTE_WRITE") {
    c.b.access = access_local_write | access_remote_read | access_remote_atomic;
    Pair p(c);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(70, b_base, 64, p.b_key)) == 0);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write_with_imm, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
    expect_refused(p, 1, WcStatus::rem_inv_req_err, wire::NakCode::invalid_request, EventType::qp_req_err);
  }
  SECTION("READ without REMOTE_READ") {
    c.b.access = access_local_write | access_remote_write | access_remote_atomic;
    Pair p(c);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_read, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
    expect_refused(p, 1, WcStatus::rem_inv_req_err, wire::NakCode::invalid_request, EventType::qp_req_err);
  }
  SECTION("atomics without REMOTE_ATOMIC") {
    c.b.access = access_local_write | access_remote_write | access_remote_read;
    Pair p(c);
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key, b_base, p.b_key)) == 0);
    expect_refused(p, 1, WcStatus::rem_inv_req_err, wire::NakCode::invalid_request, EventType::qp_req_err);
    uint64_t value = 1;
    std::memcpy(&value, p.b.buffer(0).data(), 8);
    CHECK(value == 0);  // not executed
  }
}

TEST_CASE("rc errors: SEND longer than the receive buffer", "[transport][rc][errors]") {
  Pair p;
  uint32_t length = 0;
  SECTION("single packet") { length = 200; }
  SECTION("multi-packet, the third packet overflows") { length = 5000; }
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, length == 200 ? 100 : 3000, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base + 8192, 8192, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, length, p.a_key)) == 0);
  expect_refused(p, 1, WcStatus::rem_inv_req_err, wire::NakCode::invalid_request, EventType::qp_req_err,
                 length == 200 ? 0 : 2);
  // b: the receive being filled reports the local length error, the next one is flushed.
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].wr_id == 7);
  CHECK(rc[0].status == WcStatus::loc_len_err);
  CHECK(rc[0].qp_num == p.qb);
  CHECK(rc[1].wr_id == 8);
  CHECK(rc[1].status == WcStatus::wr_flush_err);
}

// ---------------------------------------------------------------------------------------------------------
// Errors the requester finds itself, and what follows an error.

TEST_CASE("rc errors: misaligned or short atomics are refused at post_send", "[transport][rc][errors]") {
  // device.cpp refuses them with EINVAL before anything is queued (rxe's validate_send_wr does the same
  // for a misaligned address and a length other than 8).
  Pair p;
  CHECK(p.post_a(rdma_wr(1, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key, b_base + 4, p.b_key)) == EINVAL);
  CHECK(p.post_a(rdma_wr(2, WrOpcode::atomic_cmp_and_swp, a_base, 8, p.a_key, b_base + 1, p.b_key)) == EINVAL);
  CHECK(p.post_a(rdma_wr(3, WrOpcode::atomic_fetch_and_add, a_base, 4, p.a_key, b_base, p.b_key)) == EINVAL);
  REQUIRE(p.run());
  CHECK(p.wire.frames.empty());
  CHECK(p.a.poll(p.a.send_cq).empty());
  CHECK(p.state(p.a, p.qa) == QpState::rts);
  // The QP is unharmed: an aligned atomic works.
  REQUIRE(p.post_a(rdma_wr(4, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key, b_base + 8, p.b_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 4);
  CHECK(sc[0].status == WcStatus::success);
}

TEST_CASE("rc errors: a bad lkey in a send SGE", "[transport][rc][errors]") {
  Pair p;
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 8192, p.b_key)) == 0);
  SendWr wr = send_wr(1, WrOpcode::send, a_base, 100, p.a_key);
  SECTION("unknown lkey") { wr.sg_list[0].lkey = p.a_key ^ 0x40; }
  SECTION("lkey of a region that does not hold the SGE") { wr.sg_list[0].addr = a_base - 64; }
  SECTION("the second SGE is bad") { wr.sg_list.push_back({a_base + 4096, 100, 0x00777701}); }
  SECTION("WRITE") {
    wr = rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key ^ 0x40, b_base, p.b_key);
  }
  REQUIRE(p.post_a(wr) == 0);
  REQUIRE(p.post_a(send_wr(2, WrOpcode::send, a_base, 100, p.a_key)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].wr_id == 1);
  CHECK(sc[0].status == WcStatus::loc_prot_err);
  CHECK(sc[1].wr_id == 2);
  CHECK(sc[1].status == WcStatus::wr_flush_err);
  CHECK(p.state(p.a, p.qa) == QpState::err);
  CHECK(p.a.device->take_events().empty());
  // Nothing left a: b never heard of it and is unaffected.
  CHECK(p.wire.sent(p.a.node).empty());
  CHECK(p.state(p.b, p.qb) == QpState::rts);
  CHECK(p.b.poll(p.b.recv_cq).empty());
}

TEST_CASE("rc errors: a local error behind messages in flight stops the requester there",
          "[transport][rc][errors]") {
  // rxe (rxe_requester's err path) stops the requester at the failed WQE; the WQEs before it still
  // complete normally, the failed one then reports its error and the rest is flushed. Nothing after
  // the failed WQE may reach the wire, even while ACKs for the earlier ones keep arriving.
  for (uint32_t packets : {1u, 100u, 150u, 196u, 250u, 300u}) {
    INFO("first message: " << packets << " packets");
    Pair p;
    sim::LinkProfile link;
    link.delay = 5000;
    link.bandwidth = 1'250'000'000;  // 10 Gb/s: ACKs come back while the message is still being sent
    p.net.set_default_profile(link);
    const uint32_t length = packets * 1024;
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 400000, p.b_key)) == 0);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(8, b_base + 400000, 400000, p.b_key)) == 0);
    REQUIRE(p.post_a(send_wr(1, WrOpcode::send, a_base, length, p.a_key)) == 0);
    SendWr bad = send_wr(2, WrOpcode::send, a_base, 100, p.a_key);
    bad.sg_list[0].lkey = p.a_key ^ 0x40;
    REQUIRE(p.post_a(bad) == 0);
    REQUIRE(p.post_a(send_wr(3, WrOpcode::send, a_base, 100, p.a_key)) == 0);
    REQUIRE(p.run());
    const auto sc = p.a.poll(p.a.send_cq);
    REQUIRE(sc.size() == 3);
    CHECK(sc[0].wr_id == 1);
    CHECK(sc[0].status == WcStatus::success);
    CHECK(sc[1].wr_id == 2);
    CHECK(sc[1].status == WcStatus::loc_prot_err);
    CHECK(sc[2].wr_id == 3);
    CHECK(sc[2].status == WcStatus::wr_flush_err);
    CHECK(p.state(p.a, p.qa) == QpState::err);
    // On the wire: the packets of WR 1 and nothing else.
    CHECK(p.wire.sent(p.a.node).size() == packets);
    CHECK(p.a.device->counters().tx_packets == packets);
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].wr_id == 7);
    CHECK(rc[0].status == WcStatus::success);
    CHECK(rc[0].byte_len == length);
    CHECK(p.state(p.b, p.qb) == QpState::rts);
  }
}

TEST_CASE("rc errors: after an error completion everything outstanding is flushed, signalled or not",
          "[transport][rc][errors]") {
  Pair p;
  REQUIRE(p.a.device->post_recv(p.qa, recv_wr(100, a_base + 8192, 64, p.a_key)) == 0);
  REQUIRE(p.a.device->post_recv(p.qa, recv_wr(101, a_base + 8192, 64, p.a_key)) == 0);
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base, p.b_key ^ 0x40)) == 0);
  REQUIRE(p.post_a(send_wr(2, WrOpcode::send, a_base, 100, p.a_key, false)) == 0);
  REQUIRE(p.post_a(rdma_wr(3, WrOpcode::rdma_read, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
  REQUIRE(p.post_a(rdma_wr(4, WrOpcode::rdma_write, a_base, 100, p.a_key, b_base, p.b_key, false)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 4);
  for (size_t i = 0; i < sc.size(); ++i) {
    CHECK(sc[i].wr_id == i + 1);
    CHECK(sc[i].qp_num == p.qa);
    CHECK(sc[i].status == (i == 0 ? WcStatus::rem_access_err : WcStatus::wr_flush_err));
  }
  const auto rc = p.a.poll(p.a.recv_cq);
  REQUIRE(rc.size() == 2);
  CHECK(rc[0].wr_id == 100);
  CHECK(rc[1].wr_id == 101);
  CHECK(rc[0].status == WcStatus::wr_flush_err);
  CHECK(rc[1].status == WcStatus::wr_flush_err);
  CHECK(p.state(p.a, p.qa) == QpState::err);
  CHECK(p.state(p.b, p.qb) == QpState::err);

  SECTION("posting to a QP in ERR completes at once with a flush error") {
    const size_t frames_before = p.wire.frames.size();
    REQUIRE(p.post_a(send_wr(5, WrOpcode::send, a_base, 100, p.a_key, false)) == 0);
    REQUIRE(p.post_a(rdma_wr(6, WrOpcode::rdma_read, a_base, 100, p.a_key, b_base, p.b_key)) == 0);
    REQUIRE(p.a.device->post_recv(p.qa, recv_wr(102, a_base, 64, p.a_key)) == 0);
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(200, b_base, 64, p.b_key)) == 0);
    const auto sc2 = p.a.poll(p.a.send_cq);
    REQUIRE(sc2.size() == 2);
    CHECK(sc2[0].wr_id == 5);
    CHECK(sc2[0].status == WcStatus::wr_flush_err);
    CHECK(sc2[1].wr_id == 6);
    CHECK(sc2[1].status == WcStatus::wr_flush_err);
    const auto rc2 = p.a.poll(p.a.recv_cq);
    REQUIRE(rc2.size() == 1);
    CHECK(rc2[0].wr_id == 102);
    CHECK(rc2[0].status == WcStatus::wr_flush_err);
    const auto rcb = p.b.poll(p.b.recv_cq);
    REQUIRE(rcb.size() == 1);
    CHECK(rcb[0].wr_id == 200);
    CHECK(rcb[0].status == WcStatus::wr_flush_err);
    REQUIRE(p.run());
    CHECK(p.wire.frames.size() == frames_before);  // and nothing goes out
  }
}

// ---------------------------------------------------------------------------------------------------------
// Frames a device drops before any QP sees them: one counter each, and nothing else changes.

namespace {

// A SEND ONLY from a's QP to b's, as a's device would send it next (b expects PSN config.a_psn).
wire::TransportHeaders send_only_to_b(const Pair& p, uint32_t dest_qp) {
  wire::TransportHeaders h;
  h.bth.opcode = uint8_t(wire::Opcode::rc_send_only);
  h.bth.dest_qp = dest_qp;
  h.bth.psn = p.config.a_psn;
  h.bth.ack_req = true;
  return h;
}

struct Injection {
  explicit Injection(Pair& pair) : p(pair) {
    REQUIRE(p.run());  // idle: the bring-up left the QPs scheduled once
    REQUIRE(p.b.device->post_recv(p.qb, recv_wr(7, b_base, 4096, p.b_key)) == 0);
    before = p.b.device->counters();
    rq_psn = p.query(p.b, p.qb).rq_psn;
  }
  void deliver(const std::vector<uint8_t>& frame) { p.b.device->receive(frame, p.net.now()); }
  // Only the given counters moved (by one each), and b neither completed, nor sent, nor changed state.
  void expect_only(std::initializer_list<uint64_t DeviceCounters::*> moved) {
    DeviceCounters want = before;
    for (auto field : moved) ++(want.*field);
    CHECK(all_counters(p.b.device->counters()) == all_counters(want));
    CHECK(p.b.poll(p.b.recv_cq).empty());
    CHECK(p.b.poll(p.b.send_cq).empty());
    CHECK(p.b.device->take_events().empty());
    CHECK_FALSE(p.b.device->has_pending_work());
    CHECK(p.b.device->next_deadline() == never);
    CHECK(p.query(p.b, p.qb).rq_psn == rq_psn);
    CHECK(p.state(p.b, p.qb) == QpState::rts);
    CHECK(p.wire.frames.empty());
  }

  Pair& p;
  DeviceCounters before;
  uint32_t rq_psn = 0;
};

}  // namespace

// Memory that fails every access, as the daemon's process_vm_* backend does once the page under the
// address is gone (unmapped by its process, or the process itself gone).
class UnreachableMemory final : public MemoryBackend {
 public:
  bool read(uint64_t, void*, size_t) override { return false; }
  bool write(uint64_t, const void*, size_t) override { return false; }
  bool compare_swap(uint64_t, uint64_t, uint64_t, uint64_t&) override { return false; }
  bool fetch_add(uint64_t, uint64_t, uint64_t&) override { return false; }
  bool atomic_store(uint64_t, uint64_t) override { return false; }
};

TEST_CASE("rc errors: memory that fails the responder's access: an on-demand region's is an access error",
          "[transport][rc][errors][odp]") {
  // On a pinned region the memory's owner is gone: the responder's own failure (remote operational
  // error, a fatal QP error). On an on-demand region the page the requester named could not be faulted
  // in: its access error, as rxe turns a failed ODP fault into an R_Key violation.
  const bool on_demand = GENERATE(false, true);
  Pair p;
  uint32_t key = 0;
  const uint32_t access = Pair::all_access | (on_demand ? uint32_t(access_on_demand) : 0u);
  REQUIRE(p.b.device->reg_mr(p.b.pd, 0x60000000, 1 << 16, access, std::make_shared<UnreachableMemory>(), 0, key) == 0);
  SECTION("RDMA WRITE") {
    REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 3000, p.a_key, 0x60000000 + 64, key)) == 0);
  }
  SECTION("FETCH_ADD") {
    auto fa = send_wr(1, WrOpcode::atomic_fetch_and_add, a_base, 8, p.a_key);
    fa.remote_addr = 0x60000000 + 64;
    fa.rkey = key;
    fa.compare_add = 5;
    REQUIRE(p.post_a(fa) == 0);
  }
  SECTION("ATOMIC WRITE") {
    SendWr aw;
    aw.wr_id = 1;
    aw.opcode = WrOpcode::atomic_write;
    aw.send_flags = send_signaled;
    aw.remote_addr = 0x60000000 + 64;
    aw.rkey = key;
    aw.compare_add = 5;
    REQUIRE(p.post_a(aw) == 0);
  }
  if (on_demand) {
    expect_refused(p, 1, WcStatus::rem_access_err, wire::NakCode::remote_access_error, EventType::qp_access_err);
  } else {
    expect_refused(p, 1, WcStatus::rem_op_err, wire::NakCode::remote_operational_error, EventType::qp_fatal);
  }
}

TEST_CASE("rc errors: a memory window over an on-demand region answers its faults as the region does",
          "[transport][rc][errors][odp]") {
  // The window's key reaches the same pages the same way; its access error must not turn into the
  // responder's own failure because the key that named them was a window's.
  Pair p;
  uint32_t key = 0;
  REQUIRE(p.b.device->reg_mr(p.b.pd, 0x60000000, 1 << 16, Pair::all_access | access_mw_bind | access_on_demand,
                             std::make_shared<UnreachableMemory>(), 0, key) == 0);
  uint32_t mw_rkey = 0;
  REQUIRE(p.b.device->alloc_mw(p.b.pd, MwType::type1, mw_rkey) == 0);
  const uint32_t window_rkey = (mw_rkey & ~0xffu) | 0x42;
  SendWr bind;
  bind.wr_id = 0xb1;
  bind.opcode = WrOpcode::bind_mw;
  bind.send_flags = send_signaled;
  bind.bind = {mw_rkey >> 8, window_rkey, key, 0x60000000, 4096, access_remote_write};
  REQUIRE(p.post_b(bind) == 0);
  REQUIRE(p.run());
  const auto bound = p.b.poll(p.b.send_cq);
  REQUIRE(bound.size() == 1);
  REQUIRE(bound[0].status == WcStatus::success);
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 100, p.a_key, 0x60000000, window_rkey)) == 0);
  expect_refused(p, 1, WcStatus::rem_access_err, wire::NakCode::remote_access_error, EventType::qp_access_err);
}

TEST_CASE("rc errors: a P_Key that does not match is dropped and counted", "[transport][rc][errors]") {
  Pair p;
  Injection in(p);
  auto h = send_only_to_b(p, p.qb);
  const std::vector<uint8_t> payload(64, 0xab);
  h.bth.pkey = 0x1234;
  in.deliver(roce_frame(p.a.address, p.b.address, h, payload));
  CHECK(p.b.device->counters().rx_bad_pkey == 1);
  in.expect_only({&DeviceCounters::rx_frames, &DeviceCounters::rx_bad_pkey});

  SECTION("the limited-member form of the port's full-member P_Key matches") {
    h.bth.pkey = 0x7fff;
    in.deliver(roce_frame(p.a.address, p.b.address, h, payload));
    CHECK(p.b.device->counters().rx_bad_pkey == 1);
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].status == WcStatus::success);
    CHECK(rc[0].byte_len == 64);
  }
}

TEST_CASE("rc errors: a packet for an unknown QP is dropped and counted", "[transport][rc][errors]") {
  Pair p;
  Injection in(p);
  in.deliver(roce_frame(p.a.address, p.b.address, send_only_to_b(p, 0x777), std::vector<uint8_t>(16, 1)));
  CHECK(p.b.device->counters().rx_unknown_qp == 1);
  in.expect_only({&DeviceCounters::rx_frames, &DeviceCounters::rx_unknown_qp});
}

TEST_CASE("rc errors: a frame with a bad ICRC is dropped and counted", "[transport][rc][errors]") {
  Pair p;
  Injection in(p);
  auto frame = roce_frame(p.a.address, p.b.address, send_only_to_b(p, p.qb), std::vector<uint8_t>(64, 1));
  SECTION("payload bit flipped") { frame[frame.size() - 10] ^= 0x04; }
  SECTION("ICRC byte changed") { frame.back() ^= 0x80; }
  SECTION("BTH destination QP changed") { frame[14 + 20 + 8 + 7] ^= 0x01; }
  in.deliver(frame);
  CHECK(p.b.device->counters().rx_bad_icrc == 1);
  in.expect_only({&DeviceCounters::rx_frames, &DeviceCounters::rx_bad_icrc});
}

TEST_CASE("rc errors: a truncated frame is dropped as malformed", "[transport][rc][errors]") {
  Pair p;
  Injection in(p);
  auto frame = roce_frame(p.a.address, p.b.address, send_only_to_b(p, p.qb), std::vector<uint8_t>(64, 1));
  SECTION("ICRC cut off") { frame.resize(frame.size() - 4); }
  SECTION("cut in the payload") { frame.resize(frame.size() - 30); }
  SECTION("cut in the BTH") { frame.resize(14 + 20 + 8 + 6); }
  in.deliver(frame);
  CHECK(p.b.device->counters().rx_malformed == 1);
  in.expect_only({&DeviceCounters::rx_frames, &DeviceCounters::rx_malformed});
}

TEST_CASE("rc errors: QPs before RTS refuse sends and drop what arrives", "[transport][rc][errors]") {
  Pair p;
  const uint32_t q = p.b.create_qp(QpType::rc);
  QpAttr attr;
  CHECK(p.post(p.b, q, send_wr(1, WrOpcode::send, b_base, 10, p.b_key)) == EINVAL);  // RESET
  CHECK(p.b.device->post_recv(q, recv_wr(1, b_base, 64, p.b_key)) == EINVAL);       // RESET
  auto h = send_only_to_b(p, q);
  p.b.device->receive(roce_frame(p.a.address, p.b.address, h, std::vector<uint8_t>(8, 1)), p.net.now());
  CHECK(p.b.device->counters().rx_qp_not_ready == 1);

  attr.qp_state = QpState::init;
  attr.qp_access_flags = Pair::all_access;
  REQUIRE(p.b.device->modify_qp(q, attr, attr_state | attr_pkey_index | attr_port | attr_access_flags, 0) == 0);
  CHECK(p.post(p.b, q, send_wr(2, WrOpcode::send, b_base, 10, p.b_key)) == EINVAL);
  CHECK(p.b.device->post_recv(q, recv_wr(2, b_base, 64, p.b_key)) == 0);  // receives may be posted in INIT
  p.b.device->receive(roce_frame(p.a.address, p.b.address, h, std::vector<uint8_t>(8, 1)), p.net.now());
  CHECK(p.b.device->counters().rx_qp_not_ready == 2);

  attr.qp_state = QpState::rtr;
  attr.path_mtu = Mtu::mtu_1024;
  attr.dest_qp_num = p.qa;
  attr.rq_psn = p.config.a_psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 1;
  attr.ah_attr.dgid = p.a.address;
  REQUIRE(p.b.device->modify_qp(q, attr,
                                attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                    attr_max_dest_rd_atomic | attr_min_rnr_timer,
                                0) == 0);
  CHECK(p.post(p.b, q, send_wr(3, WrOpcode::send, b_base, 10, p.b_key)) == EINVAL);
  // An ACK is a response: a QP in RTR has no requester yet, so it is not ready for it.
  wire::TransportHeaders ack;
  ack.bth.opcode = uint8_t(wire::Opcode::rc_acknowledge);
  ack.bth.dest_qp = q;
  ack.bth.psn = 0;
  ack.aeth = wire::Aeth::ack(0);
  p.b.device->receive(roce_frame(p.a.address, p.b.address, ack), p.net.now());
  CHECK(p.b.device->counters().rx_qp_not_ready == 3);
  // ... but it receives requests.
  p.b.device->receive(roce_frame(p.a.address, p.b.address, h, std::vector<uint8_t>(8, 1)), p.net.now());
  CHECK(p.b.device->counters().rx_qp_not_ready == 3);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].wr_id == 2);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(p.b.poll(p.b.send_cq).empty());
  CHECK(p.b.device->counters().rx_unknown_qp == 0);
}
