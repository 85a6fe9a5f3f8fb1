// What the service tests share: daemon-made rings handed to the client library, a QueueService on each of
// two transport devices joined by the simulation network (tests/unit/transport's Pair), and a VerbsService
// whose engine runs inline (EngineAccess called synchronously, as docs/daemon.md allows for tests).
#pragma once

#include <catch2/catch.hpp>

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "emulator/client/queues.hpp"
#include "emulator/daemon/engine_access.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "emulator/engine/queue_service.hpp"
#include "emulator/protocol/queue_entries.hpp"
#include "emulator/protocol/ring.hpp"
#include "emulator/protocol/shared_region.hpp"
#include "tests/unit/transport/transport_fixture.hpp"

namespace uroce::test::service {

namespace protocol = uroce::emulator::protocol;
namespace client = uroce::emulator::client;
namespace engine = uroce::emulator::engine;
using uroce::emulator::EngineAccess;
using uroce::emulator::EngineContext;
using uroce::emulator::ServiceError;
using uroce::emulator::VerbsService;
using nlohmann::json;

// ---- Rings

// A ring as the daemon makes one: a sealed memfd, zeroed and formatted.
protocol::SharedRegion daemon_ring(uint32_t capacity, uint32_t entry_size);

// The client's view of a daemon ring, attached through a duplicate of its fd as if it came over the socket.
client::SendRing client_send_ring(const protocol::SharedRegion& ring, uint32_t max_sge, uint32_t max_inline);
client::RecvRing client_recv_ring(const protocol::SharedRegion& ring, uint32_t max_sge);
client::CompletionRing client_completion_ring(const protocol::SharedRegion& ring);

protocol::SendEntry send_entry(uint64_t wr_id, verbs::WrOpcode op, uint32_t flags = verbs::send_signaled);
protocol::WireSge sge(uint64_t addr, uint32_t length, uint32_t lkey);
// Writes `e` (and `tail` after it) into slot `index` of a mapped ring, unchecked, and publishes index + 1.
void scribble(const protocol::SharedRegion& ring, uint32_t index, const void* e, size_t size,
              std::span<const uint8_t> tail = {});
protocol::RingView view_of(const protocol::SharedRegion& ring);
// Polls until the ring is empty.
std::vector<protocol::CompletionEntry> poll_all(client::CompletionRing& cq);

// ---- Pipes (completion channels, async events)

struct Pipe {
  Pipe();  // both ends non-blocking, close-on-exec
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  int read_fd = -1, write_fd = -1;
};

// Every whole record waiting in a pipe (non-blocking read end).
template <class Record>
std::vector<Record> drain_records(int fd);
extern template std::vector<protocol::CompletionEventRecord> drain_records(int fd);
extern template std::vector<protocol::AsyncEventRecord> drain_records(int fd);

// ---- QueueService on two connected devices

// The rings of one host's QP and CQs, as its client holds them.
struct ClientQueues {
  client::SendRing send;
  // Second mappings of the send and receive rings, for writing what the client library refuses to (a
  // client may scribble anything on its rings). Do not mix with `send`/`recv` in one test: those cache
  // their producer index.
  protocol::SharedRegion raw_send, raw_recv;
  client::RecvRing recv;
  client::CompletionRing send_cq;
  client::CompletionRing recv_cq;
};

struct RingShape {
  uint32_t send_capacity = 16, recv_capacity = 16, cq_capacity = 64;
  uint32_t max_send_sge = 4, max_inline = 64, max_recv_sge = 4;
};

// Pair's two hosts, each served by a QueueService for one client session (a: session 1, b: session 2),
// with their QP's rings and both CQs' rings attached.
struct ServedPair {
  static constexpr engine::SessionId session_a = 1, session_b = 2;

  explicit ServedPair(PairConfig config = {}, RingShape shape = {});
  // Engine turns until nothing moves: drain rings into the devices, let the network settle, deliver
  // completions and events.
  void pump();

  RingShape shape;
  Pair pair;
  engine::QueueService qa{*pair.a.device};
  engine::QueueService qb{*pair.b.device};
  ClientQueues ca, cb;
};

// A second connection between a ServedPair's hosts, whose QP on one side takes its receives from an SRQ
// of `srq_wr` requests (one SGE each; limit `srq_limit`) posted on the SRQ's own ring. Both QPs get a send
// ring of 64 requests (one SGE, 64 bytes inline), the other side's QP a receive ring of 8; the QPs'
// completions go to their hosts' CQs, as the first connection's.
struct SrqConnection {
  enum class Side { a, b };
  SrqConnection(ServedPair& s, Side srq_side, uint32_t srq_wr, uint32_t srq_limit = 0);

  uint32_t srqn = 0, srq_qpn = 0, peer_qpn = 0;
  client::RecvRing srq;
  client::SendRing srq_side_sends, peer_sends;
  client::RecvRing peer_receives;
};

// ---- VerbsService with the engine inline

class InlineEngine final : public EngineAccess {
 public:
  InlineEngine(transport::Device& device, engine::QueueService& queues) : context_{device, queues, 0} {}
  void run_on_engine(const std::function<void(EngineContext&)>& fn) override { fn(context_); }
  void set_now(transport::Nanos now) { context_.now = now; }
  // Which addresses the port's ARP/ND knows (every one unless a test says otherwise).
  void set_neighbour_known(std::function<bool(const wire::IpAddress&)> known) {
    context_.neighbour_known = std::move(known);
  }
  // Which addresses the port has a route to (every one unless a test says otherwise).
  void set_has_route(std::function<bool(const wire::IpAddress&)> routed) { context_.has_route = std::move(routed); }
  // Which addresses are on the port's link (every one unless a test says otherwise).
  void set_on_link(std::function<bool(const wire::IpAddress&)> on_link) { context_.on_link = std::move(on_link); }

 private:
  EngineContext context_;
};

// One device on the simulation network at 10.0.0.1 (a QP may be connected to another QP of the same
// device, as two clients of one uroced on its loopback port are), served by a VerbsService.
struct ServiceHarness {
  explicit ServiceHarness(transport::DeviceLimits limits = {});
  ~ServiceHarness();

  // A request as session `s` sends it; the reply's descriptors go to `fds` (closed when null).
  json call(uint64_t s, json request, std::vector<int>* fds = nullptr, const std::vector<int>& with = {});
  // The errno of a request that must fail with ServiceError (FAILs if it succeeds).
  int error_of(uint64_t s, json request, const std::vector<int>& with = {});
  // Engine turns on every served queue and the network until nothing moves.
  void pump();

  transport::DeviceLimits limits;
  wire::IpAddress address = ip("10.0.0.1");
  sim::SimNetwork net{1};
  sim::NodeId node;
  std::unique_ptr<transport::Device> device;
  std::unique_ptr<sim::DeviceEndpoint> endpoint;
  std::unique_ptr<engine::QueueService> queues;
  std::unique_ptr<InlineEngine> engine;
  int wake_fd = -1;
  protocol::SharedRegion status;
  std::unique_ptr<VerbsService> service;
};

// ---- Requests, in the shapes emulator/client/context.cpp sends

json qp_request(uint32_t pd, uint32_t send_cq, uint32_t recv_cq, uint32_t srq = 0,
                verbs::QpCap cap = {16, 16, 2, 2, 64});
// Takes a QP of `session` to RTS facing `remote_qpn` on the harness's own device (modify_qp requests
// with the masks ibv_rc_pingpong uses).
void connect_qp(ServiceHarness& h, uint64_t session, uint32_t qpn, uint32_t remote_qpn);

// The client's end of a QP and its CQ, built from the replies' descriptors and sizes the way
// emulator/client/context.cpp builds them.
struct ClientQp {
  uint32_t qpn = 0;
  client::SendRing send;
  client::RecvRing recv;
};
ClientQp create_client_qp(ServiceHarness& h, uint64_t session, uint32_t pd, uint32_t cq);
client::CompletionRing create_client_cq(ServiceHarness& h, uint64_t session, uint32_t cqe, uint32_t& cqn);

// Session 1 owns the regions under test and a QP facing session 2's, which RDMA WRITEs into them from a
// buffer of its own (three pages of a pattern). One write that fails takes both QPs to the error state:
// one per test section.
struct RemoteWriter {
  // Session 1 is `target_process`'s (whose memory its regions are reached in), session 2 this process's.
  explicit RemoteWriter(pid_t target_process = getpid());

  // Registers [addr, addr + length) for session 1 as the client library does for memory it could not
  // move: no memfd with the request. Returns the rkey.
  uint32_t reg(const void* addr, uint64_t length, uint32_t access = Pair::all_access);
  // WRITEs `length` bytes of the source pattern to (addr, rkey); the status it completed with.
  uint32_t write(const void* addr, uint32_t rkey, uint32_t length);
  bool holds_source(const uint8_t* p, size_t length) const { return std::memcmp(p, source.data(), length) == 0; }

  ServiceHarness h;
  std::vector<uint8_t> source;
  uint32_t pd_1 = 0, pd_2 = 0, source_key = 0;
  client::CompletionRing target_cq, send_cq;
  ClientQp target, sender;
};

// One object of every kind, created by one session through requests; `buffer` is registered as the MR
// (through process_vm_*: no memfd is sent).
struct SessionObjects {
  uint32_t pd = 0, mr = 0, channel = 0, cq = 0, srq = 0, ah = 0, qp = 0;
};
SessionObjects create_one_of_each(ServiceHarness& h, uint64_t session, void* buffer, size_t length);

// The system's pool of 2 MiB huge pages (the default size on x86-64) grown by `extra` for the test, as root,
// and given back at the end. free() is what the pool has free now.
struct HugePagePool {
  explicit HugePagePool(uint64_t extra) {
    before = read("/proc/sys/vm/nr_hugepages");
    if (geteuid() != 0) return;
    std::ofstream("/proc/sys/vm/nr_hugepages") << before + extra;
    grown = read("/proc/sys/vm/nr_hugepages") == before + extra;
  }
  ~HugePagePool() {
    if (grown) std::ofstream("/proc/sys/vm/nr_hugepages") << before;
  }
  static uint64_t read(const char* path) {
    uint64_t n = 0;
    std::ifstream(path) >> n;
    return n;
  }
  static uint64_t free() { return read("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"); }
  uint64_t before = 0;
  bool grown = false;
};

// How many descriptors this process has open (to see that a failed request leaks none).
size_t open_fd_count();
// A field of /proc/self/smaps for the mapping holding `p`, in kB ("Rss", "KernelPageSize"); 0 if not found.
uint64_t smaps_kb(const void* p, const std::string& field);
void close_all(std::vector<int>& fds);

}  // namespace uroce::test::service
