// uroce-rdma-test: the client library's own test program. Two processes, each on a uroced (the same one
// over its loopback port, or two daemons joined by a veth or memif), run one operation many times over
// an RC (or UD) queue pair and check every byte that arrived; the client prints one JSON line with the
// throughput and the verdict, and exits 0 only if everything arrived exactly once and intact.
//
//   uroce-rdma-test --server --oob /tmp/x.sock [--socket S] [--op write] ...
//   uroce-rdma-test --client --oob /tmp/x.sock [--socket S] [--op write] [--size 65536] [--count 20000]
//
// What is checked, per operation:
//   write  each remote slot ends up equal to the client's slot (a per-slot pattern);
//   read   each local slot ends up equal to the server's slot;
//   send   every message arrives once, in order, with its sequence number and exact bytes;
//   atomic fetch-and-add count times: the server's counter equals count, and every original value a
//          fetch returned is distinct; then a chain of compare-and-swap k -> k+1 sees each k once;
//   ud     every datagram arrives (no loss expected without injected loss), with its bytes.
#include <sched.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>
#include <span>
#include <stdexcept>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "emulator/client/context.hpp"
#include "emulator/protocol/verbs_json.hpp"
#include "emulator/tools/oob_channel.hpp"

using namespace uroce;
using namespace uroce::emulator;
using namespace uroce::verbs;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

namespace {

// Polling without a pause would, on a machine with fewer cores than busy processes (two daemons and two
// test processes on two cores), take the CPU from the daemon that is to produce the completion. After a
// short spin an empty poll therefore yields: at once back when nothing else is runnable, and the daemon
// runs first when it is.
constexpr unsigned spins_before_yield = 64;

void empty_poll(unsigned& empty) {
  if (++empty > spins_before_yield) sched_yield();
}

struct Options {
  bool server = false, client = false, memcpy = false;
  std::string socket = client::ControlConnection::default_socket_path();
  std::string oob;
  std::string op = "write";
  uint32_t size = 65536;
  uint64_t count = 10000;
  uint32_t depth = 16;
  double timeout_s = 60;
  uint8_t sl = 0;  // the address vectors' service level: a VLAN port's priority (PCP)
  uint8_t traffic_class = 0;  // their traffic class: the IP header's DSCP (and ECN bits)
};

uint8_t pattern(uint64_t slot, uint64_t i) { return uint8_t((slot * 131 + i * 7 + (i >> 8) * 13 + 1) & 0xff); }

constexpr uint32_t grh_bytes = 40;  // UD receive buffers start with the GRH

struct Endpoint {
  std::unique_ptr<client::Context> ctx;
  uint32_t pd = 0;
  client::MemoryRegion mr;
  uint8_t* buffer = nullptr;
  size_t buffer_bytes = 0;
  std::unique_ptr<client::CompletionQueue> cq;
  std::unique_ptr<client::QueuePair> qp;
  uint32_t psn = 0;
  uint32_t slot_bytes = 0;
  uint32_t slots = 0;

  uint8_t* slot(uint64_t i) const { return buffer + (i % slots) * slot_bytes; }
  uint64_t slot_addr(uint64_t i) const { return reinterpret_cast<uint64_t>(slot(i)); }
};

Endpoint open_endpoint(const Options& o, QpType type, uint32_t slots) {
  Endpoint e;
  e.ctx = client::Context::open(o.socket, "uroce-rdma-test");
  e.pd = e.ctx->alloc_pd();
  e.slots = slots;
  e.slot_bytes = std::max<uint32_t>(o.size + (type == QpType::ud ? grh_bytes : 0), 8);
  e.buffer_bytes = size_t(e.slot_bytes) * slots;
  void* p = mmap(nullptr, e.buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("cannot allocate the buffer");
  e.buffer = static_cast<uint8_t*>(p);
  std::memset(e.buffer, 0, e.buffer_bytes);
  e.mr = e.ctx->reg_mr(e.pd, e.buffer, e.buffer_bytes,
                       access_local_write | access_remote_write | access_remote_read | access_remote_atomic);
  e.cq = e.ctx->create_cq(4096);
  client::QpCreate q;
  q.pd = e.pd;
  q.send_cq = q.recv_cq = e.cq->cqn;
  q.type = type;
  q.cap = {std::max<uint32_t>(slots, 64), std::max<uint32_t>(slots, 64), 1, 1, 64};
  e.qp = e.ctx->create_qp(q);
  e.psn = uint32_t(getpid() * 2654435761u) & 0xffffff;
  return e;
}

json describe(const Endpoint& e) {
  return {{"qpn", e.qp->qpn}, {"psn", e.psn}, {"gid", e.ctx->device().at("gids").at(0)},
          {"rkey", e.mr.rkey}, {"addr", reinterpret_cast<uint64_t>(e.buffer)}, {"slots", e.slots},
          {"slot_bytes", e.slot_bytes}, {"mtu", e.ctx->device().at("active_mtu")}};
}

void connect_qp(Endpoint& e, const json& peer, uint8_t sl, uint8_t traffic_class) {
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  a.pkey_index = 0;
  if (e.qp->type == QpType::ud) {
    a.qkey = 0x11111111;
    e.ctx->modify_qp(*e.qp, a, attr_state | attr_pkey_index | attr_port | attr_qkey);
    a.qp_state = QpState::rtr;
    e.ctx->modify_qp(*e.qp, a, attr_state);
    a.qp_state = QpState::rts;
    a.sq_psn = e.psn;
    e.ctx->modify_qp(*e.qp, a, attr_state | attr_sq_psn);
    return;
  }
  a.qp_access_flags = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
  e.ctx->modify_qp(*e.qp, a, attr_state | attr_pkey_index | attr_port | attr_access_flags);
  a.qp_state = QpState::rtr;
  a.path_mtu = Mtu(std::min(peer.at("mtu").get<uint32_t>(), e.ctx->device().at("active_mtu").get<uint32_t>()));
  a.dest_qp_num = peer.at("qpn").get<uint32_t>();
  a.rq_psn = peer.at("psn").get<uint32_t>();
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 12;
  a.ah_attr.dgid = peer.at("gid").get<wire::IpAddress>();
  a.ah_attr.service_level = sl;
  a.ah_attr.traffic_class = traffic_class;
  e.ctx->modify_qp(*e.qp, a,
                   attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn | attr_max_dest_rd_atomic |
                       attr_min_rnr_timer);
  a.qp_state = QpState::rts;
  a.sq_psn = e.psn;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  e.ctx->modify_qp(*e.qp, a,
                   attr_state | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_sq_psn | attr_max_qp_rd_atomic);
}

// Polls without system calls until `want` completions arrived or the deadline passed.
std::vector<emulator::protocol::CompletionEntry> poll(Endpoint& e, size_t want, Clock::time_point deadline) {
  std::vector<emulator::protocol::CompletionEntry> out(want);
  size_t got = 0;
  unsigned spins = 0;
  unsigned empty = 0;
  while (got < want) {
    const int n = e.cq->ring.poll({out.data() + got, want - got});
    got += size_t(n);
    if (n != 0) {
      empty = 0;
    } else {
      empty_poll(empty);
    }
    if (got < want && (++spins & 1023) == 0 && Clock::now() > deadline) {
      throw std::runtime_error("timed out waiting for completions");
    }
  }
  for (const auto& c : out) {
    if (c.status != 0) {
      throw std::runtime_error("completion with status " + std::string(to_string(WcStatus(c.status))) +
                               " (wr_id " + std::to_string(c.wr_id) + ")");
    }
  }
  return out;
}

int post_send(Endpoint& e, emulator::protocol::SendEntry wr, uint64_t local, uint32_t length) {
  const emulator::protocol::WireSge sge{local, length, e.mr.lkey};
  int rc = e.qp->send.post(wr, {&sge, 1}, {});
  e.ctx->ring_doorbell();
  return rc;
}

void post_recv(Endpoint& e, uint64_t id) {
  const emulator::protocol::WireSge sge{e.slot_addr(id), e.slot_bytes, e.mr.lkey};
  if (int rc = e.qp->recv->post(id, {&sge, 1})) throw std::runtime_error("post_recv failed: " + std::to_string(rc));
  e.ctx->ring_doorbell();
}

// Keeps `depth` operations in flight until `count` completed; make(i) posts operation i.
template <class Post, class Done>
double pipeline(Endpoint& e, const Options& o, uint64_t count, Post make, Done done) {
  const auto start = Clock::now();
  const auto deadline = after(o.timeout_s);
  uint64_t posted = 0, completed = 0;
  emulator::protocol::CompletionEntry wc[64];
  unsigned spins = 0, empty = 0;
  while (completed < count) {
    while (posted < count && posted - completed < o.depth) {
      if (int rc = make(posted)) throw std::runtime_error("post failed: " + std::to_string(rc));
      ++posted;
    }
    const int n = e.cq->ring.poll(wc);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != 0) throw std::runtime_error("completion error: " + std::string(to_string(WcStatus(wc[i].status))));
      done(wc[i]);
    }
    completed += uint64_t(n);
    if (n != 0) {
      empty = 0;
    } else {
      empty_poll(empty);
    }
    if (n == 0 && (++spins & 1023) == 0 && Clock::now() > deadline) throw std::runtime_error("timed out");
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

emulator::protocol::SendEntry base_wr(WrOpcode op, uint64_t id) {
  emulator::protocol::SendEntry w{};
  w.wr_id = id;
  w.opcode = uint32_t(op);
  w.send_flags = send_signaled;
  return w;
}

void fill_slots(Endpoint& e, uint32_t bytes) {
  for (uint32_t s = 0; s < e.slots; ++s) {
    for (uint32_t i = 0; i < bytes; ++i) e.slot(s)[i] = pattern(s, i);
  }
}

bool slots_match(const Endpoint& e, uint32_t bytes, std::string& why) {
  for (uint32_t s = 0; s < e.slots; ++s) {
    for (uint32_t i = 0; i < bytes; ++i) {
      if (e.slot(s)[i] != pattern(s, i)) {
        why = "slot " + std::to_string(s) + " byte " + std::to_string(i) + " differs";
        return false;
      }
    }
  }
  return true;
}

int run_server(const Options& o) {
  const QpType type = o.op == "ud" ? QpType::ud : QpType::rc;
  const uint32_t slots = o.op == "ud" || o.op == "send" ? uint32_t(std::min<uint64_t>(o.count, 4096)) : o.depth;
  Endpoint e = open_endpoint(o, type, std::max<uint32_t>(slots, 1));
  auto oob = tools::OobChannel::serve(o.oob, o.timeout_s);
  if (o.op == "read") fill_slots(e, o.size);
  oob.send(describe(e));
  const json peer = oob.receive();
  connect_qp(e, peer, o.sl, o.traffic_class);
  // Receives go to a QP that left RESET (ibv_post_recv refuses them before), and before the client may send.
  if (o.op == "send" || o.op == "ud") {
    for (uint32_t i = 0; i < e.slots; ++i) post_recv(e, i);
  }
  oob.send({{"ready", true}});
  json verdict = {{"verified", true}};
  const auto deadline = after(o.timeout_s);
  std::string why;
  if (o.op == "send" || o.op == "ud") {
    // Every message: once, in order, its sequence number first, the sender's slot pattern after it.
    const uint32_t offset = type == QpType::ud ? grh_bytes : 0;
    const uint64_t sender_slots = peer.at("slots").get<uint64_t>();
    for (uint64_t seq = 0; seq < o.count; ++seq) {
      const auto wc = poll(e, 1, deadline).front();
      const uint8_t* m = e.buffer + wc.wr_id * e.slot_bytes + offset;
      uint64_t got_seq = 0;
      std::memcpy(&got_seq, m, 8);
      bool ok = wc.byte_len == o.size + offset && got_seq == seq;
      for (uint32_t i = 8; ok && i < o.size; ++i) ok = m[i] == pattern(seq % sender_slots, i);
      if (!ok) {
        verdict = {{"verified", false},
                   {"why", "message " + std::to_string(seq) + " wrong (got seq " + std::to_string(got_seq) + ", " +
                               std::to_string(wc.byte_len) + " bytes)"}};
        break;
      }
      if (seq + e.slots < o.count) post_recv(e, wc.wr_id);
    }
  }
  const json done = oob.receive();
  if (o.op == "write" && !slots_match(e, o.size, why)) verdict = {{"verified", false}, {"why", why}};
  if (o.op == "atomic") {
    uint64_t counter = 0;
    std::memcpy(&counter, e.buffer, 8);
    const uint64_t expect = done.at("fetch_adds").get<uint64_t>() + done.at("cas_chain").get<uint64_t>();
    if (counter != expect) verdict = {{"verified", false}, {"why", "counter " + std::to_string(counter) + " != " + std::to_string(expect)}};
  }
  oob.send(verdict);
  return verdict.at("verified").get<bool>() ? 0 : 1;
}

int run_client(const Options& o) {
  const QpType type = o.op == "ud" ? QpType::ud : QpType::rc;
  Endpoint e = open_endpoint(o, type, o.depth);
  auto oob = tools::OobChannel::connect(o.oob, o.timeout_s);
  const json peer = oob.receive();
  oob.send(describe(e));
  connect_qp(e, peer, o.sl, o.traffic_class);
  oob.receive();  // the server is ready (its receives are posted)
  const uint64_t raddr = peer.at("addr").get<uint64_t>();
  const uint32_t rkey = peer.at("rkey").get<uint32_t>();
  const uint32_t rslot_bytes = peer.at("slot_bytes").get<uint32_t>();
  const uint64_t rslots = peer.at("slots").get<uint64_t>();
  double seconds = 0;
  json extra = json::object();
  if (o.op == "write") {
    fill_slots(e, o.size);
    seconds = pipeline(e, o, o.count, [&](uint64_t i) {
      auto w = base_wr(WrOpcode::rdma_write, i);
      w.remote_addr = raddr + (i % rslots) * rslot_bytes;
      w.rkey = rkey;
      return post_send(e, w, e.slot_addr(i), o.size);
    }, [](const auto&) {});
  } else if (o.op == "read") {
    seconds = pipeline(e, o, o.count, [&](uint64_t i) {
      auto w = base_wr(WrOpcode::rdma_read, i);
      w.remote_addr = raddr + (i % rslots) * rslot_bytes;
      w.rkey = rkey;
      return post_send(e, w, e.slot_addr(i), o.size);
    }, [](const auto&) {});
    std::string why;
    // The client's slot i mirrors the server's slot i only when both have the same number of slots.
    if (rslots == e.slots && !slots_match(e, o.size, why)) extra = {{"local_check", why}};
  } else if (o.op == "send" || o.op == "ud") {
    fill_slots(e, o.size);
    uint32_t ah = 0;
    if (type == QpType::ud) {
      AddressVector av;
      av.dgid = peer.at("gid").get<wire::IpAddress>();
      av.service_level = o.sl;
      av.traffic_class = o.traffic_class;
      ah = e.ctx->create_ah(e.pd, av);
    }
    seconds = pipeline(e, o, o.count, [&](uint64_t i) {
      std::memcpy(e.slot(i), &i, 8);  // the slot is not in flight: its previous send completed
      auto w = base_wr(WrOpcode::send, i);
      w.ah = ah;
      w.remote_qpn = peer.at("qpn").get<uint32_t>();
      w.remote_qkey = 0x11111111;
      return post_send(e, w, e.slot_addr(i), o.size);
    }, [](const auto&) {});
  } else if (o.op == "atomic") {
    std::set<uint64_t> originals;
    std::vector<uint64_t> seen;
    seconds = pipeline(e, o, o.count, [&](uint64_t i) {
      auto w = base_wr(WrOpcode::atomic_fetch_and_add, i);
      w.remote_addr = raddr;
      w.rkey = rkey;
      w.compare_add = 1;
      return post_send(e, w, e.slot_addr(i), 8);
    }, [&](const auto& wc) {
      uint64_t v = 0;
      std::memcpy(&v, e.slot(wc.wr_id), 8);
      originals.insert(v);
    });
    if (originals.size() != o.count) extra["fetch_add_check"] = "duplicate original values: an atomic ran twice?";
    const uint64_t chain = std::min<uint64_t>(o.count, 1000);
    for (uint64_t k = 0; k < chain; ++k) {
      auto w = base_wr(WrOpcode::atomic_cmp_and_swp, k);
      w.remote_addr = raddr;
      w.rkey = rkey;
      w.compare_add = o.count + k;
      w.swap = o.count + k + 1;
      post_send(e, w, e.slot_addr(0), 8);
      poll(e, 1, after(o.timeout_s));
      uint64_t v = 0;
      std::memcpy(&v, e.slot(0), 8);
      if (v != o.count + k) {
        extra["cas_check"] = "compare-and-swap " + std::to_string(k) + " saw " + std::to_string(v);
        break;
      }
    }
    extra["fetch_adds"] = o.count;
    extra["cas_chain"] = chain;
  } else {
    throw std::invalid_argument("unknown --op " + o.op);
  }
  json done = {{"done", true}};
  done.update(extra);
  oob.send(done);
  const json verdict = oob.receive();
  const bool local_ok = !extra.contains("local_check") && !extra.contains("fetch_add_check") && !extra.contains("cas_check");
  const json result = {{"op", o.op},
                       {"size", o.size},
                       {"count", o.count},
                       {"depth", o.depth},
                       {"seconds", seconds},
                       {"messages_per_s", double(o.count) / seconds},
                       {"gbytes_per_s", double(o.count) * o.size / seconds / 1e9},
                       {"server", verdict},
                       {"client", extra},
                       {"verified", verdict.at("verified").get<bool>() && local_ok}};
  std::cout << result.dump() << std::endl;
  return result.at("verified").get<bool>() ? 0 : 1;
}

// The reference the benchmark puts beside RDMA numbers: memcpy of the same message size, between two
// buffers of `depth` slots like the test's, in this process. Page-aligned, both: two heap blocks allocated
// one after the other can lie 16 bytes apart modulo a page, and on AMD Zen 3 glibc 2.36's memcpy of 4 KiB
// and more (rep movsb) then runs at a twentieth of its speed (bench/bench_transport.cpp, memcpy_rate).
int run_memcpy(const Options& o) {
  const size_t bytes = (size_t(o.size) * o.depth + 4095) / 4096 * 4096;
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  const std::unique_ptr<uint8_t, Free> src_block(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  const std::unique_ptr<uint8_t, Free> dst_block(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  if (!src_block || !dst_block) throw std::bad_alloc();
  std::memset(src_block.get(), 1, bytes);
  std::memset(dst_block.get(), 0, bytes);
  const std::span<uint8_t> src(src_block.get(), bytes), dst(dst_block.get(), bytes);
  const auto start = Clock::now();
  for (uint64_t i = 0; i < o.count; ++i) {
    const size_t at = (i % o.depth) * o.size;
    std::memcpy(dst.data() + at, src.data() + at, o.size);
    asm volatile("" : : "r"(dst.data()) : "memory");  // the copy must happen
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::cout << json{{"op", "memcpy"}, {"size", o.size}, {"count", o.count}, {"seconds", seconds},
                    {"gbytes_per_s", double(o.count) * o.size / seconds / 1e9}, {"verified", true}}.dump()
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"uroce-rdma-test: RDMA between two processes through uroced, every byte checked"};
  auto* role = app.add_option_group("role");
  role->add_flag("--server", o.server, "wait for the client");
  role->add_flag("--client", o.client, "drive the test and print the result");
  role->add_flag("--memcpy", o.memcpy, "no RDMA: memcpy of --count messages of --size bytes (the reference)");
  role->require_option(1);
  app.add_option("--oob", o.oob, "Unix socket path the two processes meet at");
  app.add_option("--socket", o.socket, "uroced's control socket")->capture_default_str();
  app.add_option("--op", o.op, "write, read, send, atomic or ud")
      ->check(CLI::IsMember({"write", "read", "send", "atomic", "ud"}))
      ->capture_default_str();
  app.add_option("--size", o.size, "message size in bytes")->check(CLI::Range(8u, 1u << 24))->capture_default_str();
  app.add_option("--count", o.count, "messages")->check(CLI::Range(uint64_t(1), uint64_t(1) << 40))->capture_default_str();
  app.add_option("--depth", o.depth, "operations in flight")->check(CLI::Range(1u, 4096u))->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "seconds before giving up")->capture_default_str();
  app.add_option("--sl", o.sl, "service level of the address vectors (on a VLAN port: the frames' priority)")
      ->check(CLI::Range(0, 15));
  app.add_option("--tclass", o.traffic_class,
                 "traffic class of the address vectors: the IP header's DSCP (<< 2), e.g. 104 for DSCP 26")
      ->check(CLI::Range(0, 255));
  CLI11_PARSE(app, argc, argv);
  // Diagnostics on stderr: stdout carries only the result line.
  spdlog::set_default_logger(spdlog::stderr_color_mt("uroce-rdma-test"));
  spdlog::set_pattern("uroce-rdma-test[%P] %l %v");
  try {
    if (o.memcpy) return run_memcpy(o);
    if (o.oob.empty()) throw std::invalid_argument("--oob is required for --server and --client");
    return o.server ? run_server(o) : run_client(o);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 2;
  }
}
