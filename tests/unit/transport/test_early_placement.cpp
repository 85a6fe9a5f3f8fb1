// Early placement (transport/qp/early_placement.cpp): the MIDDLE and LAST packets of an RC or UC SEND or
// RDMA WRITE, and RC READ responses, are copied into place while their ICRC is checked. What must hold:
// the bytes and completions are the same as with check-then-copy; a corrupted packet is still dropped and
// counted with the QP's state untouched, and its retransmission repairs the bytes it wrote; nothing
// outside the message's next bytes is ever written; and packets the rules exclude (FIRST/ONLY requests,
// an unexpected PSN, memory without a direct view, a packet spanning two SGEs) take the usual path.
#include "tests/unit/transport/transport_fixture.hpp"

using namespace uroce::test;
namespace sim = uroce::sim;
namespace wire = uroce::wire;

namespace {

constexpr uint64_t a_base = Pair::a_base, b_base = Pair::b_base;

// Memory that can only be reached by copies, like the daemon's process_vm_readv/writev backend.
class CopyOnlyMemory final : public MemoryBackend {
 public:
  CopyOnlyMemory(uint8_t* base, size_t size) : inner_(base, size) {}
  bool read(uint64_t offset, void* dst, size_t len) override { return inner_.read(offset, dst, len); }
  bool write(uint64_t offset, const void* src, size_t len) override { return inner_.write(offset, src, len); }
  bool compare_swap(uint64_t offset, uint64_t compare, uint64_t swap, uint64_t& original) override {
    return inner_.compare_swap(offset, compare, swap, original);
  }
  bool fetch_add(uint64_t offset, uint64_t add, uint64_t& original) override {
    return inner_.fetch_add(offset, add, original);
  }
  bool atomic_store(uint64_t offset, uint64_t value) override { return inner_.atomic_store(offset, value); }

 private:
  HostMemory inner_;
};

// Hand-made RC/UC request packets from a to b, as a's requester would send them.
struct Requests {
  Pair& p;
  uint32_t psn;
  bool uc = false;

  std::vector<uint8_t> frame(wire::Opcode op, std::span<const uint8_t> payload, const wire::Reth* reth = nullptr) {
    wire::TransportHeaders h;
    h.bth.opcode = uint8_t(op);
    h.bth.dest_qp = p.qb;
    h.bth.psn = psn++ & wire::psn_mask;
    h.bth.ack_req = !uc;
    if (reth != nullptr) h.reth = *reth;
    return roce_frame(p.a.address, p.b.address, h, payload);
  }
  void deliver(const std::vector<uint8_t>& f) { p.b.device->receive(f, p.net.now()); }
};

// The payload's first byte in a frame built by roce_frame (IPv4, no options): a RETH adds 16 bytes.
constexpr size_t payload_offset = 14 + 20 + 8 + 12;

uint64_t placed(const Pair& p) { return p.b.device->counters().rx_placed_early; }
uint64_t bad_icrc(const Pair& p) { return p.b.device->counters().rx_bad_icrc; }

}  // namespace

TEST_CASE("early placement: multi-packet WRITEs, SENDs and READs arrive byte-identical through it",
          "[transport][early_placement]") {
  PairConfig c;
  const auto [type, mtu, mtu_bytes] = GENERATE(std::tuple{QpType::rc, Mtu::mtu_1024, 1024u},
                                               std::tuple{QpType::rc, Mtu::mtu_4096, 4096u},
                                               std::tuple{QpType::uc, Mtu::mtu_256, 256u});
  c.type = type;
  c.a.mtu = c.b.mtu = mtu;
  Pair p(c);
  const uint32_t len = 17 * mtu_bytes;  // FIRST, 15 MIDDLE, LAST
  put(p.a.buffer(0), 0, pattern(len, 3));
  put(p.a.buffer(0), len, pattern(len, 4));
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(1, b_base + 0x80000, len, p.b_key)) == 0);

  REQUIRE(p.post_a(rdma_wr(10, WrOpcode::rdma_write, a_base, len, p.a_key, b_base + 0x1000, p.b_key)) == 0);
  REQUIRE(p.post_a(send_wr(11, WrOpcode::send, a_base + len, len, p.a_key)) == 0);
  REQUIRE(p.run());

  CHECK(slice(p.b.buffer(0), 0x1000, len) == pattern(len, 3));
  CHECK(slice(p.b.buffer(0), 0x80000, len) == pattern(len, 4));
  // The bytes around the two messages were not touched.
  CHECK(slice(p.b.buffer(0), 0x1000 - 64, 64) == std::vector<uint8_t>(64, 0));
  CHECK(slice(p.b.buffer(0), 0x1000 + len, 64) == std::vector<uint8_t>(64, 0));
  CHECK(slice(p.b.buffer(0), 0x80000 + len, 64) == std::vector<uint8_t>(64, 0));
  // Every MIDDLE and LAST packet of both messages went through early placement.
  CHECK(placed(p) == 2 * 16);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == 1);
  CHECK(rc[0].status == WcStatus::success);
  CHECK(rc[0].byte_len == len);
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == 2);
  CHECK(sc[0].status == WcStatus::success);
  CHECK(sc[1].status == WcStatus::success);

  if (type == QpType::rc) {
    // An RDMA READ back from b: every response packet, the FIRST and ONLY included, lands in a's buffer
    // through early placement (its place comes from a's own work request, never from the packet).
    const uint64_t a_placed_before = p.a.device->counters().rx_placed_early;
    REQUIRE(p.post_a(rdma_wr(12, WrOpcode::rdma_read, a_base + 0x80000, len, p.a_key, b_base + 0x1000, p.b_key)) == 0);
    REQUIRE(p.run());
    CHECK(slice(p.a.buffer(0), 0x80000, len) == pattern(len, 3));
    CHECK(slice(p.a.buffer(0), 0x80000 + len, 64) == std::vector<uint8_t>(64, 0));
    CHECK(p.a.device->counters().rx_placed_early - a_placed_before == 17);
    const auto rsc = p.a.poll(p.a.send_cq);
    REQUIRE(rsc.size() == 1);
    CHECK(rsc[0].status == WcStatus::success);
    CHECK(rsc[0].byte_len == len);
  }
}

TEST_CASE("early placement: a corrupted MIDDLE packet is dropped with the QP untouched, and its retransmission "
          "repairs the bytes",
          "[transport][early_placement]") {
  PairConfig c;
  c.type = GENERATE(QpType::rc, QpType::uc);
  c.a.mtu = c.b.mtu = Mtu::mtu_1024;
  Pair p(c);
  REQUIRE(p.run());
  Requests r{p, c.a_psn, c.type == QpType::uc};
  const bool uc = c.type == QpType::uc;
  const auto op = [&](wire::Opcode rc_op, wire::Opcode uc_op) { return uc ? uc_op : rc_op; };
  const std::vector<uint8_t> data = pattern(3 * 1024, 9);
  const auto part = [&](int i) { return std::span<const uint8_t>(data).subspan(size_t(i) * 1024, 1024); };
  wire::Reth reth{b_base + 0x2000, p.b_key, uint32_t(data.size())};

  r.deliver(r.frame(op(wire::Opcode::rc_rdma_write_first, wire::Opcode::uc_rdma_write_first), part(0), &reth));
  const uint32_t middle_psn = r.psn;
  auto middle = r.frame(op(wire::Opcode::rc_rdma_write_middle, wire::Opcode::uc_rdma_write_middle), part(1));
  auto bad = middle;
  SECTION("a payload bit") { bad[payload_offset + 500] ^= 0x10; }
  SECTION("the ICRC") { bad.back() ^= 0x01; }
  SECTION("the UDP source port, which the parser accepts and the ICRC covers") { bad[14 + 20 + 1] ^= 0x01; }
  r.deliver(bad);
  CHECK(bad_icrc(p) == 1);
  CHECK(placed(p) == 0);
  CHECK(p.query(p.b, p.qb).rq_psn == middle_psn);  // not advanced: the next packet must be this one again
  CHECK(p.wire.frames.empty());                     // no ACK, no NAK for a frame that failed its ICRC
  // What the bad frame wrote lies in the message's next 1024 bytes and nowhere else.
  CHECK(slice(p.b.buffer(0), 0x2000 + 2048, 1024 + 64) == std::vector<uint8_t>(1024 + 64, 0));

  r.deliver(middle);  // the retransmission (RC) or the sender's copy (UC: here, a clean one)
  CHECK(placed(p) == 1);
  r.deliver(r.frame(op(wire::Opcode::rc_rdma_write_last, wire::Opcode::uc_rdma_write_last), part(2)));
  CHECK(placed(p) == 2);
  CHECK(bad_icrc(p) == 1);
  CHECK(slice(p.b.buffer(0), 0x2000, data.size()) == data);
  CHECK(slice(p.b.buffer(0), 0x2000 + data.size(), 64) == std::vector<uint8_t>(64, 0));
  CHECK(p.state(p.b, p.qb) == QpState::rts);
}

TEST_CASE("early placement: packets outside its rules are checked first, as before",
          "[transport][early_placement]") {
  PairConfig c;
  c.a.mtu = c.b.mtu = Mtu::mtu_1024;
  Pair p(c);
  REQUIRE(p.run());
  Requests r{p, c.a_psn};
  const std::vector<uint8_t> data = pattern(3 * 1024, 5);
  const auto part = [&](int i) { return std::span<const uint8_t>(data).subspan(size_t(i) * 1024, 1024); };

  SECTION("a FIRST packet, whose RETH names the address, is never placed before its check") {
    wire::Reth reth{b_base + 0x2000, p.b_key, uint32_t(data.size())};
    auto first = r.frame(wire::Opcode::rc_rdma_write_first, part(0), &reth);
    first[payload_offset + 16 + 7] ^= 0x01;
    r.deliver(first);
    CHECK(bad_icrc(p) == 1);
    CHECK(slice(p.b.buffer(0), 0x2000, 1024) == std::vector<uint8_t>(1024, 0));
  }
  SECTION("a MIDDLE packet ahead of the expected PSN is neither placed nor NAKed when corrupted") {
    wire::Reth reth{b_base + 0x2000, p.b_key, uint32_t(data.size())};
    r.deliver(r.frame(wire::Opcode::rc_rdma_write_first, part(0), &reth));
    ++r.psn;  // a gap
    auto middle = r.frame(wire::Opcode::rc_rdma_write_middle, part(1));
    middle[payload_offset + 7] ^= 0x01;
    r.deliver(middle);
    CHECK(bad_icrc(p) == 1);
    CHECK(placed(p) == 0);
    CHECK(p.b.device->counters().rx_out_of_sequence == 0);
    CHECK(slice(p.b.buffer(0), 0x2000 + 1024, 2048) == std::vector<uint8_t>(2048, 0));
  }
  SECTION("memory that cannot be written in place") {
    std::vector<uint8_t> other(1 << 16);
    uint32_t key = 0;
    REQUIRE(p.b.device->reg_mr(p.b.pd, 0x50000000, other.size(), Pair::all_access,
                               std::make_shared<CopyOnlyMemory>(other.data(), other.size()), 0, key) == 0);
    wire::Reth reth{0x50000000, key, uint32_t(data.size())};
    r.deliver(r.frame(wire::Opcode::rc_rdma_write_first, part(0), &reth));
    auto corrupt = r.frame(wire::Opcode::rc_rdma_write_middle, part(1));
    corrupt[payload_offset + 7] ^= 0x01;
    r.deliver(corrupt);
    CHECK(bad_icrc(p) == 1);
    CHECK(std::vector<uint8_t>(other.begin() + 1024, other.begin() + 2048) == std::vector<uint8_t>(1024, 0));
    --r.psn;
    r.deliver(r.frame(wire::Opcode::rc_rdma_write_middle, part(1)));
    r.deliver(r.frame(wire::Opcode::rc_rdma_write_last, part(2)));
    CHECK(placed(p) == 0);
    CHECK(std::vector<uint8_t>(other.begin(), other.begin() + long(data.size())) == data);
  }
  SECTION("a SEND packet that spans two SGEs of the receive") {
    RecvWr wr = recv_wr(1, b_base + 0x10000, 1024 + 512, p.b_key);
    wr.sg_list.push_back({b_base + 0x20000, 4096, p.b_key});
    REQUIRE(p.b.device->post_recv(p.qb, wr) == 0);
    r.deliver(r.frame(wire::Opcode::rc_send_first, part(0)));
    r.deliver(r.frame(wire::Opcode::rc_send_middle, part(1)));  // 512 bytes in each SGE: the usual path
    r.deliver(r.frame(wire::Opcode::rc_send_last, part(2)));    // inside the second SGE: placed
    CHECK(placed(p) == 1);
    CHECK(bad_icrc(p) == 0);
    CHECK(slice(p.b.buffer(0), 0x10000, 1536) == std::vector<uint8_t>(data.begin(), data.begin() + 1536));
    CHECK(slice(p.b.buffer(0), 0x20000, 1536) == std::vector<uint8_t>(data.begin() + 1536, data.end()));
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].byte_len == data.size());
  }
}

TEST_CASE("early placement: 64 KiB WRITEs, SENDs and READs over a network that corrupts, loses and reorders",
          "[transport][early_placement]") {
  // Every corrupted copy that early placement took is caught by its ICRC, and retransmission repairs what
  // it wrote: each message arrives byte-identical, with no completion in error.
  const uint64_t seed = GENERATE(range(1, 9));
  PairConfig c;
  c.seed = seed;
  c.a.mtu = c.b.mtu = Mtu::mtu_1024;
  c.a.timeout = c.b.timeout = 8;
  Pair p(c);
  sim::LinkProfile profile;
  profile.corrupt = 0.05;
  profile.loss = 0.01;
  profile.delay = 2000;
  profile.jitter = 3000;  // reorders
  p.net.set_default_profile(profile);
  constexpr uint32_t len = 65536;
  constexpr int messages = 6;
  for (int i = 0; i < messages; ++i) put(p.a.buffer(0), size_t(i) * len, pattern(len, uint8_t(seed * 16 + i)));
  for (int i = 0; i < messages; ++i) {
    const uint64_t from = a_base + uint64_t(i) * len;
    if (i % 3 == 2) {  // a READ of b's bytes, which were put there in advance, into a's buffer
      put(p.b.buffer(0), size_t(i) * len, pattern(len, uint8_t(seed * 16 + i)));
      std::fill_n(p.a.buffer(0).begin() + long(i) * len, len, uint8_t(0));
      REQUIRE(p.post_a(rdma_wr(uint64_t(i), WrOpcode::rdma_read, from, len, p.a_key, b_base + uint64_t(i) * len,
                               p.b_key)) == 0);
    } else if (i % 3 == 0) {
      REQUIRE(p.post_a(rdma_wr(uint64_t(i), WrOpcode::rdma_write, from, len, p.a_key, b_base + uint64_t(i) * len,
                               p.b_key)) == 0);
    } else {
      REQUIRE(p.b.device->post_recv(p.qb, recv_wr(uint64_t(i), b_base + uint64_t(i) * len, len, p.b_key)) == 0);
      REQUIRE(p.post_a(send_wr(uint64_t(i), WrOpcode::send, from, len, p.a_key)) == 0);
    }
  }
  REQUIRE(p.run(60'000'000'000ull));
  for (int i = 0; i < messages; ++i) {
    INFO("message " << i);
    CHECK(slice(p.b.buffer(0), size_t(i) * len, len) == pattern(len, uint8_t(seed * 16 + i)));
    CHECK(slice(p.a.buffer(0), size_t(i) * len, len) == pattern(len, uint8_t(seed * 16 + i)));
  }
  const auto sc = p.a.poll(p.a.send_cq);
  REQUIRE(sc.size() == messages);
  for (const auto& wc : sc) CHECK(wc.status == WcStatus::success);
  const auto rc = p.b.poll(p.b.recv_cq);
  REQUIRE(rc.size() == messages / 3);
  for (const auto& wc : rc) CHECK(wc.status == WcStatus::success);
  CHECK(placed(p) > 0);
  CHECK(bad_icrc(p) > 0);
  CHECK(p.a.device->counters().rx_placed_early > 0);  // READ responses
  CHECK(p.a.device->counters().rx_bad_icrc > 0);
}

TEST_CASE("early placement: a UD datagram lands behind the GRH of the next receive; a corrupted one leaves "
          "that receive posted",
          "[transport][early_placement]") {
  PairConfig c;
  c.type = QpType::ud;
  Pair p(c);
  REQUIRE(p.run());
  constexpr uint32_t grh = 40;
  const std::vector<uint8_t> data = pattern(1000, 21);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(1, b_base, 2048, p.b_key)) == 0);
  REQUIRE(p.b.device->post_recv(p.qb, recv_wr(2, b_base + 4096, 2048, p.b_key)) == 0);
  wire::TransportHeaders h;
  h.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
  h.bth.dest_qp = p.qb;
  h.deth.qkey = c.b.qkey;
  h.deth.src_qp = p.qa;
  const auto datagram = roce_frame(p.a.address, p.b.address, h, data);

  auto bad = datagram;
  bad[payload_offset + 8 + 100] ^= 0x20;  // after BTH and DETH
  p.b.device->receive(bad, p.net.now());
  CHECK(bad_icrc(p) == 1);
  CHECK(placed(p) == 0);
  CHECK(p.b.poll(p.b.recv_cq).empty());
  // What it wrote lies behind the GRH area of the first receive, and nowhere else.
  CHECK(slice(p.b.buffer(0), 0, grh) == std::vector<uint8_t>(grh, 0));
  CHECK(slice(p.b.buffer(0), grh + data.size(), 4096 - grh - data.size()) ==
        std::vector<uint8_t>(4096 - grh - data.size(), 0));

  SECTION("the next datagram takes that receive, which holds its bytes alone") {
    p.b.device->receive(datagram, p.net.now());
    CHECK(placed(p) == 1);
    const auto rc = p.b.poll(p.b.recv_cq);
    REQUIRE(rc.size() == 1);
    CHECK(rc[0].wr_id == 1);
    CHECK(rc[0].status == WcStatus::success);
    CHECK(rc[0].byte_len == grh + data.size());
    CHECK(slice(p.b.buffer(0), grh, data.size()) == data);
    CHECK(p.b.buffer(0)[20] == 0x45);  // the GRH area holds the IPv4 header
  }
  SECTION("a datagram with the wrong Q_Key is neither placed nor delivered") {
    h.deth.qkey = c.b.qkey ^ 1;
    p.b.device->receive(roce_frame(p.a.address, p.b.address, h, data), p.net.now());
    CHECK(placed(p) == 0);
    CHECK(p.b.device->counters().rx_bad_qkey == 1);
    CHECK(p.b.poll(p.b.recv_cq).empty());
  }
}
