#include "tests/emulator/service/service_fixture.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <string>

#include "emulator/protocol/verbs_json.hpp"

namespace uroce::test::service {

protocol::SharedRegion daemon_ring(uint32_t capacity, uint32_t entry_size) {
  protocol::SharedRegion r = protocol::SharedRegion::create("uroce-test-ring", protocol::ring_bytes(capacity, entry_size));
  protocol::RingView::format(r.data(), capacity, entry_size);
  return r;
}

namespace {
const protocol::RingHeader& header_of(const protocol::SharedRegion& ring) {
  return *reinterpret_cast<const protocol::RingHeader*>(ring.data());
}
}  // namespace

client::SendRing client_send_ring(const protocol::SharedRegion& ring, uint32_t max_sge, uint32_t max_inline) {
  const auto& h = header_of(ring);
  return client::SendRing(ring.dup_fd(), protocol::ring_bytes(h.capacity, h.entry_size), h.capacity, h.entry_size,
                          max_sge, max_inline);
}

client::RecvRing client_recv_ring(const protocol::SharedRegion& ring, uint32_t max_sge) {
  const auto& h = header_of(ring);
  return client::RecvRing(ring.dup_fd(), protocol::ring_bytes(h.capacity, h.entry_size), h.capacity, h.entry_size,
                          max_sge);
}

client::CompletionRing client_completion_ring(const protocol::SharedRegion& ring) {
  const auto& h = header_of(ring);
  return client::CompletionRing(ring.dup_fd(), protocol::ring_bytes(h.capacity, h.entry_size), h.capacity);
}

protocol::RingView view_of(const protocol::SharedRegion& ring) {
  const auto& h = header_of(ring);
  return protocol::RingView(ring.data(), h.capacity, h.entry_size);
}

void scribble(const protocol::SharedRegion& ring, uint32_t index, const void* e, size_t size,
              std::span<const uint8_t> tail) {
  const protocol::RingView v = view_of(ring);
  std::memcpy(v.entry(index), e, size);
  if (!tail.empty()) std::memcpy(v.entry(index) + size, tail.data(), tail.size());
  v.publish_producer(index + 1);
}

protocol::SendEntry send_entry(uint64_t wr_id, verbs::WrOpcode op, uint32_t flags) {
  protocol::SendEntry e{};
  e.wr_id = wr_id;
  e.opcode = uint32_t(op);
  e.send_flags = flags;
  return e;
}

protocol::WireSge sge(uint64_t addr, uint32_t length, uint32_t lkey) { return {addr, length, lkey}; }

std::vector<protocol::CompletionEntry> poll_all(client::CompletionRing& cq) {
  std::vector<protocol::CompletionEntry> out;
  protocol::CompletionEntry batch[8];
  for (int n; (n = cq.poll(batch)) > 0;) out.insert(out.end(), batch, batch + n);
  return out;
}

Pipe::Pipe() {
  int p[2];
  REQUIRE(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
  read_fd = p[0];
  write_fd = p[1];
}

Pipe::~Pipe() {
  close(read_fd);
  close(write_fd);
}

template <class Record>
std::vector<Record> drain_records(int fd) {
  std::vector<Record> out;
  Record r;
  while (read(fd, &r, sizeof r) == ssize_t(sizeof r)) out.push_back(r);
  return out;
}
template std::vector<protocol::CompletionEventRecord> drain_records(int fd);
template std::vector<protocol::AsyncEventRecord> drain_records(int fd);

// Each host's QP gets a send and a receive ring, each CQ a completion ring; the daemon keeps its regions
// in the QueueService, the client attaches its own mappings of the same memfds.
ServedPair::ServedPair(PairConfig config, RingShape s) : shape(s), pair(config) {
  struct Side {
    engine::QueueService& queues;
    engine::SessionId session;
    Host& host;
    uint32_t qpn;
    ClientQueues& client;
  };
  for (Side side : {Side{qa, session_a, pair.a, pair.qa, ca}, Side{qb, session_b, pair.b, pair.qb, cb}}) {
    protocol::SharedRegion send = daemon_ring(s.send_capacity, protocol::send_entry_size(s.max_send_sge, s.max_inline));
    protocol::SharedRegion recv = daemon_ring(s.recv_capacity, protocol::recv_entry_size(s.max_recv_sge));
    protocol::SharedRegion send_cq = daemon_ring(s.cq_capacity, protocol::completion_entry_size());
    protocol::SharedRegion recv_cq = daemon_ring(s.cq_capacity, protocol::completion_entry_size());
    side.client.send = client_send_ring(send, s.max_send_sge, s.max_inline);
    side.client.recv = client_recv_ring(recv, s.max_recv_sge);
    side.client.raw_send = protocol::SharedRegion::attach(send.dup_fd(), send.size());
    side.client.raw_recv = protocol::SharedRegion::attach(recv.dup_fd(), recv.size());
    side.client.send_cq = client_completion_ring(send_cq);
    side.client.recv_cq = client_completion_ring(recv_cq);
    side.queues.attach_qp(side.session, side.qpn,
                          {std::move(send), std::move(recv), s.max_send_sge, s.max_inline, s.max_recv_sge,
                           side.host.send_cq});
    side.queues.attach_cq(side.session, side.host.send_cq, {std::move(send_cq), -1});
    side.queues.attach_cq(side.session, side.host.recv_cq, {std::move(recv_cq), -1});
  }
}

void ServedPair::pump() {
  for (int turn = 0; turn < 1000; ++turn) {
    const transport::Nanos now = pair.net.now();
    unsigned moved = qa.drain_work(now) + qb.drain_work(now);
    REQUIRE(pair.run());
    moved += qa.deliver_completions() + qb.deliver_completions();
    qa.deliver_events();
    qb.deliver_events();
    if (moved == 0) return;
  }
  FAIL("the engine never went quiet");
}

SrqConnection::SrqConnection(ServedPair& s, Side srq_side, uint32_t srq_wr, uint32_t srq_limit) {
  const bool on_a = srq_side == Side::a;
  Host& host = on_a ? s.pair.a : s.pair.b;
  Host& peer = on_a ? s.pair.b : s.pair.a;
  engine::QueueService& host_queues = on_a ? s.qa : s.qb;
  engine::QueueService& peer_queues = on_a ? s.qb : s.qa;
  const engine::SessionId host_session = on_a ? ServedPair::session_a : ServedPair::session_b;
  const engine::SessionId peer_session = on_a ? ServedPair::session_b : ServedPair::session_a;

  REQUIRE(host.device->create_srq(host.pd, srq_wr, 1, srq_limit, srqn) == 0);
  srq_qpn = host.create_qp(verbs::QpType::rc, 64, srqn);
  peer_qpn = peer.create_qp(verbs::QpType::rc, 64);
  connect(host, srq_qpn, verbs::QpType::rc, peer.address, peer_qpn, 300, 400);
  connect(peer, peer_qpn, verbs::QpType::rc, host.address, srq_qpn, 400, 300);

  protocol::SharedRegion srq_ring = daemon_ring(srq_wr, protocol::recv_entry_size(1));
  srq = client_recv_ring(srq_ring, 1);
  host_queues.attach_srq(host_session, srqn, {std::move(srq_ring), 1});
  protocol::SharedRegion host_send = daemon_ring(64, protocol::send_entry_size(1, 64));
  srq_side_sends = client_send_ring(host_send, 1, 64);
  host_queues.attach_qp(host_session, srq_qpn, {std::move(host_send), {}, 1, 64, 0, host.send_cq});
  protocol::SharedRegion peer_send = daemon_ring(64, protocol::send_entry_size(1, 64));
  protocol::SharedRegion peer_recv = daemon_ring(8, protocol::recv_entry_size(1));
  peer_sends = client_send_ring(peer_send, 1, 64);
  peer_receives = client_recv_ring(peer_recv, 1);
  peer_queues.attach_qp(peer_session, peer_qpn, {std::move(peer_send), std::move(peer_recv), 1, 64, 1, peer.send_cq});
}

ServiceHarness::ServiceHarness(transport::DeviceLimits l) : limits(l) {
  node = net.add_node({.addresses = {address}});
  device = std::make_unique<transport::Device>(net.sink(node), limits);
  device->set_gids({address});
  device->set_active_mtu(verbs::Mtu::mtu_4096);
  endpoint = std::make_unique<sim::DeviceEndpoint>(*device);
  net.set_endpoint(node, *endpoint);
  queues = std::make_unique<engine::QueueService>(*device);
  engine = std::make_unique<InlineEngine>(*device, *queues);
  wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(wake_fd >= 0);
  status = protocol::SharedRegion::create("uroce-test-status", sizeof(protocol::EngineStatus));
  reinterpret_cast<protocol::EngineStatus*>(status.data())->magic = protocol::engine_status_magic;
  emulator::PortDescription port;
  port.port_name = "sim";
  port.gids = {address};
  service = std::make_unique<VerbsService>(*engine, port, limits, wake_fd, status.fd());
}

// The service goes first: closing its sessions still needs the engine and the device.
ServiceHarness::~ServiceHarness() {
  service.reset();
  close(wake_fd);
}

// Requests travel as JSON text (docs/control-protocol.md): going through text here gives the handler what
// the control server gives it (a non-negative number is unsigned once parsed, whatever built it).
namespace {
json as_received(const json& request) { return json::parse(request.dump()); }
}  // namespace

json ServiceHarness::call(uint64_t s, json request, std::vector<int>* fds, const std::vector<int>& with) {
  std::vector<int> got;
  json reply = service->handle(s, as_received(request), got, with);
  if (fds != nullptr) {
    fds->insert(fds->end(), got.begin(), got.end());
  } else {
    close_all(got);
  }
  return reply;
}

int ServiceHarness::error_of(uint64_t s, json request, const std::vector<int>& with) {
  std::vector<int> got;
  try {
    service->handle(s, as_received(request), got, with);
  } catch (const ServiceError& e) {
    CHECK(got.empty());  // a failed request hands out no descriptor
    close_all(got);
    return e.error;
  }
  close_all(got);
  FAIL("request succeeded but should have failed: " << request.dump());
  return 0;
}

void ServiceHarness::pump() {
  for (int turn = 0; turn < 1000; ++turn) {
    engine->set_now(net.now());
    unsigned moved = queues->drain_work(net.now());
    REQUIRE(net.run_until_idle(net.now() + 10'000'000'000ull));
    moved += queues->deliver_completions();
    queues->deliver_events();
    if (moved == 0) return;
  }
  FAIL("the engine never went quiet");
}

json qp_request(uint32_t pd, uint32_t send_cq, uint32_t recv_cq, uint32_t srq, verbs::QpCap cap) {
  return {{"op", "create_qp"}, {"pd", pd},   {"send_cq", send_cq},
          {"recv_cq", recv_cq}, {"srq", srq}, {"qp_type", uint32_t(verbs::QpType::rc)},
          {"sq_sig_all", false}, {"cap", cap}};
}

void connect_qp(ServiceHarness& h, uint64_t session, uint32_t qpn, uint32_t remote_qpn) {
  using namespace uroce::verbs;
  QpAttr a;
  a.qp_state = QpState::init;
  a.port_num = 1;
  a.qp_access_flags = access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
  h.call(session, {{"op", "modify_qp"}, {"qp_num", qpn}, {"attr", a},
                   {"attr_mask", attr_state | attr_pkey_index | attr_port | attr_access_flags}});
  a.qp_state = QpState::rtr;
  a.path_mtu = Mtu::mtu_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 16;
  a.min_rnr_timer = 1;
  a.ah_attr.dgid = h.address;
  h.call(session, {{"op", "modify_qp"}, {"qp_num", qpn}, {"attr", a},
                   {"attr_mask", attr_state | attr_av | attr_path_mtu | attr_dest_qpn | attr_rq_psn |
                                     attr_max_dest_rd_atomic | attr_min_rnr_timer}});
  a.qp_state = QpState::rts;
  a.sq_psn = 0;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 16;
  h.call(session, {{"op", "modify_qp"}, {"qp_num", qpn}, {"attr", a},
                   {"attr_mask", attr_state | attr_timeout | attr_retry_cnt | attr_rnr_retry | attr_sq_psn |
                                     attr_max_qp_rd_atomic}});
}

ClientQp create_client_qp(ServiceHarness& h, uint64_t session, uint32_t pd, uint32_t cq) {
  std::vector<int> fds;
  const json reply = h.call(session, qp_request(pd, cq, cq), &fds);
  REQUIRE(fds.size() == 2);
  const auto cap = reply.at("cap").get<verbs::QpCap>();
  ClientQp qp;
  qp.qpn = reply.at("qp_num").get<uint32_t>();
  qp.send = client::SendRing(fds[0], reply.at("send_ring_bytes").get<size_t>(), cap.max_send_wr,
                             reply.at("send_entry_size").get<uint32_t>(), cap.max_send_sge, cap.max_inline_data);
  qp.recv = client::RecvRing(fds[1], reply.at("recv_ring_bytes").get<size_t>(), cap.max_recv_wr,
                             reply.at("recv_entry_size").get<uint32_t>(), cap.max_recv_sge);
  return qp;
}

client::CompletionRing create_client_cq(ServiceHarness& h, uint64_t session, uint32_t cqe, uint32_t& cqn) {
  std::vector<int> fds;
  const json reply = h.call(session, {{"op", "create_cq"}, {"cqe", cqe}}, &fds);
  REQUIRE(fds.size() == 1);
  cqn = reply.at("cq").get<uint32_t>();
  return client::CompletionRing(fds[0], reply.at("ring_bytes").get<size_t>(), reply.at("cqe").get<uint32_t>());
}

SessionObjects create_one_of_each(ServiceHarness& h, uint64_t session, void* buffer, size_t length) {
  SessionObjects o;
  o.pd = h.call(session, {{"op", "alloc_pd"}}).at("pd").get<uint32_t>();
  o.mr = h.call(session, {{"op", "reg_mr"}, {"pd", o.pd}, {"addr", reinterpret_cast<uint64_t>(buffer)},
                          {"length", uint64_t(length)}, {"access", uint32_t(Pair::all_access)}})
             .at("lkey")
             .get<uint32_t>();
  o.channel = h.call(session, {{"op", "create_comp_channel"}}).at("channel").get<uint32_t>();
  o.cq = h.call(session, {{"op", "create_cq"}, {"cqe", 16}, {"channel", o.channel}}).at("cq").get<uint32_t>();
  o.srq = h.call(session, {{"op", "create_srq"}, {"pd", o.pd}, {"max_wr", 8}, {"max_sge", 1}, {"srq_limit", 0}})
              .at("srq")
              .get<uint32_t>();
  verbs::AddressVector av;
  av.dgid = h.address;
  o.ah = h.call(session, {{"op", "create_ah"}, {"pd", o.pd}, {"ah_attr", av}}).at("ah").get<uint32_t>();
  o.qp = h.call(session, qp_request(o.pd, o.cq, o.cq)).at("qp_num").get<uint32_t>();
  return o;
}

size_t open_fd_count() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

uint64_t smaps_kb(const void* p, const std::string& field) {
  const auto addr = reinterpret_cast<uint64_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uint64_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " ", &lo, &hi) == 2 && line.find(' ') > line.find('-')) {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind(field + ":", 0) == 0) {
      return std::stoull(line.substr(field.size() + 1));
    }
  }
  return 0;
}

void close_all(std::vector<int>& fds) {
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  fds.clear();
}

RemoteWriter::RemoteWriter(pid_t target_process) : source(pattern(3 * size_t(sysconf(_SC_PAGESIZE)), 41)) {
  h.service->open_session(1, target_process, getuid());
  h.service->open_session(2, getpid(), getuid());
  pd_1 = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  pd_2 = h.call(2, {{"op", "alloc_pd"}}).at("pd");
  source_key = h.call(2, {{"op", "reg_mr"}, {"pd", pd_2}, {"addr", reinterpret_cast<uint64_t>(source.data())},
                          {"length", uint64_t(source.size())}, {"access", uint32_t(Pair::all_access)}})
                   .at("lkey");
  uint32_t cq_1 = 0, cq_2 = 0;
  target_cq = create_client_cq(h, 1, 4, cq_1);
  send_cq = create_client_cq(h, 2, 4, cq_2);
  target = create_client_qp(h, 1, pd_1, cq_1);
  sender = create_client_qp(h, 2, pd_2, cq_2);
  connect_qp(h, 1, target.qpn, sender.qpn);
  connect_qp(h, 2, sender.qpn, target.qpn);
}

uint32_t RemoteWriter::reg(const void* addr, uint64_t length, uint32_t access) {
  return h.call(1, {{"op", "reg_mr"}, {"pd", pd_1}, {"addr", reinterpret_cast<uint64_t>(addr)},
                    {"length", length}, {"access", access}})
      .at("rkey");
}

uint32_t RemoteWriter::write(const void* addr, uint32_t rkey, uint32_t length) {
  protocol::SendEntry w = send_entry(7, verbs::WrOpcode::rdma_write);
  w.remote_addr = reinterpret_cast<uint64_t>(addr);
  w.rkey = rkey;
  const protocol::WireSge s = sge(reinterpret_cast<uint64_t>(source.data()), length, source_key);
  REQUIRE(sender.send.post(w, std::span(&s, 1), {}) == 0);
  h.pump();
  const auto done = poll_all(send_cq);
  REQUIRE(done.size() == 1);
  return done[0].status;
}

}  // namespace uroce::test::service
