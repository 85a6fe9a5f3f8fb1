// ATOMIC WRITE (IBTA 1.5 Annex A19, IBV_WR_ATOMIC_WRITE): one packet with a RETH and 8 bytes, placed at
// once at an aligned address of a region with remote write, and answered by an empty READ RESPONSE ONLY,
// as rxe answers it. A repeated request is answered again and never placed again.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;

SendWr atomic_write(uint64_t id, uint64_t remote_addr, uint32_t rkey, uint64_t bytes) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::atomic_write;
  wr.send_flags = send_signaled;
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  wr.compare_add = bytes;
  return wr;
}

uint64_t word_at(const std::vector<uint8_t>& buffer, size_t offset) {
  uint64_t v = 0;
  std::memcpy(&v, buffer.data() + offset, 8);
  return v;
}

bool is_atomic_write(const WireFrame& f) { return f.is(wire::Opcode::rc_atomic_write); }

// The AETH NAKs `from` sent.
std::vector<WireFrame> naks_from(const Pair& p, sim::NodeId from) {
  return p.wire.sent(from, [](const WireFrame& f) {
    return f.is(wire::Opcode::rc_acknowledge) && f.headers.aeth.kind() == wire::AethKind::nak;
  });
}

}  // namespace

TEST_CASE("atomic write: 8 bytes placed as they were given, answered by an empty READ RESPONSE",
          "[transport][rc][atomic_write]") {
  Pair p;
  const std::vector<uint8_t> bytes = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  uint64_t value = 0;
  std::memcpy(&value, bytes.data(), 8);
  put(p.b.buffer(0), 4096, std::vector<uint8_t>(24, 0xee));
  REQUIRE(p.post_a(atomic_write(7, b_base + 4104, p.b_key, value)) == 0);
  REQUIRE(p.run());

  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].wr_id == 7);
  CHECK(sc[0].status == WcStatus::success);
  CHECK(sc[0].opcode == WcOpcode::atomic_write);
  CHECK(sc[0].byte_len == 8);
  // The bytes in the order given, and nothing around them touched.
  CHECK(slice(p.b.buffer(0), 4104, 8) == bytes);
  CHECK(slice(p.b.buffer(0), 4096, 8) == std::vector<uint8_t>(8, 0xee));
  CHECK(slice(p.b.buffer(0), 4112, 8) == std::vector<uint8_t>(8, 0xee));
  CHECK(p.b.poll(p.b.recv_cq).empty());  // nothing completes at the responder

  // On the wire: opcode 0x1D with a RETH for 8 bytes and the bytes, AckReq; one READ RESPONSE ONLY back
  // with no payload, an ACK syndrome and the request's PSN. Nothing else.
  const auto requests = p.wire.sent(p.a.node);
  REQUIRE(requests.size() == 1);
  REQUIRE(is_atomic_write(requests[0]));
  CHECK(requests[0].psn() == p.config.a_psn);
  CHECK(requests[0].headers.bth.ack_req);
  CHECK(requests[0].headers.reth.va == b_base + 4104);
  CHECK(requests[0].headers.reth.rkey == p.b_key);
  CHECK(requests[0].headers.reth.dma_length == 8);
  CHECK(requests[0].payload == bytes);
  const auto responses = p.wire.sent(p.b.node);
  REQUIRE(responses.size() == 1);
  CHECK(responses[0].is(wire::Opcode::rc_rdma_read_response_only));
  CHECK(responses[0].payload.empty());
  CHECK(responses[0].psn() == p.config.a_psn);
  CHECK(responses[0].headers.aeth.kind() == wire::AethKind::ack);
  CHECK(responses[0].headers.aeth.msn == 1);
}

TEST_CASE("atomic write: a flag written after the data it announces lands after it",
          "[transport][rc][atomic_write]") {
  // The use it is made for: data by RDMA WRITE, then a flag word by ATOMIC WRITE. The responder carries
  // requests out in PSN order, so once the flag is seen the data is there.
  Pair p;
  put(p.a.buffer(0), 0, pattern(20000, 3));
  REQUIRE(p.post_a(rdma_wr(1, WrOpcode::rdma_write, a_base, 20000, p.a_key, b_base + 65536, p.b_key)) == 0);
  REQUIRE(p.post_a(atomic_write(2, b_base + 8, p.b_key, 1)) == 0);
  bool data_complete_when_flag_seen = true, flag_seen = false;
  while (p.net.step()) {
    if (!flag_seen && word_at(p.b.buffer(0), 8) == 1) {
      flag_seen = true;
      data_complete_when_flag_seen = slice(p.b.buffer(0), 65536, 20000) == pattern(20000, 3);
    }
  }
  CHECK(flag_seen);
  CHECK(data_complete_when_flag_seen);
  expect_success(p.a, p.a.send_cq, 2);
}

TEST_CASE("atomic write: a lost response is asked for again and answered without placing the bytes again",
          "[transport][rc][atomic_write]") {
  PairConfig c;
  c.a.timeout = 10;  // 4 ms
  Pair p(c);
  // b's answer is lost.
  sim::LinkProfile down;
  down.blackhole = true;
  p.net.set_link_profile(p.b.node, p.a.node, down);
  REQUIRE(p.post_a(atomic_write(1, b_base + 64, p.b_key, 0x1111)) == 0);
  p.run_for(1'000'000);  // 1 ms: placed at b, answer dropped
  CHECK(word_at(p.b.buffer(0), 64) == 0x1111);
  // b's own CPU moves on; a repeated request must not put the old bytes back.
  const uint64_t later = 0x2222;
  std::memcpy(p.b.buffer(0).data() + 64, &later, 8);
  p.net.clear_link_profile(p.b.node, p.a.node);
  REQUIRE(p.run());

  CHECK(word_at(p.b.buffer(0), 64) == later);
  expect_success(p.a, p.a.send_cq, 1);
  CHECK(p.wire.sent(p.a.node, is_atomic_write).size() == 2);  // the first and the one after the timeout
  CHECK(p.b.device->counters().rx_duplicates == 1);
  const auto answers = p.wire.sent(p.b.node, [](const WireFrame& f) { return f.is_read_response(); });
  REQUIRE(answers.size() == 2);
  CHECK(answers[1].psn() == p.config.a_psn);
  CHECK(answers[1].payload.empty());
  CHECK(answers[1].headers.aeth.msn == 1);  // the saved answer: the repeat is not a new message
}

TEST_CASE("atomic write: an ACK beyond it means its answer was lost, and it is asked for again",
          "[transport][rc][atomic_write]") {
  // An ATOMIC WRITE is acknowledged only by its own READ RESPONSE: the ACK of a later SEND does not
  // complete it (as with READs and atomics, the missing response is an implicit NAK).
  Pair p;
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(9, b_base + 8192, 64, p.b_key)) == 0);
  REQUIRE(p.post_a(atomic_write(1, b_base + 64, p.b_key, 5)) == 0);
  REQUIRE(p.post_a(send_wr(2, WrOpcode::send, a_base, 16, p.a_key)) == 0);
  // Drop b's first READ RESPONSE only.
  bool dropped = false;
  while (!dropped && p.net.step()) {
    if (!p.wire.sent(p.b.node, [](const WireFrame& f) { return f.is_read_response(); }).empty()) {
      sim::LinkProfile down;
      down.blackhole = true;  // also drops what is in flight
      p.net.set_link_profile(p.b.node, p.a.node, down);
      p.net.clear_link_profile(p.b.node, p.a.node);
      dropped = true;
    }
  }
  REQUIRE(dropped);
  REQUIRE(p.run());
  expect_success(p.a, p.a.send_cq, 2);
  CHECK(word_at(p.b.buffer(0), 64) == 5);
  CHECK(p.b.poll(p.b.recv_cq).size() == 1);  // the SEND, once
}

TEST_CASE("atomic write: counts against max_rd_atomic, like READs and atomics", "[transport][rc][atomic_write]") {
  // The responder answers it from a responder resource, so the requester may not have more outstanding
  // than max_rd_atomic, or a repeat could find its resource reused.
  PairConfig c;
  c.a.max_rd_atomic = 1;
  Pair p(c);
  sim::LinkProfile link;
  link.delay = 10'000;
  p.net.set_default_profile(link);
  REQUIRE(p.post_a(atomic_write(1, b_base, p.b_key, 1)) == 0);
  REQUIRE(p.post_a(atomic_write(2, b_base + 8, p.b_key, 2)) == 0);
  REQUIRE(p.run());
  expect_success(p.a, p.a.send_cq, 2);
  const auto requests = p.wire.sent(p.a.node, is_atomic_write);
  const auto answers = p.wire.delivered(p.b.node, [](const WireFrame& f) { return f.is_read_response(); });
  REQUIRE(requests.size() == 2);
  REQUIRE(answers.size() == 2);
  CHECK(requests[1].time >= answers[0].time);
  CHECK(word_at(p.b.buffer(0), 0) == 1);
  CHECK(word_at(p.b.buffer(0), 8) == 2);
}

TEST_CASE("atomic write: what the requester refuses at post time", "[transport][rc][atomic_write]") {
  SECTION("an unaligned remote address") {
    Pair p;
    CHECK(p.post_a(atomic_write(1, b_base + 4, p.b_key, 1)) == EINVAL);
  }
  SECTION("UC, UD and XRC have no ATOMIC WRITE") {
    for (QpType type : {QpType::uc, QpType::ud}) {
      PairConfig c;
      c.type = type;
      Pair p(c);
      CHECK(p.post_a(atomic_write(1, b_base, p.b_key, 1)) == EINVAL);
    }
  }
}

TEST_CASE("atomic write: what the responder refuses", "[transport][rc][atomic_write]") {
  PairConfig c;
  uint64_t remote = b_base + 64;
  uint32_t rkey_override = 0;
  WcStatus status = WcStatus::rem_inv_req_err;
  wire::NakCode nak = wire::NakCode::invalid_request;
  SECTION("the QP does not allow remote writes") {
    c.b.access = access_local_write | access_remote_read | access_remote_atomic;
  }
  SECTION("no responder resources (max_dest_rd_atomic 0)") { c.b.max_rd_atomic = 0; }
  SECTION("an address outside the region") {
    remote = b_base + (1 << 20);  // the 8 bytes just past its end
    status = WcStatus::rem_access_err;
    nak = wire::NakCode::remote_access_error;
  }
  SECTION("a region without remote write") {
    rkey_override = 1;
    status = WcStatus::rem_access_err;
    nak = wire::NakCode::remote_access_error;
  }
  Pair p(c);
  uint32_t rkey = p.b_key;
  if (rkey_override) {
    REQUIRE(p.b.device->reg_mr(p.b.pd, 0x30000000, 4096, access_local_write | access_remote_read,
                               std::make_shared<HostMemory>(p.b.buffer(0).data(), 4096), 0, rkey) == 0);
    remote = 0x30000000 + 64;
  }
  const auto before = slice(p.b.buffer(0), 0, 4096);
  REQUIRE(p.post_a(atomic_write(1, remote, rkey, 0x55)) == 0);
  REQUIRE(p.run());
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 1);
  CHECK(sc[0].status == status);
  const auto naks = naks_from(p, p.b.node);
  REQUIRE(naks.size() == 1);
  CHECK(naks[0].headers.aeth.low_bits() == uint8_t(nak));
  CHECK(p.state(p.b, p.qb) == QpState::err);
  CHECK(slice(p.b.buffer(0), 0, 4096) == before);  // nothing placed
}

TEST_CASE("atomic write: hand-made requests the responder refuses as invalid", "[transport][rc][atomic_write]") {
  // What a requester of uroce's never sends, but another might: an unaligned address, a payload or a DMA
  // length other than 8. Each is an invalid request (rxe: MISALIGNED_ATOMIC, and its length check).
  struct Case {
    const char* name;
    uint64_t va;
    uint32_t dma_length;
    size_t payload;
  };
  const Case cases[] = {{"unaligned", b_base + 68, 8, 8}, {"payload of 4", b_base + 64, 8, 4},
                        {"payload of 16", b_base + 64, 8, 16}, {"DMA length 16", b_base + 64, 16, 8}};
  for (const Case& k : cases) {
    INFO(k.name);
    Pair p;
    wire::TransportHeaders h;
    h.bth.opcode = uint8_t(wire::Opcode::rc_atomic_write);
    h.bth.dest_qp = p.qb;
    h.bth.psn = p.config.a_psn;
    h.bth.ack_req = true;
    h.reth = {k.va, p.b_key, k.dma_length};
    const std::vector<uint8_t> payload(k.payload, 0x77);
    const auto frame = roce_frame(p.a.address, p.b.address, h, payload);
    const auto before = slice(p.b.buffer(0), 0, 256);
    p.b.device->receive(frame, p.net.now());
    REQUIRE(p.run());
    const auto naks = naks_from(p, p.b.node);
    REQUIRE(naks.size() == 1);
    CHECK(naks[0].headers.aeth.low_bits() == uint8_t(wire::NakCode::invalid_request));
    CHECK(p.state(p.b, p.qb) == QpState::err);
    CHECK(slice(p.b.buffer(0), 0, 256) == before);
  }
}
