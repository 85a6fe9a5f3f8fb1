// The shared-memory ring protocol from both ends: the client library's SendRing, RecvRing and
// CompletionRing against the daemon's RingView over the same memfd. The daemon side is driven by hand
// here (no QueueService), so that every index and byte the two sides exchange is visible.
#include <array>
#include <cstring>
#include <stdexcept>

#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using protocol::CompletionEntry;
using protocol::RecvEntry;
using protocol::RingView;
using protocol::SendEntry;
using protocol::WireSge;

SendEntry read_send(const RingView& v, uint32_t index) {
  SendEntry e;
  std::memcpy(&e, v.entry(index), sizeof e);
  return e;
}

// Starts both indexes just below the uint32_t wrap, before the client attaches (it reads them then), so
// that the free-running indexes wrap during the test.
void start_indexes_at(const protocol::SharedRegion& r, uint32_t index) {
  view_of(r).publish_producer(index);
  view_of(r).publish_consumer(index);
}

constexpr uint32_t near_wrap = 0xfffffff0u;

}  // namespace

TEST_CASE("send ring: many laps and the index wrap keep every entry in order", "[ring]") {
  const uint32_t entry = protocol::send_entry_size(2, 16);
  protocol::SharedRegion region = daemon_ring(4, entry);
  start_indexes_at(region, near_wrap);
  client::SendRing ring = client_send_ring(region, 2, 16);
  RingView daemon = view_of(region);
  uint32_t consumer = near_wrap;

  // 1000 laps of a 4-entry ring, posting 1 to 4 at a time, crossing the 2^32 index wrap early on.
  uint64_t next_id = 0, expected_id = 0;
  for (int lap = 0; lap < 1000; ++lap) {
    const int batch = 1 + lap % 4;
    for (int i = 0; i < batch; ++i) {
      const WireSge s = sge(0x1000 + next_id, uint32_t(next_id), uint32_t(next_id * 3));
      REQUIRE(ring.post(send_entry(next_id, verbs::WrOpcode::send), std::span(&s, 1), {}) == 0);
      ++next_id;
    }
    REQUIRE(daemon.readable(consumer) == uint32_t(batch));
    for (int i = 0; i < batch; ++i, ++consumer, ++expected_id) {
      const SendEntry e = read_send(daemon, consumer);
      REQUIRE(e.wr_id == expected_id);
      REQUIRE(e.num_sge == 1);
      WireSge got;
      std::memcpy(&got, daemon.entry(consumer) + sizeof(SendEntry), sizeof got);
      REQUIRE(got.addr == 0x1000 + expected_id);
      REQUIRE(got.length == uint32_t(expected_id));
      REQUIRE(got.lkey == uint32_t(expected_id * 3));
    }
    daemon.publish_consumer(consumer);
  }
  CHECK(daemon.load_producer() == near_wrap + uint32_t(next_id));  // wrapped past zero
  CHECK(daemon.load_producer() < near_wrap);
}

TEST_CASE("send ring: full is ENOMEM until the daemon consumes, then the freed slot is reused", "[ring]") {
  protocol::SharedRegion region = daemon_ring(8, protocol::send_entry_size(1, 0));
  client::SendRing ring = client_send_ring(region, 1, 0);
  RingView daemon = view_of(region);
  CHECK(daemon.readable(0) == 0);  // empty at creation

  for (uint64_t i = 0; i < 8; ++i) REQUIRE(ring.post(send_entry(i, verbs::WrOpcode::send), {}, {}) == 0);
  CHECK(ring.post(send_entry(8, verbs::WrOpcode::send), {}, {}) == ENOMEM);
  CHECK(daemon.readable(0) == 8);
  CHECK(read_send(daemon, 0).wr_id == 0);  // the refused post wrote nothing over the oldest entry

  daemon.publish_consumer(1);
  CHECK(ring.post(send_entry(8, verbs::WrOpcode::send), {}, {}) == 0);
  CHECK(read_send(daemon, 8).wr_id == 8);  // slot 0 again
  CHECK(ring.post(send_entry(9, verbs::WrOpcode::send), {}, {}) == ENOMEM);
}

TEST_CASE("send ring: too many SGEs or too much inline data is EINVAL and writes nothing", "[ring]") {
  protocol::SharedRegion region = daemon_ring(4, protocol::send_entry_size(2, 32));
  client::SendRing ring = client_send_ring(region, 2, 32);
  RingView daemon = view_of(region);
  const WireSge three[3] = {sge(1, 1, 1), sge(2, 2, 2), sge(3, 3, 3)};
  const std::vector<uint8_t> inline33(33, 0xab), inline32(32, 0xcd);

  CHECK(ring.post(send_entry(1, verbs::WrOpcode::send), three, {}) == EINVAL);
  CHECK(ring.post(send_entry(2, verbs::WrOpcode::send, verbs::send_inline), {}, inline33) == EINVAL);
  CHECK(daemon.load_producer() == 0);

  // The limits themselves are accepted; an inline post is judged by its data, not by its SGE list.
  CHECK(ring.post(send_entry(3, verbs::WrOpcode::send), std::span(three, 2), {}) == 0);
  CHECK(ring.post(send_entry(4, verbs::WrOpcode::send, verbs::send_inline), three, inline32) == 0);
  CHECK(daemon.load_producer() == 2);

  // A malformed request is refused as such even when the ring is also full (ibv_post_send checks the
  // request first).
  REQUIRE(ring.post(send_entry(5, verbs::WrOpcode::send), {}, {}) == 0);
  REQUIRE(ring.post(send_entry(6, verbs::WrOpcode::send), {}, {}) == 0);
  CHECK(ring.post(send_entry(7, verbs::WrOpcode::send), three, {}) == EINVAL);
  CHECK(ring.post(send_entry(7, verbs::WrOpcode::send), {}, {}) == ENOMEM);
}

TEST_CASE("send ring: entries decode field by field, with SGEs or inline data after the header", "[ring]") {
  protocol::SharedRegion region = daemon_ring(4, protocol::send_entry_size(3, 40));
  client::SendRing ring = client_send_ring(region, 3, 40);
  RingView daemon = view_of(region);

  SendEntry wr{};
  wr.wr_id = 0x0123456789abcdefull;
  wr.opcode = uint32_t(verbs::WrOpcode::atomic_cmp_and_swp);
  wr.send_flags = verbs::send_signaled | verbs::send_fence;
  wr.imm_data = 0xdeadbeef;
  wr.invalidate_rkey = 0x1111;
  wr.remote_addr = 0xfeedface00001000ull;
  wr.compare_add = 0xaaaabbbbccccddddull;
  wr.swap = 0x1234123412341234ull;
  wr.rkey = 0x2222;
  wr.ah = 7;
  wr.remote_qpn = 0x123456;
  wr.remote_qkey = 0x11111111;
  wr.num_sge = 99;        // the ring sets these from what is posted
  wr.inline_length = 99;
  const WireSge sges[3] = {sge(0xa000, 10, 0x31), sge(0xb000, 20, 0x32), sge(0xc000, 30, 0x33)};
  REQUIRE(ring.post(wr, sges, {}) == 0);

  const SendEntry e = read_send(daemon, 0);
  CHECK(e.wr_id == wr.wr_id);
  CHECK(e.opcode == wr.opcode);
  CHECK(e.send_flags == wr.send_flags);
  CHECK(e.imm_data == wr.imm_data);
  CHECK(e.invalidate_rkey == wr.invalidate_rkey);
  CHECK(e.remote_addr == wr.remote_addr);
  CHECK(e.compare_add == wr.compare_add);
  CHECK(e.swap == wr.swap);
  CHECK(e.rkey == wr.rkey);
  CHECK(e.ah == wr.ah);
  CHECK(e.remote_qpn == wr.remote_qpn);
  CHECK(e.remote_qkey == wr.remote_qkey);
  CHECK(e.num_sge == 3);
  CHECK(e.inline_length == 0);
  for (int i = 0; i < 3; ++i) {
    WireSge s;
    std::memcpy(&s, daemon.entry(0) + sizeof(SendEntry) + size_t(i) * sizeof(WireSge), sizeof s);
    CHECK(s.addr == sges[i].addr);
    CHECK(s.length == sges[i].length);
    CHECK(s.lkey == sges[i].lkey);
  }

  // Inline: the data is copied into the slot at post time, and num_sge is zero whatever was passed.
  std::vector<uint8_t> data(40);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(0x40 + i);
  REQUIRE(ring.post(send_entry(2, verbs::WrOpcode::send, verbs::send_inline), sges, data) == 0);
  std::fill(data.begin(), data.end(), 0);  // the application reuses its buffer at once
  const SendEntry in = read_send(daemon, 1);
  CHECK(in.num_sge == 0);
  CHECK(in.inline_length == 40);
  for (size_t i = 0; i < 40; ++i) CHECK(daemon.entry(1)[sizeof(SendEntry) + i] == uint8_t(0x40 + i));
}

TEST_CASE("receive ring: entries, full and EINVAL", "[ring]") {
  protocol::SharedRegion region = daemon_ring(2, protocol::recv_entry_size(2));
  client::RecvRing ring = client_recv_ring(region, 2);
  RingView daemon = view_of(region);
  const WireSge sges[3] = {sge(0x5000, 64, 9), sge(0x6000, 128, 10), sge(0x7000, 1, 11)};

  CHECK(ring.post(1, sges) == EINVAL);
  REQUIRE(ring.post(0xabcdef, std::span(sges, 2)) == 0);
  REQUIRE(ring.post(2, {}) == 0);
  CHECK(ring.post(3, {}) == ENOMEM);

  RecvEntry e;
  std::memcpy(&e, daemon.entry(0), sizeof e);
  CHECK(e.wr_id == 0xabcdef);
  CHECK(e.num_sge == 2);
  WireSge second;
  std::memcpy(&second, daemon.entry(0) + sizeof(RecvEntry) + sizeof(WireSge), sizeof second);
  CHECK(second.addr == 0x6000);
  CHECK(second.length == 128);
  CHECK(second.lkey == 10);
  std::memcpy(&e, daemon.entry(1), sizeof e);
  CHECK(e.wr_id == 2);
  CHECK(e.num_sge == 0);
}

TEST_CASE("completion ring: the client polls what the daemon publishes, over many laps", "[ring]") {
  protocol::SharedRegion region = daemon_ring(8, protocol::completion_entry_size());
  start_indexes_at(region, near_wrap);
  client::CompletionRing cq = client_completion_ring(region);
  RingView daemon = view_of(region);
  uint32_t producer = near_wrap;

  CompletionEntry none[1];
  CHECK(cq.poll(none) == 0);  // empty

  uint64_t next = 0, expected = 0;
  for (int lap = 0; lap < 500; ++lap) {
    const uint32_t batch = uint32_t(1 + lap % 8);
    REQUIRE(daemon.writable(producer) == 8);
    for (uint32_t i = 0; i < batch; ++i, ++next) {
      CompletionEntry e{};
      e.wr_id = next;
      e.status = uint32_t(next % 22);
      e.opcode = next % 2 ? 128u : 1u;
      e.vendor_err = uint32_t(next * 5);
      e.byte_len = uint32_t(next * 7);
      e.imm_data = uint32_t(~next);
      e.qp_num = 0x11 + uint32_t(next % 3);
      e.src_qp = uint32_t(next * 11);
      e.wc_flags = uint32_t(next % 4);
      e.pkey_index = uint16_t(next);
      e.sl = uint8_t(next % 16);
      std::memcpy(daemon.entry(producer++), &e, sizeof e);
    }
    daemon.publish_producer(producer);
    // Polled with a smaller array than what is ready: the rest waits for the next poll.
    std::vector<CompletionEntry> got;
    CompletionEntry out[3];
    for (int n; (n = cq.poll(out)) > 0;) got.insert(got.end(), out, out + n);
    REQUIRE(got.size() == batch);
    for (const CompletionEntry& e : got) {
      REQUIRE(e.wr_id == expected);
      REQUIRE(e.status == uint32_t(expected % 22));
      REQUIRE(e.opcode == (expected % 2 ? 128u : 1u));
      REQUIRE(e.vendor_err == uint32_t(expected * 5));
      REQUIRE(e.byte_len == uint32_t(expected * 7));
      REQUIRE(e.imm_data == uint32_t(~expected));
      REQUIRE(e.qp_num == 0x11 + uint32_t(expected % 3));
      REQUIRE(e.src_qp == uint32_t(expected * 11));
      REQUIRE(e.wc_flags == uint32_t(expected % 4));
      REQUIRE(e.pkey_index == uint16_t(expected));
      REQUIRE(e.sl == uint8_t(expected % 16));
      ++expected;
    }
    REQUIRE(daemon.load_consumer() == producer);  // the client published how far it read
  }
}

// The engine writes each field itself (engine::write_completion_entry): one it forgot would reach the
// client as whatever the slot held from the lap before.
TEST_CASE("completion ring: an entry carries every field of the transport's completion", "[ring]") {
  verbs::WorkCompletion wc;
  wc.wr_id = 7;
  wc.status = verbs::WcStatus::tm_err;
  wc.opcode = verbs::WcOpcode::tm_recv;
  wc.vendor_err = 3;
  wc.byte_len = 4096;
  wc.imm_data = 0xdeadbeef;
  wc.qp_num = 0x11;
  wc.src_qp = 0x22;
  wc.wc_flags = verbs::wc_tm_match | verbs::wc_tm_data_valid;
  wc.pkey_index = 1;
  wc.sl = 5;
  wc.timestamp = 42;
  wc.tm_tag = 0x0123456789abcdefull;  // a tag matching receive's ibv_wc_tm_info
  wc.tm_priv = 0xfeedf00d;
  alignas(8) std::array<uint8_t, sizeof(CompletionEntry)> slot;
  slot.fill(0xa5);
  engine::write_completion_entry(slot.data(), wc);
  CompletionEntry e;
  std::memcpy(&e, slot.data(), sizeof e);
  CHECK(e.wr_id == 7);
  CHECK(e.status == uint32_t(verbs::WcStatus::tm_err));
  CHECK(e.opcode == uint32_t(verbs::WcOpcode::tm_recv));
  CHECK(e.vendor_err == 3);
  CHECK(e.byte_len == 4096);
  CHECK(e.imm_data == 0xdeadbeef);
  CHECK(e.qp_num == 0x11);
  CHECK(e.src_qp == 0x22);
  CHECK(e.wc_flags == uint32_t(verbs::wc_tm_match | verbs::wc_tm_data_valid));
  CHECK(e.pkey_index == 1);
  CHECK(e.sl == 5);
  CHECK(e.reserved == 0);
  CHECK(e.timestamp == 42);
  CHECK(e.tm_tag == 0x0123456789abcdefull);
  CHECK(e.tm_priv == 0xfeedf00d);
}

TEST_CASE("a scribbled producer index never makes a reader read more than the capacity", "[ring]") {
  SECTION("the client reading a completion ring") {
    protocol::SharedRegion region = daemon_ring(4, protocol::completion_entry_size());
    client::CompletionRing cq = client_completion_ring(region);
    RingView daemon = view_of(region);
    CompletionEntry out[16];

    daemon.publish_producer(4 + 1);  // producer - consumer > capacity: nonsense, nothing is read
    CHECK(cq.poll(out) == 0);
    daemon.publish_producer(0xffffffffu);  // "minus one": the same
    CHECK(cq.poll(out) == 0);
    CHECK(daemon.load_consumer() == 0);  // and the client did not move

    daemon.publish_producer(4);  // a full ring is fine: exactly the capacity
    CHECK(cq.poll(out) == 4);
    CHECK(cq.poll(out) == 0);
  }
  SECTION("the daemon reading a send ring") {
    protocol::SharedRegion region = daemon_ring(4, protocol::send_entry_size(1, 0));
    RingView daemon = view_of(region);
    for (uint32_t scribble : {5u, 100u, 0x80000000u, 0xffffffffu}) {
      daemon.publish_producer(scribble);  // a client wrote it straight into the header
      CHECK(daemon.readable(0) == 0);
    }
    daemon.publish_producer(4);
    CHECK(daemon.readable(0) == 4);
  }
  SECTION("a scribbled consumer index makes the writer see a full ring, never more room") {
    protocol::SharedRegion region = daemon_ring(4, protocol::send_entry_size(1, 0));
    client::SendRing ring = client_send_ring(region, 1, 0);
    RingView daemon = view_of(region);
    daemon.publish_consumer(7);  // ahead of the producer (0)
    CHECK(ring.post(send_entry(1, verbs::WrOpcode::send), {}, {}) == ENOMEM);
    CHECK(daemon.load_producer() == 0);
  }
}

TEST_CASE("the client checks the layout the daemon describes before using a ring", "[ring]") {
  protocol::SharedRegion region = daemon_ring(8, protocol::completion_entry_size());
  const size_t bytes = protocol::ring_bytes(8, protocol::completion_entry_size());
  // A capacity that disagrees with the header.
  CHECK_THROWS_AS(client::CompletionRing(region.dup_fd(), bytes, 16), std::runtime_error);
  // A header that is not a ring's.
  reinterpret_cast<protocol::RingHeader*>(region.data())->magic = 0;
  CHECK_THROWS_AS(client::CompletionRing(region.dup_fd(), bytes, 8), std::runtime_error);
  // An fd smaller than the size the daemon announced (the daemon cannot make the client read past it).
  protocol::SharedRegion small = daemon_ring(1, 8);
  CHECK_THROWS_AS(client::SendRing(small.dup_fd(), 1 << 20, 1, 8, 0, 0), std::runtime_error);
}

TEST_CASE("arming a completion ring writes the arm word the daemon reads", "[ring]") {
  protocol::SharedRegion region = daemon_ring(4, protocol::completion_entry_size());
  client::CompletionRing cq = client_completion_ring(region);
  RingView daemon = view_of(region);
  CHECK(daemon.arm().load() == uint32_t(protocol::CqArm::none));
  cq.arm(false);
  CHECK(daemon.arm().load() == uint32_t(protocol::CqArm::next));
  cq.arm(true);
  CHECK(daemon.arm().load() == uint32_t(protocol::CqArm::solicited));
}

}  // namespace uroce::test::service
