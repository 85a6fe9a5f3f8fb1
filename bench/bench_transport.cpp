// The transport benchmark: two Devices on one core, joined by an in-memory wire that carries real frames
// (built, ICRC'd, parsed and verified by the codec, as on a port), with and without loss. The clock the
// devices see is virtual and only jumps forward when nothing is in flight, so recovery timers work while
// the rate measured is wall-clock throughput of requester + responder + completer.
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>
#include <vector>

#include "bench/harness.hpp"
#include "transport/device.hpp"
#include "transport/outgoing_frame.hpp"
#include "transport/wire/build.hpp"
#include "transport/wire/frame.hpp"
#include "transport/wire/opcode.hpp"

namespace uroce::bench {

namespace {

using namespace uroce::transport;
using namespace uroce::verbs;
using Clock = std::chrono::steady_clock;

// Frames in flight from one device to the other, built exactly as a port would send them.
class Wire final : public PacketSink {
 public:
  Wire(wire::IpAddress address, double loss, uint64_t seed)
      : loss_threshold_(uint64_t(loss * 18446744073709551615.0)), state_(seed) {
    port_.src_ip = address;
  }

  void transmit(const OutPacket& p) override {
    const wire::FrameSpec s = frame_spec_for(p, port_);
    std::vector<uint8_t> frame = spare_.empty() ? std::vector<uint8_t>() : std::move(spare_.back());
    if (!spare_.empty()) spare_.pop_back();
    frame.resize(wire::frame_size(s));
    wire::build_frame(s, frame);
    ++sent;
    if (loss_threshold_ != 0 && next() < loss_threshold_) {
      ++lost;
      spare_.push_back(std::move(frame));
      return;
    }
    queue.push_back(std::move(frame));
  }

  void recycle(std::vector<uint8_t>&& frame) { spare_.push_back(std::move(frame)); }

  std::deque<std::vector<uint8_t>> queue;
  uint64_t sent = 0, lost = 0;

 private:
  uint64_t next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  PortAddressing port_;
  uint64_t loss_threshold_;
  uint64_t state_;
  std::vector<std::vector<uint8_t>> spare_;
};

struct Side {
  Side(double loss, uint64_t seed, wire::IpAddress address) : ip(address), wire(address, loss, seed), device(wire) {
    device.set_gids({ip});
    device.set_active_mtu(Mtu::mtu_4096);
    device.alloc_pd(pd);
    device.create_cq(8192, cq);
  }
  wire::IpAddress ip;
  Wire wire;
  Device device;
  uint32_t pd = 0, cq = 0, qpn = 0, key = 0;
  std::vector<uint8_t> memory;
};

struct Pair {
  Side a, b;
  Nanos now = 0;

  Pair(double loss, size_t memory_bytes)
      : a(loss, 1, wire::IpAddress::from_v4(0x0a000001)), b(loss, 2, wire::IpAddress::from_v4(0x0a000002)) {
    for (Side* s : {&a, &b}) {
      s->memory.assign(memory_bytes, 0x5a);
      const uint32_t all = access_local_write | access_remote_write | access_remote_read;
      s->device.reg_mr(s->pd, 0x10000000, memory_bytes, all,
                       std::make_shared<HostMemory>(s->memory.data(), memory_bytes), 0, s->key);
      QpInitAttr init;
      init.pd = s->pd;
      init.send_cq = init.recv_cq = s->cq;
      init.cap = {4096, 4096, 2, 2, 64};
      s->device.create_qp(init, s->qpn);
    }
    connect(a, b);
    connect(b, a);
  }

  static void connect(Side& s, Side& peer) {
    QpAttr q;
    q.qp_state = QpState::init;
    q.port_num = 1;
    q.qp_access_flags = access_local_write | access_remote_write | access_remote_read;
    s.device.modify_qp(s.qpn, q, attr_state | attr_pkey_index | attr_port | attr_access_flags, 0);
    q.qp_state = QpState::rtr;
    q.path_mtu = Mtu::mtu_4096;
    q.dest_qp_num = peer.qpn;
    q.rq_psn = 100;
    q.max_dest_rd_atomic = 16;
    q.min_rnr_timer = 1;
    q.ah_attr.dgid = peer.ip;
    s.device.modify_qp(s.qpn, q,
                       attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic |
                           attr_min_rnr_timer,
                       0);
    q.qp_state = QpState::rts;
    q.sq_psn = 100;
    q.timeout = 8;  // ~1 ms of virtual time
    q.retry_cnt = 7;
    q.rnr_retry = 7;
    q.max_rd_atomic = 16;
    s.device.modify_qp(s.qpn, q,
                       attr_state | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_sq_psn | attr_max_qp_rd_atomic,
                       0);
  }

  // Delivers what is in flight both ways and lets both devices work; jumps the virtual clock when idle.
  void step() {
    bool moved = false;
    for (auto [from, to] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      while (!from->wire.queue.empty()) {
        std::vector<uint8_t> f = std::move(from->wire.queue.front());
        from->wire.queue.pop_front();
        to->device.receive(f, now);
        from->wire.recycle(std::move(f));
        moved = true;
      }
    }
    for (Side* s : {&a, &b}) {
      if (s->device.has_pending_work()) moved = true;
      s->device.run(now);
    }
    if (!moved) {
      const Nanos t = std::min(a.device.next_deadline(), b.device.next_deadline());
      now = t == never ? now + 1000 : std::max(t, now + 1);
    }
  }
};

struct Rate {
  double messages_per_s = 0;
  double bytes_per_s = 0;
  double loss_seen = 0;
};

// A fixed amount of work instead of a fixed time: UROCE_BENCH_MESSAGES=N makes every case stop after N
// completed messages, so that `perf stat` compares the CPU time (or instructions and cycles, where the
// machine exposes them) of the same work.
uint64_t fixed_message_count() {
  const char* v = std::getenv("UROCE_BENCH_MESSAGES");
  return v == nullptr ? 0 : std::strtoull(v, nullptr, 10);
}

// Keeps `depth` messages of `size` bytes in flight from a to b for `seconds` (or, with
// UROCE_BENCH_MESSAGES, until that many have completed), counting completions.
Rate run(WrOpcode op, uint32_t size, double loss, double seconds, uint32_t depth) {
  const uint64_t fixed_messages = fixed_message_count();
  Pair p(loss, std::max<size_t>(size_t(size) * 2, 1 << 20));
  uint64_t posted = 0, completed = 0, received = 0;
  const auto post_recv = [&](uint64_t id) {
    RecvWr r;
    r.wr_id = id;
    r.sg_list.push_back({0x10000000, std::max<uint32_t>(size, 64), p.b.key});
    p.b.device.post_recv(p.b.qpn, r);
  };
  SendWr wr;
  wr.opcode = op;
  wr.send_flags = send_signaled;
  wr.sg_list.push_back({0x10000000, size, p.a.key});
  wr.remote_addr = 0x10000000 + size;
  wr.rkey = p.b.key;
  if (op == WrOpcode::send) {
    for (uint32_t i = 0; i < depth + 64; ++i) post_recv(i);
  }
  std::vector<WorkCompletion> wc(256);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  while (true) {
    while (posted - completed < depth) {
      wr.wr_id = posted++;
      p.a.device.post_send(p.a.qpn, wr, p.now);
    }
    p.step();
    for (int n; (n = p.a.device.poll_cq(p.a.cq, wc)) > 0;) {
      for (int i = 0; i < n; ++i) {
        if (wc[size_t(i)].status != WcStatus::success) throw std::runtime_error("transport benchmark: error completion");
      }
      completed += uint64_t(n);
    }
    for (int n; (n = p.b.device.poll_cq(p.b.cq, wc)) > 0;) {
      for (int i = 0; i < n; ++i) post_recv(received++);
    }
    if (fixed_messages != 0 ? completed >= fixed_messages : (completed & 63) == 0 && Clock::now() >= deadline) break;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  Rate r;
  r.messages_per_s = double(completed) / secs;
  r.bytes_per_s = r.messages_per_s * size;
  r.loss_seen = double(p.a.wire.lost + p.b.wire.lost) / double(std::max<uint64_t>(1, p.a.wire.sent + p.b.wire.sent));
  return r;
}

// The same case run `rounds` times: the median run, and the range, which says how much the machine moved
// during the measurement (on a shared VM one run can be 30% off the others).
struct Repeated {
  Rate median;
  double min_messages_per_s = 0, max_messages_per_s = 0;
};

Repeated repeated(int rounds, WrOpcode op, uint32_t size, double loss, double seconds, uint32_t depth) {
  std::vector<Rate> runs;
  for (int i = 0; i < rounds; ++i) runs.push_back(run(op, size, loss, seconds, depth));
  std::sort(runs.begin(), runs.end(), [](const Rate& x, const Rate& y) { return x.messages_per_s < y.messages_per_s; });
  return {runs[runs.size() / 2], runs.front().messages_per_s, runs.back().messages_per_s};
}

// Bytes per second of `call` (which handles `bytes_per_call` bytes) repeated for `seconds`, the clock read
// every `calls_per_check` calls.
template <class F>
double bytes_per_second(size_t bytes_per_call, double seconds, unsigned calls_per_check, F&& call) {
  uint64_t n = 0;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    for (unsigned i = 0; i < calls_per_check; ++i) call();
    n += calls_per_check;
  }
  return double(n) * double(bytes_per_call) / std::chrono::duration<double>(Clock::now() - start).count();
}

// memcpy between two page-aligned buffers. Not two std::vectors: two 64-KiB heap blocks allocated one after
// the other lie 65552 bytes apart, so the destination sits 16 bytes past the source modulo a 4 KiB page,
// and on AMD Zen 3 (EPYC family 25) glibc 2.36's memcpy of that size (rep movsb) then runs at 2 GB/s
// instead of 37: measured here for every distance, only +16 and -16 were slow. A reference that slow made
// the WRITE row read 1.2 x memcpy on that machine.
double memcpy_rate(size_t size, double seconds) {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  const size_t rounded = (size + 4095) / 4096 * 4096;
  const std::unique_ptr<uint8_t, Free> src(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
  const std::unique_ptr<uint8_t, Free> dst(static_cast<uint8_t*>(std::aligned_alloc(4096, rounded)));
  if (!src || !dst) throw std::bad_alloc();
  std::memset(src.get(), 1, size);
  std::memset(dst.get(), 0, size);
  return bytes_per_second(size, seconds, 64, [&] {
    std::memcpy(dst.get(), src.get(), size);
    clobber();
  });
}

// What any transport that sends real frames must spend on a 64-KiB WRITE in 4 KiB packets, with no queue
// pair, no state and no completions: the floors the measured WRITE is compared against.
//   icrc_only:   the sender's ICRC and the receiver's check (two compute_icrc passes per packet).
//   zero_copy:   the least any sender of real frames can do, reading each payload byte once for its ICRC
//                and copying nothing (as a NIC that sends by DMA from registered memory), and the receiver
//                as in frame_path. Whatever the design, a WRITE reads its bytes at the sender and reads and
//                writes them at the receiver: one memcpy and one CRC pass at least.
//   frame_path:  the sender builds each frame from the source (headers, payload copy, ICRC); the receiver
//                parses it and checks the ICRC while copying the payload to the destination, as early
//                placement does for all but a message's first packet (transport/qp/early_placement.cpp).
// All use the same codec calls the transport and the benchmark's wire use, on frames of the same shape.
struct Floors {
  double icrc_only = 0;
  double zero_copy = 0;
  double frame_path = 0;
};

Floors write_floors(double seconds) {
  constexpr size_t message = 65536, mtu = 4096, packets = message / mtu;
  std::vector<uint8_t> src(message, 0x5a), dst(message);
  AddressVector av;
  av.dgid = wire::IpAddress::from_v4(0x0a000002);
  PortAddressing port;
  port.src_ip = wire::IpAddress::from_v4(0x0a000001);
  OutPacket out;
  out.destination = &av;
  out.headers.bth.opcode = uint8_t(wire::Opcode::rc_rdma_write_middle);
  out.headers.bth.dest_qp = 0x11;
  std::vector<std::vector<uint8_t>> frames(packets);
  const auto build = [&](size_t i) {
    out.headers.bth.psn = uint32_t(i);
    out.payload = {src.data() + i * mtu, mtu};
    const wire::FrameSpec s = frame_spec_for(out, port);
    frames[i].resize(wire::frame_size(s));
    if (!wire::build_frame(s, frames[i]).ok()) throw std::runtime_error("transport floors: build_frame failed");
  };
  for (size_t i = 0; i < packets; ++i) build(i);
  const auto rate = [&](auto&& one_message) { return bytes_per_second(message, seconds, 16, one_message); };
  Floors f;
  uint64_t bad = 0;
  f.icrc_only = rate([&] {
    for (const auto& fr : frames) {
      const std::span<const uint8_t> ip(fr.data() + 14, fr.size() - 14 - wire::icrc_size);
      const uint32_t sent = wire::compute_icrc(ip, wire::IpVersion::v4, 20);
      bad += wire::compute_icrc(ip, wire::IpVersion::v4, 20) != sent;
      clobber();
    }
  });
  // The receiver's share of both paths below: parse, then check the ICRC while placing the payload.
  const auto receive = [&](size_t i) {
    wire::Frame parsed;
    if (wire::parse_frame(frames[i], parsed) != wire::ParseError::none ||
        wire::compute_icrc_copying_payload(parsed, dst.data() + i * mtu) != parsed.roce.icrc) {
      ++bad;
    }
  };
  f.zero_copy = rate([&] {
    for (size_t i = 0; i < packets; ++i) {
      // The frame is built already: its ICRC stands for the sender's pass over the payload in place.
      const std::span<const uint8_t> ip(frames[i].data() + 14, frames[i].size() - 14 - wire::icrc_size);
      bad += wire::compute_icrc(ip, wire::IpVersion::v4, 20) != wire::load_icrc(frames[i].data() + 14 + ip.size());
      receive(i);
      clobber();
    }
  });
  std::fill(dst.begin(), dst.end(), 0);
  f.frame_path = rate([&] {
    for (size_t i = 0; i < packets; ++i) {
      build(i);
      receive(i);
      clobber();
    }
  });
  if (bad != 0 || dst != src) throw std::runtime_error("transport floors: a frame failed its ICRC or payload check");
  return f;
}

size_t bytes_per_idle_qp() {
  // Heap bytes one more QP costs, measured over many so that allocator rounding averages out.
  Wire w(wire::IpAddress::from_v4(0x0a000001), 0, 1);
  Device d(w);
  uint32_t pd = 0, cq = 0;
  d.alloc_pd(pd);
  d.create_cq(16, cq);
  QpInitAttr init;
  init.pd = pd;
  init.send_cq = init.recv_cq = cq;
  init.cap = {128, 128, 1, 1, 0};
  constexpr int n = 1000;
  const size_t before = mallinfo2().uordblks;
  for (int i = 0; i < n; ++i) {
    uint32_t qpn = 0;
    d.create_qp(init, qpn);
  }
  return (mallinfo2().uordblks - before) / n;
}

}  // namespace

double transport_profile(const std::string& which, double seconds) {
  if (which == "send") return run(WrOpcode::send, 64, 0, seconds, 256).messages_per_s;
  if (which == "write") return run(WrOpcode::rdma_write, 65536, 0, seconds, 16).bytes_per_s;
  throw std::runtime_error("unknown transport case " + which + " (send or write)");
}

std::string transport_section(double seconds) {
  std::ostringstream out;
  Table t({"measurement", "message", "loss", "messages/s", "GB/s", "reference", "ratio", "target", "met"});
  const double mc = memcpy_rate(65536, seconds);
  // The two rows with targets: the median of 5 runs, with their range.
  constexpr int rounds = 5;
  const Repeated small_runs = repeated(rounds, WrOpcode::send, 64, 0, seconds / 2, 256);
  const Repeated big_runs = repeated(rounds, WrOpcode::rdma_write, 65536, 0, seconds / 2, 16);
  const Rate& small = small_runs.median;
  const Rate& big = big_runs.median;
  const Rate small_loss = run(WrOpcode::send, 64, 0.01, seconds, 256);
  const Rate big_loss = run(WrOpcode::rdma_write, 65536, 0.01, seconds, 16);
  const Floors floor = write_floors(seconds);
  const auto m = [](double v) { return fixed(v / 1e6, 2) + " M"; };
  t.add({"memcpy (reference)", "64 KiB", "—", "", fixed(mc / 1e9, 2), "", "", "", ""});
  const auto range = [](const Repeated& r, double scale) {  // slowest-fastest of the runs, in the row's unit
    return " (" + fixed(r.min_messages_per_s * scale, 2) + "-" + fixed(r.max_messages_per_s * scale, 2) + ")";
  };
  t.add({"SEND, requester+responder+completer", "64 B", "0", m(small.messages_per_s) + range(small_runs, 1e-6),
         fixed(small.bytes_per_s / 1e9, 3), "",
         "", ">= 5 M/s", small.messages_per_s >= 5e6 ? "yes" : "no"});
  t.add({"SEND", "64 B", fixed(small_loss.loss_seen * 100, 2) + "%", m(small_loss.messages_per_s),
         fixed(small_loss.bytes_per_s / 1e9, 3), "", "", "—", "—"});
  t.add({"RDMA WRITE", "64 KiB", "0", m(big.messages_per_s), fixed(big.bytes_per_s / 1e9, 2) + range(big_runs, 65536e-9),
         fixed(mc / 1e9, 2) + " (memcpy)", fixed(big.bytes_per_s / mc, 2), ">= 0.60 x memcpy",
         big.bytes_per_s >= 0.6 * mc ? "yes" : "no"});
  const auto floor_row = [&](const char* what, double rate) {
    t.add({what, "64 KiB", "—", "", fixed(rate / 1e9, 2), fixed(mc / 1e9, 2) + " (memcpy)", fixed(rate / mc, 2), "", ""});
  };
  floor_row("floor: ICRC built + checked, nothing else", floor.icrc_only);
  floor_row("floor: zero-copy sender's ICRC; receiver parses, checks while copying in", floor.zero_copy);
  floor_row("floor: frames built, parsed, checked while copied in", floor.frame_path);
  t.add({"RDMA WRITE", "64 KiB", fixed(big_loss.loss_seen * 100, 2) + "%", m(big_loss.messages_per_s),
         fixed(big_loss.bytes_per_s / 1e9, 2), fixed(mc / 1e9, 2) + " (memcpy)", fixed(big_loss.bytes_per_s / mc, 2), "—",
         "—"});
  const size_t per_qp = bytes_per_idle_qp();
  out << "\n## Transport: two QPs on one core through an in-memory wire (real frames, ICRC built and checked)\n\n"
      << t.render() << "\nMemory per idle QP (heap, queues empty): " << per_qp << " bytes (target <= 4096: "
      << (per_qp <= 4096 ? "met" : "NOT met") << ").\n"
      << "\nThe rows with a target give the median of " << rounds << " runs and, in brackets, the slowest and fastest.\n"
      << "\nThe floors are what a 64-KiB WRITE in 4 KiB packets costs without any queue pair: the sender's ICRC and\n"
         "the receiver's check alone; then the least any sender of real frames can do (CRC the payload where it lies,\n"
         "copy nothing, as a NIC sending by DMA) with a receiver that parses, checks and copies in; then uroce's\n"
         "whole frame path (build with payload copy and ICRC, parse, check while copying to the destination). A WRITE\n"
         "through the transport cannot be faster than any of them. A ratio target above the second floor cannot be met\n"
         "by any software design that sends and checks real frames with this CRC kernel and this memory system.\n";
  return out.str();
}

}  // namespace uroce::bench
