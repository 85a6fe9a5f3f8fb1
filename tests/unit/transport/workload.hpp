// A random but reproducible RC workload between two hosts, and the checks that it was carried out
// exactly: every message once, in order, byte for byte, with the right completions on both sides.
//
// Each operation works on its own slice of memory, so the expected final contents do not depend on
// timing and can be checked exactly after the run.
#pragma once

#include <random>

#include "tests/unit/transport/transport_fixture.hpp"

namespace uroce::test {

struct WorkloadOp {
  WrOpcode opcode;
  uint32_t length = 0;
  uint64_t local = 0;     // offset in the requester's buffer
  uint64_t remote = 0;    // offset in the responder's buffer (RDMA and atomics)
  uint64_t receive = 0;   // offset of the receive buffer it consumes (SEND, WRITE with immediate)
  bool signaled = true;
  uint32_t imm = 0;
  uint64_t operand = 0, swap = 0, initial = 0;  // atomics (ATOMIC WRITE: operand is the word it places)
  bool is_atomic() const {
    return opcode == WrOpcode::atomic_fetch_and_add || opcode == WrOpcode::atomic_cmp_and_swp ||
           opcode == WrOpcode::atomic_write;
  }
};

// Memory map (both buffers are `buffer_size` bytes):
//   requester: [0, 1M) message sources, [1M, 2M) READ destinations, [2M, 2M+64K) atomic results
//   responder: [0, 1M) receive buffers, [1M, 2M) WRITE targets, [2M, 3M) READ sources, [3M, +64K) atomic words
inline constexpr size_t buffer_size = 4 << 20;
inline constexpr uint64_t mib = 1 << 20;

class Workload {
 public:
  Workload(uint64_t seed, size_t count, uint32_t max_length) : rng_(seed) {
    uint64_t src = 0, rcv = 0, wr = mib, rd_dst = mib, rd_src = 2 * mib, atom = 0;
    for (size_t i = 0; i < count; ++i) {
      WorkloadOp op;
      const unsigned kind = unsigned(rng_() % 9);
      op.length = pick_length(max_length);
      op.signaled = rng_() % 4 != 0;
      op.imm = uint32_t(rng_());
      switch (kind) {
        case 0:
        case 1: op.opcode = WrOpcode::send; break;
        case 2: op.opcode = WrOpcode::send_with_imm; break;
        case 3: op.opcode = WrOpcode::rdma_write; break;
        case 4: op.opcode = WrOpcode::rdma_write_with_imm; break;
        case 5: op.opcode = WrOpcode::rdma_read; break;
        case 6: op.opcode = WrOpcode::atomic_fetch_and_add; break;
        case 7: op.opcode = WrOpcode::atomic_cmp_and_swp; break;
        default: op.opcode = WrOpcode::atomic_write; break;
      }
      if (op.is_atomic()) {
        op.length = 8;
        op.local = 2 * mib + atom * 8;
        op.remote = 3 * mib + atom * 8;
        ++atom;
        op.initial = rng_();
        op.operand = rng_() % 2 ? op.initial : rng_();  // CMP_SWAP: sometimes equal, sometimes not
        op.swap = rng_();
      } else if (op.opcode == WrOpcode::rdma_read) {
        op.local = rd_dst;
        op.remote = rd_src;
        rd_dst += op.length;
        rd_src += op.length;
      } else {
        op.local = src;
        src += op.length;
        if (op.opcode == WrOpcode::rdma_write || op.opcode == WrOpcode::rdma_write_with_imm) {
          op.remote = wr;
          wr += op.length;
        }
        if (op.opcode == WrOpcode::send || op.opcode == WrOpcode::send_with_imm) {
          op.receive = rcv;
          rcv += op.length;
        }
      }
      ops_.push_back(op);
    }
    used_source_ = src;
    used_read_source_ = rd_src;
  }

  const std::vector<WorkloadOp>& ops() const { return ops_; }

  // Fills sources, READ sources and atomic words with random bytes.
  void prepare(Host& requester, Host& responder) {
    randomize(requester.buffer(0), 0, used_source_);
    randomize(responder.buffer(0), 2 * mib, used_read_source_);
    for (const WorkloadOp& op : ops_) {
      if (op.is_atomic()) {
        std::memcpy(responder.buffer(0).data() + op.remote, &op.initial, 8);
      }
    }
  }

  // Posts the receives the responder needs (one per SEND or WRITE with immediate), then every request.
  void post(Host& requester, uint32_t qa, uint32_t a_key, uint64_t a_base, Host& responder, uint32_t qb,
            uint32_t b_key, uint64_t b_base) {
    uint64_t id = 0;
    for (const WorkloadOp& op : ops_) {
      ++id;
      if (op.opcode == WrOpcode::send || op.opcode == WrOpcode::send_with_imm ||
          op.opcode == WrOpcode::rdma_write_with_imm) {
        REQUIRE(responder.device->post_recv(qb, recv_wr(id, b_base + op.receive, op.length, b_key)) == 0);
      }
    }
    id = 0;
    for (const WorkloadOp& op : ops_) {
      SendWr wr = send_wr(++id, op.opcode, a_base + op.local, op.length, a_key, op.signaled);
      if (op.opcode == WrOpcode::atomic_write) wr.sg_list.clear();  // its 8 bytes travel in compare_add
      wr.remote_addr = b_base + op.remote;
      wr.rkey = b_key;
      wr.imm_data = op.imm;
      wr.compare_add = op.operand;
      wr.swap = op.swap;
      REQUIRE(requester.device->post_send(qa, wr, 0) == 0);
    }
  }

  // Everything the workload promises, checked after the network went idle.
  void check(Host& requester, Host& responder) const {
    const auto sc = requester.poll(requester.send_cq);
    std::vector<uint64_t> expected_send;
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (ops_[i].signaled) expected_send.push_back(i + 1);
    }
    std::vector<uint64_t> got_send;
    for (const WorkCompletion& wc : sc) {
      CHECK(wc.status == WcStatus::success);
      got_send.push_back(wc.wr_id);
    }
    CHECK(got_send == expected_send);  // each signalled WR exactly once, in posting order

    const auto rc = responder.poll(responder.recv_cq);
    std::vector<uint64_t> expected_recv, got_recv;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const WrOpcode o = ops_[i].opcode;
      if (o == WrOpcode::send || o == WrOpcode::send_with_imm || o == WrOpcode::rdma_write_with_imm) {
        expected_recv.push_back(i + 1);
      }
    }
    for (const WorkCompletion& wc : rc) {
      got_recv.push_back(wc.wr_id);
      REQUIRE(wc.wr_id >= 1);
      REQUIRE(wc.wr_id <= ops_.size());
      const WorkloadOp& op = ops_[wc.wr_id - 1];
      CHECK(wc.status == WcStatus::success);
      CHECK(wc.byte_len == op.length);
      const bool imm = op.opcode != WrOpcode::send;
      CHECK(((wc.wc_flags & wc_with_imm) != 0) == imm);
      if (imm) CHECK(wc.imm_data == op.imm);
      CHECK(wc.opcode == (op.opcode == WrOpcode::rdma_write_with_imm ? WcOpcode::recv_rdma_with_imm : WcOpcode::recv));
    }
    CHECK(got_recv == expected_recv);  // each message received exactly once, in order

    const auto& a = requester.buffer(0);
    const auto& b = responder.buffer(0);
    for (const WorkloadOp& op : ops_) {
      switch (op.opcode) {
        case WrOpcode::send:
        case WrOpcode::send_with_imm:
          CHECK(std::equal(a.begin() + long(op.local), a.begin() + long(op.local + op.length), b.begin() + long(op.receive)));
          break;
        case WrOpcode::rdma_write:
        case WrOpcode::rdma_write_with_imm:
          CHECK(std::equal(a.begin() + long(op.local), a.begin() + long(op.local + op.length), b.begin() + long(op.remote)));
          break;
        case WrOpcode::rdma_read:
          CHECK(std::equal(b.begin() + long(op.remote), b.begin() + long(op.remote + op.length), a.begin() + long(op.local)));
          break;
        case WrOpcode::atomic_fetch_and_add:
        case WrOpcode::atomic_cmp_and_swp: {
          uint64_t original = 0, final_value = 0;
          std::memcpy(&original, a.data() + op.local, 8);
          std::memcpy(&final_value, b.data() + op.remote, 8);
          CHECK(original == op.initial);  // executed once: a second execution would show a changed value
          const uint64_t expect = op.opcode == WrOpcode::atomic_fetch_and_add
                                      ? op.initial + op.operand
                                      : (op.initial == op.operand ? op.swap : op.initial);
          CHECK(final_value == expect);
          break;
        }
        case WrOpcode::atomic_write: {
          uint64_t final_value = 0;
          std::memcpy(&final_value, b.data() + op.remote, 8);
          CHECK(final_value == op.operand);
          break;
        }
        default:
          break;
      }
    }
    CHECK(requester.poll(requester.send_cq).empty());
    CHECK(responder.poll(responder.recv_cq).empty());
  }

 private:
  uint32_t pick_length(uint32_t max_length) {
    switch (rng_() % 6) {
      case 0: return 0;
      case 1: return uint32_t(rng_() % 16);
      case 2: return uint32_t(rng_() % 300);
      default: return uint32_t(rng_() % (max_length + 1));
    }
  }

  std::mt19937_64 rng_;  // the engine is fully specified by the standard: same sequence everywhere
  std::vector<WorkloadOp> ops_;
  uint64_t used_source_ = 0, used_read_source_ = 0;

  // Random bytes in [from, to), a 64-bit word at a time.
  void randomize(std::vector<uint8_t>& b, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; i += 8) {
      const uint64_t v = rng_();
      std::memcpy(b.data() + i, &v, std::min<uint64_t>(8, to - i));
    }
  }
};

}  // namespace uroce::test
