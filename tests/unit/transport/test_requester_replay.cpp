// Ground truth, the other way round: the work requests behind rxe's requests (from the captures) are
// posted to a uroce requester, rxe's answers are fed back to it, and every request uroce sends must be
// the one rxe sent, field by field (opcode, PSN, AckReq, SE, payload bytes, RETH, ImmDt, IETH, AtomicETH);
// every work request must complete successfully, READs with the bytes rxe's responder returned and
// atomics with the original values it reported.
//
// Clean captures only: in the lossy one, which packets rxe retransmitted depends on when NAKs and timeouts
// happened, which a replay cannot reproduce (the responder direction of that capture is checked in
// test_capture_replay.cpp).
#include <map>
#include <set>

#include "tests/unit/support/capture_file.hpp"
#include "tests/unit/transport/transport_fixture.hpp"
#include "transport/wire/frame.hpp"

using namespace uroce::test;
namespace wire = uroce::wire;

namespace {

struct Sent {
  wire::TransportHeaders h;
  std::vector<uint8_t> payload;
};

struct Recorder final : PacketSink {
  std::vector<Sent> sent;
  void transmit(const OutPacket& p) override {
    sent.push_back({p.headers, std::vector<uint8_t>(p.payload.begin(), p.payload.end())});
  }
};

struct Message {
  SendWr wr;
  std::vector<uint8_t> data;  // what the requester sends (SEND, WRITE)
};

// A requester's QP in a capture: (requester IP, responder IP, responder QPN) and its own QPN.
struct Flow {
  wire::IpAddress requester, responder;
  uint32_t responder_qpn = 0, requester_qpn = 0, first_psn = 0;
};

bool is_request_of(const wire::Frame& f, const Flow& k) {
  return f.roce.info->is_request && f.src_ip() == k.requester && f.dst_ip() == k.responder &&
         f.roce.bth().dest_qp == k.responder_qpn;
}
bool is_answer_to(const wire::Frame& f, const Flow& k) {
  return !f.roce.info->is_request && f.src_ip() == k.responder && f.dst_ip() == k.requester &&
         f.roce.bth().dest_qp == k.requester_qpn;
}

std::vector<wire::Frame> rc_frames(const Capture& c) {
  std::vector<wire::Frame> out;
  for (const auto& bytes : c.frames) {
    wire::Frame f;
    if (wire::parse_frame(bytes, f) == wire::ParseError::none && f.is_roce() &&
        f.roce.info->transport == wire::Transport::rc) {
      out.push_back(f);
    }
  }
  return out;
}

std::vector<Flow> flows_of(const std::vector<wire::Frame>& frames) {
  std::vector<Flow> out;
  for (const wire::Frame& f : frames) {
    if (!f.roce.info->is_request) continue;
    const bool known = std::any_of(out.begin(), out.end(), [&](const Flow& k) { return is_request_of(f, k); });
    if (!known) out.push_back({f.src_ip(), f.dst_ip(), f.roce.bth().dest_qp, 0, f.roce.bth().psn});
  }
  for (Flow& k : out) {  // the requester's QPN: where answers to this flow's PSNs go
    std::set<uint32_t> psns;
    for (const wire::Frame& f : frames) {
      if (is_request_of(f, k)) psns.insert(f.roce.bth().psn);
      if (!f.roce.info->is_request && f.src_ip() == k.responder && f.dst_ip() == k.requester &&
          psns.contains(f.roce.bth().psn)) {
        k.requester_qpn = f.roce.bth().dest_qp;
        break;
      }
    }
  }
  return out;
}

// The work requests behind a flow's requests.
std::vector<Message> messages_of(const std::vector<wire::Frame>& frames, const Flow& k) {
  std::vector<Message> out;
  for (const wire::Frame& f : frames) {
    if (!is_request_of(f, k)) continue;
    const wire::OpcodeInfo& info = *f.roce.info;
    const auto& h = f.roce.headers;
    if (info.position == wire::Position::first || info.position == wire::Position::only) {
      Message m;
      switch (info.operation) {
        case wire::Operation::send:
          m.wr.opcode = info.has(wire::hdr_immdt) ? WrOpcode::send_with_imm
                        : info.has(wire::hdr_ieth) ? WrOpcode::send_with_inv
                                                   : WrOpcode::send;
          break;
        case wire::Operation::rdma_write:
          m.wr.opcode = info.has(wire::hdr_immdt) ? WrOpcode::rdma_write_with_imm : WrOpcode::rdma_write;
          m.wr.remote_addr = h.reth.va;
          m.wr.rkey = h.reth.rkey;
          break;
        case wire::Operation::rdma_read_request:
          m.wr.opcode = WrOpcode::rdma_read;
          m.wr.remote_addr = h.reth.va;
          m.wr.rkey = h.reth.rkey;
          m.data.resize(h.reth.dma_length);
          break;
        case wire::Operation::compare_swap:
        case wire::Operation::fetch_add: {
          const bool cas = info.operation == wire::Operation::compare_swap;
          m.wr.opcode = cas ? WrOpcode::atomic_cmp_and_swp : WrOpcode::atomic_fetch_and_add;
          m.wr.remote_addr = h.atomic_eth.va;
          m.wr.rkey = h.atomic_eth.rkey;
          m.wr.compare_add = cas ? h.atomic_eth.compare : h.atomic_eth.swap_add;
          m.wr.swap = h.atomic_eth.swap_add;
          m.data.resize(8);
          break;
        }
        default:
          FAIL("unexpected request opcode " << wire::opcode_name(h.bth.opcode));
      }
      out.push_back(std::move(m));
    }
    Message& m = out.back();
    if (info.operation == wire::Operation::send || info.operation == wire::Operation::rdma_write) {
      m.data.insert(m.data.end(), f.roce.payload.begin(), f.roce.payload.end());
    }
    // A multi-packet message shows its immediate or invalidate only on its LAST packet.
    if (info.has(wire::hdr_immdt)) {
      m.wr.imm_data = h.immdt;
      if (m.wr.opcode == WrOpcode::send) m.wr.opcode = WrOpcode::send_with_imm;
      if (m.wr.opcode == WrOpcode::rdma_write) m.wr.opcode = WrOpcode::rdma_write_with_imm;
    }
    if (info.has(wire::hdr_ieth)) {
      m.wr.invalidate_rkey = h.ieth;
      m.wr.opcode = WrOpcode::send_with_inv;
    }
    if (h.bth.solicited) m.wr.send_flags |= send_solicited;
  }
  return out;
}

}  // namespace

TEST_CASE("requester replay: uroce's requester sends what rxe's sent, and completes on rxe's answers",
          "[transport][replay]") {
  uint64_t flows = 0, compared = 0;
  for (const Capture& c : captures()) {
    if (c.name.find("loss") != std::string::npos) continue;
    const auto frames = rc_frames(c);
    for (const Flow& k : flows_of(frames)) {
      INFO(c.name << ": " << wire::to_string(k.requester) << " QP 0x" << std::hex << k.requester_qpn << " -> QP 0x"
                  << k.responder_qpn << std::dec);
      auto messages = messages_of(frames, k);
      Recorder recorder;
      Device d(recorder);
      d.set_gids({k.requester});
      d.set_active_mtu(Mtu::mtu_1024);
      uint32_t pd = 0, cq = 0, qpn = 0, key = 0;
      REQUIRE(d.alloc_pd(pd) == 0);
      REQUIRE(d.create_cq(65536, cq) == 0);
      // Local memory: every message's data back to back.
      size_t total = 0;
      for (const Message& m : messages) total += m.data.size();
      std::vector<uint8_t> memory(std::max<size_t>(total, 8));
      const uint64_t base = 0x40000000;
      REQUIRE(d.reg_mr(pd, base, memory.size(), access_local_write,
                       std::make_shared<HostMemory>(memory.data(), memory.size()), 0, key) == 0);
      QpInitAttr init;
      init.pd = pd;
      init.send_cq = init.recv_cq = cq;
      init.cap = {uint32_t(messages.size() + 1), 16, 2, 2, 0};
      do {
        REQUIRE(d.create_qp(init, qpn) == 0);
      } while (qpn < k.requester_qpn);
      REQUIRE(qpn == k.requester_qpn);
      QpParams params;
      params.timeout = 0;  // no timers: the replay has no notion of time
      connect(d, qpn, QpType::rc, k.responder, k.responder_qpn, k.first_psn, 0, params);
      uint64_t offset = 0, id = 0;
      for (Message& m : messages) {
        std::copy(m.data.begin(), m.data.end(), memory.begin() + long(offset));
        m.wr.wr_id = ++id;
        m.wr.send_flags |= send_signaled;
        if (!m.data.empty()) m.wr.sg_list.push_back({base + offset, uint32_t(m.data.size()), key});
        offset += m.data.size();
        REQUIRE(d.post_send(qpn, m.wr, 0) == 0);
      }
      // Run the requester, then hand it rxe's answers in capture order, letting it send after each.
      d.run(0);
      std::vector<const wire::Frame*> theirs;
      for (const wire::Frame& f : frames) {
        if (is_request_of(f, k)) theirs.push_back(&f);
        if (is_answer_to(f, k)) {
          d.receive(f.bytes, 0);
          d.run(0);
        }
      }
      REQUIRE(recorder.sent.size() == theirs.size());
      for (size_t i = 0; i < theirs.size(); ++i) {
        const auto& mine = recorder.sent[i];
        const auto& h = theirs[i]->roce.headers;
        INFO("request " << i << ": rxe " << wire::opcode_name(h.bth.opcode) << " psn " << h.bth.psn);
        CHECK(mine.h.bth.opcode == h.bth.opcode);
        CHECK(mine.h.bth.psn == h.bth.psn);
        CHECK(mine.h.bth.ack_req == h.bth.ack_req);
        CHECK(mine.h.bth.solicited == h.bth.solicited);
        CHECK(mine.h.bth.dest_qp == h.bth.dest_qp);
        CHECK(std::equal(mine.payload.begin(), mine.payload.end(), theirs[i]->roce.payload.begin(),
                         theirs[i]->roce.payload.end()));
        const wire::OpcodeInfo& info = *theirs[i]->roce.info;
        if (info.has(wire::hdr_reth)) {
          CHECK(mine.h.reth.va == h.reth.va);
          CHECK(mine.h.reth.rkey == h.reth.rkey);
          CHECK(mine.h.reth.dma_length == h.reth.dma_length);
        }
        if (info.has(wire::hdr_immdt)) CHECK(mine.h.immdt == h.immdt);
        if (info.has(wire::hdr_ieth)) CHECK(mine.h.ieth == h.ieth);
        if (info.has(wire::hdr_atomic_eth)) {
          CHECK(mine.h.atomic_eth.va == h.atomic_eth.va);
          CHECK(mine.h.atomic_eth.rkey == h.atomic_eth.rkey);
          CHECK(mine.h.atomic_eth.swap_add == h.atomic_eth.swap_add);
          CHECK(mine.h.atomic_eth.compare == h.atomic_eth.compare);
        }
        ++compared;
      }
      // Every work request completed successfully, in order.
      std::vector<WorkCompletion> wc(messages.size() + 8);
      const int n = d.poll_cq(cq, wc);
      REQUIRE(n == int(messages.size()));
      for (int i = 0; i < n; ++i) {
        CHECK(wc[size_t(i)].wr_id == uint64_t(i + 1));
        CHECK(wc[size_t(i)].status == WcStatus::success);
      }
      // READ data and atomic results are what rxe's responder sent.
      offset = 0;
      std::vector<uint8_t> read_data;
      std::vector<uint64_t> originals;
      for (const wire::Frame& f : frames) {
        if (!is_answer_to(f, k)) continue;
        if (f.roce.info->operation == wire::Operation::rdma_read_response) {
          read_data.insert(read_data.end(), f.roce.payload.begin(), f.roce.payload.end());
        }
        if (f.roce.info->operation == wire::Operation::atomic_acknowledge) {
          originals.push_back(f.roce.headers.atomic_ack_eth.original);
        }
      }
      std::vector<uint8_t> my_reads;
      std::vector<uint64_t> my_originals;
      for (const Message& m : messages) {
        if (m.wr.opcode == WrOpcode::rdma_read) {
          my_reads.insert(my_reads.end(), memory.begin() + long(offset), memory.begin() + long(offset + m.data.size()));
        }
        if (m.wr.opcode == WrOpcode::atomic_cmp_and_swp || m.wr.opcode == WrOpcode::atomic_fetch_and_add) {
          uint64_t v = 0;
          std::memcpy(&v, memory.data() + offset, 8);
          my_originals.push_back(v);
        }
        offset += m.data.size();
      }
      CHECK(my_reads == read_data);
      CHECK(my_originals == originals);
      ++flows;
    }
  }
  WARN(flows << " requester flows, " << compared << " requests compared with rxe's");
  CHECK(flows >= 8);
}
