// The verbs service driven by the requests the client library sends: every object's life from creation
// to destruction, and two sessions talking RDMA to each other through one device (the loopback case
// of one uroced serving two applications), with the client rings handed out in the replies.
#include <fcntl.h>
#include <unistd.h>

#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {

TEST_CASE("open_device hands out the event pipe, the wake eventfd and the status page, once", "[verbs]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  std::vector<int> fds;
  const json reply = h.call(1, {{"op", "open_device"}}, &fds);
  REQUIRE(fds.size() == 3);
  CHECK(reply.at("fds") == json({"async_events", "wake", "engine_status"}));
  CHECK(reply.at("daemon_pid").get<long>() == getpid());
  CHECK(reply.at("limits").get<transport::DeviceLimits>().max_qp == h.limits.max_qp);
  CHECK(reply.at("gids") == json({"10.0.0.1"}));
  // The status page is the daemon's, with its magic, as the client's Doorbell checks.
  client::Doorbell doorbell(protocol::SharedRegion::attach(fds[2], sizeof(protocol::EngineStatus)), fds[1]);
  CHECK_FALSE(doorbell.daemon_shutting_down());
  close(fds[0]);

  CHECK(h.error_of(1, {{"op", "open_device"}}) == EBUSY);

  // An event announced to every client arrives on the pipe open_device returned.
  std::vector<int> fds2;
  h.service->open_session(2, getpid(), getuid());
  h.call(2, {{"op", "open_device"}}, &fds2);
  h.service->announce_shutdown();
  protocol::AsyncEventRecord r{};
  REQUIRE(read(fds2[0], &r, sizeof r) == sizeof r);
  CHECK(r.type == uint32_t(verbs::EventType::device_fatal));
  close_all(fds2);
}

TEST_CASE("every object is created, used and destroyed through requests", "[verbs]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  std::vector<uint8_t> buffer(4096);
  const SessionObjects o = create_one_of_each(h, 1, buffer.data(), buffer.size());

  connect_qp(h, 1, o.qp, o.qp);  // to itself, through the device's own address
  const auto attr = h.call(1, {{"op", "query_qp"}, {"qp_num", o.qp}}).at("attr").get<verbs::QpAttr>();
  CHECK(attr.qp_state == verbs::QpState::rts);
  CHECK(attr.dest_qp_num == o.qp);
  h.call(1, {{"op", "modify_srq"}, {"srq", o.srq}, {"srq_limit", 4}});
  const json rereg = h.call(1, {{"op", "rereg_mr"}, {"key", o.mr}, {"pd", o.pd},
                                {"addr", reinterpret_cast<uint64_t>(buffer.data())}, {"length", 2048},
                                {"access", uint32_t(verbs::access_local_write)}});
  const uint32_t mr = rereg.at("lkey").get<uint32_t>();
  const json stats = h.call(1, {{"op", "stats"}});
  CHECK(stats.at("sessions") == 1);
  CHECK(stats.contains("device"));
  CHECK(stats.at("queues").contains("malformed_wr"));

  // The PD is still in use, and so is the channel: both refused.
  CHECK(h.error_of(1, {{"op", "dealloc_pd"}, {"pd", o.pd}}) == EBUSY);
  CHECK(h.error_of(1, {{"op", "destroy_comp_channel"}, {"channel", o.channel}}) == EBUSY);

  h.call(1, {{"op", "destroy_qp"}, {"qp_num", o.qp}});
  h.call(1, {{"op", "destroy_ah"}, {"ah", o.ah}});
  h.call(1, {{"op", "destroy_srq"}, {"srq", o.srq}});
  h.call(1, {{"op", "destroy_cq"}, {"cq", o.cq}});
  h.call(1, {{"op", "destroy_comp_channel"}, {"channel", o.channel}});
  h.call(1, {{"op", "dereg_mr"}, {"key", mr}});
  h.call(1, {{"op", "dealloc_pd"}, {"pd", o.pd}});

  // Gone: a second destruction is refused like an unknown handle.
  CHECK(h.error_of(1, {{"op", "destroy_qp"}, {"qp_num", o.qp}}) == EINVAL);
  CHECK(h.error_of(1, {{"op", "destroy_ah"}, {"ah", o.ah}}) == EINVAL);
  CHECK(h.error_of(1, {{"op", "destroy_srq"}, {"srq", o.srq}}) == EINVAL);
  CHECK(h.error_of(1, {{"op", "destroy_cq"}, {"cq", o.cq}}) == EINVAL);
  CHECK(h.error_of(1, {{"op", "destroy_comp_channel"}, {"channel", o.channel}}) == EINVAL);
  CHECK(h.error_of(1, {{"op", "dereg_mr"}, {"key", mr}}) == EINVAL);
  CHECK(h.error_of(1, {{"op", "dereg_mr"}, {"key", o.mr}}) == EINVAL);  // replaced by rereg_mr
  CHECK(h.error_of(1, {{"op", "dealloc_pd"}, {"pd", o.pd}}) == EINVAL);
}

TEST_CASE("two sessions exchange a SEND and an RDMA WRITE through the rings the service handed out", "[verbs]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  h.service->open_session(2, getpid(), getuid());
  std::vector<uint8_t> mem_a(65536), mem_b(65536);
  const auto data = pattern(20000, 11);
  put(mem_a, 0, data);

  const uint32_t pd_a = h.call(1, {{"op", "alloc_pd"}}).at("pd").get<uint32_t>();
  const uint32_t pd_b = h.call(2, {{"op", "alloc_pd"}}).at("pd").get<uint32_t>();
  const auto reg = [&](uint64_t s, uint32_t pd, std::vector<uint8_t>& m) {
    return h.call(s, {{"op", "reg_mr"}, {"pd", pd}, {"addr", reinterpret_cast<uint64_t>(m.data())},
                      {"length", uint64_t(m.size())}, {"access", uint32_t(Pair::all_access)}});
  };
  const json mr_a = reg(1, pd_a, mem_a), mr_b = reg(2, pd_b, mem_b);
  uint32_t cq_a = 0, cq_b = 0;
  client::CompletionRing ring_a = create_client_cq(h, 1, 30, cq_a);
  client::CompletionRing ring_b = create_client_cq(h, 2, 30, cq_b);
  CHECK(ring_a.capacity() == 32);  // rounded up to a power of two
  ClientQp qa = create_client_qp(h, 1, pd_a, cq_a);
  ClientQp qb = create_client_qp(h, 2, pd_b, cq_b);
  connect_qp(h, 1, qa.qpn, qb.qpn);
  connect_qp(h, 2, qb.qpn, qa.qpn);

  // Memory is reached with process_vm_readv/writev on our own pid (nothing was shared).
  const protocol::WireSge recv_sge = sge(reinterpret_cast<uint64_t>(mem_b.data()) + 30000, 1000, mr_b.at("lkey"));
  REQUIRE(qb.recv.post(0xb0, std::span(&recv_sge, 1)) == 0);
  const protocol::WireSge send_sge = sge(reinterpret_cast<uint64_t>(mem_a.data()), 1000, mr_a.at("lkey"));
  REQUIRE(qa.send.post(send_entry(0xa0, verbs::WrOpcode::send), std::span(&send_sge, 1), {}) == 0);
  protocol::SendEntry write = send_entry(0xa1, verbs::WrOpcode::rdma_write);
  write.remote_addr = reinterpret_cast<uint64_t>(mem_b.data());
  write.rkey = mr_b.at("rkey");
  const protocol::WireSge write_sge = sge(reinterpret_cast<uint64_t>(mem_a.data()), 20000, mr_a.at("lkey"));
  REQUIRE(qa.send.post(write, std::span(&write_sge, 1), {}) == 0);
  h.pump();

  const auto sent = poll_all(ring_a);
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].wr_id == 0xa0);
  CHECK(sent[0].status == uint32_t(verbs::WcStatus::success));
  CHECK(sent[1].wr_id == 0xa1);
  CHECK(sent[1].status == uint32_t(verbs::WcStatus::success));
  const auto received = poll_all(ring_b);
  REQUIRE(received.size() == 1);
  CHECK(received[0].wr_id == 0xb0);
  CHECK(received[0].byte_len == 1000);
  CHECK(received[0].qp_num == qb.qpn);
  CHECK((slice(mem_b, 30000, 1000) == slice(data, 0, 1000)));
  CHECK((slice(mem_b, 0, 20000) == data));
}

}  // namespace uroce::test::service

namespace uroce::test::service {

// ibv_resize_cq's daemon side: the client polls nothing meanwhile (the shim holds the CQ's lock), and must
// then find every completion it had not polled exactly once, in order, on the new ring, whether it was
// in the old ring or still in the transport's CQ; the old ring is never written again.
TEST_CASE("resize_cq moves unpolled completions onto a new ring, growing and shrinking, armed or not", "[verbs]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  h.service->open_session(2, getpid(), getuid());
  std::vector<uint8_t> mem(4096);
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd").get<uint32_t>();
  const json mr = h.call(1, {{"op", "reg_mr"}, {"pd", pd}, {"addr", reinterpret_cast<uint64_t>(mem.data())},
                             {"length", uint64_t(mem.size())}, {"access", uint32_t(Pair::all_access)}});
  std::vector<int> channel_fds;
  const uint32_t channel = h.call(1, {{"op", "create_comp_channel"}}, &channel_fds).at("channel").get<uint32_t>();
  REQUIRE(channel_fds.size() == 1);
  fcntl(channel_fds[0], F_SETFL, O_NONBLOCK);
  std::vector<int> fds;
  const json created = h.call(1, {{"op", "create_cq"}, {"cqe", 4}, {"channel", channel}}, &fds);
  REQUIRE(fds.size() == 1);
  const uint32_t cqn = created.at("cq").get<uint32_t>();
  client::CompletionRing ring(fds[0], created.at("ring_bytes").get<size_t>(), created.at("cqe").get<uint32_t>());
  ClientQp qp = create_client_qp(h, 1, pd, cqn);
  connect_qp(h, 1, qp.qpn, qp.qpn);

  const auto write = [&](uint64_t id) {
    protocol::SendEntry w = send_entry(id, verbs::WrOpcode::rdma_write);
    w.remote_addr = reinterpret_cast<uint64_t>(mem.data()) + 8 * id;
    w.rkey = mr.at("rkey");
    const protocol::WireSge s = sge(reinterpret_cast<uint64_t>(mem.data()), 8, mr.at("lkey"));
    REQUIRE(qp.send.post(w, std::span(&s, 1), {}) == 0);
  };
  const auto resize = [&](uint32_t cqe) {
    std::vector<int> got;
    const json r = h.call(1, {{"op", "resize_cq"}, {"cq", cqn}, {"cqe", cqe}}, &got);
    REQUIRE(got.size() == 1);
    return client::CompletionRing(got[0], r.at("ring_bytes").get<size_t>(), r.at("cqe").get<uint32_t>());
  };
  const auto expect_ids = [](client::CompletionRing& r, uint64_t first, size_t count) {
    std::vector<protocol::CompletionEntry> got(count);
    REQUIRE(size_t(r.poll(got)) == count);
    for (size_t i = 0; i < count; ++i) {
      CHECK(got[i].wr_id == first + i);
      CHECK(got[i].status == uint32_t(verbs::WcStatus::success));
    }
  };

  // A full CQ of 4 grows.
  for (uint64_t id = 0; id < 4; ++id) write(id);
  h.pump();
  client::CompletionRing old = std::move(ring);
  ring = resize(64);
  CHECK(ring.capacity() == 64);
  for (uint64_t id = 4; id < 6; ++id) write(id);
  h.pump();
  for (uint64_t id = 6; id < 16; ++id) write(id);
  h.pump();
  for (uint64_t id = 16; id < 26; ++id) write(id);
  h.pump();
  // The old ring still holds the 4 it had when the CQ moved (copied, not consumed), and nothing after.
  std::vector<protocol::CompletionEntry> stale(8);
  CHECK(old.poll(stale) == 4);

  CHECK(h.error_of(1, {{"op", "resize_cq"}, {"cq", cqn}, {"cqe", 16}}) == EINVAL);  // 26 do not fit in 16
  CHECK(h.error_of(1, {{"op", "resize_cq"}, {"cq", cqn}, {"cqe", 0}}) == EINVAL);
  CHECK(h.error_of(2, {{"op", "resize_cq"}, {"cq", cqn}, {"cqe", 64}}) == EINVAL);  // another session's
  expect_ids(ring, 0, 12);
  // Three more that the transport completed but the engine has not delivered yet count all the same:
  // 17 outstanding do not fit in 16 either.
  for (uint64_t id = 26; id < 29; ++id) write(id);
  h.queues->drain_work(h.net.now());
  REQUIRE(h.net.run_until_idle(h.net.now() + 10'000'000'000ull));
  CHECK(h.error_of(1, {{"op", "resize_cq"}, {"cq", cqn}, {"cqe", 16}}) == EINVAL);
  expect_ids(ring, 12, 1);
  ring = resize(16);
  CHECK(ring.capacity() == 16);
  expect_ids(ring, 13, 16);
  CHECK(poll_all(ring).empty());  // none twice

  // Armed before a resize, the CQ fires on the next completion after it.
  ring.arm(false);
  ring = resize(8);
  write(29);
  h.pump();
  const auto events = drain_records<protocol::CompletionEventRecord>(channel_fds[0]);
  REQUIRE(events.size() == 1);
  CHECK(events[0].cq == cqn);
  expect_ids(ring, 29, 1);
  CHECK(poll_all(ring).empty());
  close_all(channel_fds);
}

// Linux resolves a RoCE destination's MAC before it makes an address handle or gives a connected QP its
// address vector, and waits for it (ib_resolve_eth_dmac); the client waits the same way, asking
// resolve_neighbour until the answer is yes (client::Context::wait_for_neighbour). The request starts ARP or
// ND on each ask and refuses at once what Linux's rdma_resolve_ip refuses at once.
TEST_CASE("resolve_neighbour asks the port for the peer's MAC and refuses what no answer could fix",
          "[verbs][address]") {
  ServiceHarness h;
  std::vector<wire::IpAddress> asked;
  bool answered = false;
  h.engine->set_neighbour_known([&](const wire::IpAddress& a) {
    asked.push_back(a);
    return answered;
  });
  h.engine->set_has_route([](const wire::IpAddress& a) { return a != ip("192.168.7.7"); });
  h.service->open_session(1, getpid(), getuid());
  verbs::AddressVector av;
  av.dgid = ip("10.0.0.9");
  const json request = {{"op", "resolve_neighbour"}, {"ah_attr", av}};
  CHECK(h.call(1, request).at("known") == false);
  CHECK(h.call(1, request).at("known") == false);  // asked again: the port's resolution keeps its own schedule
  answered = true;
  CHECK(h.call(1, request).at("known") == true);
  CHECK(asked == std::vector<wire::IpAddress>(3, ip("10.0.0.9")));
  asked.clear();

  // No route: ENETUNREACH at once, nothing asked (Linux's route lookup fails the same way).
  av.dgid = ip("192.168.7.7");
  CHECK(h.error_of(1, {{"op", "resolve_neighbour"}, {"ah_attr", av}}) == ENETUNREACH);
  // A source GID the port lacks, or of the other family: EINVAL, as rdma_resolve_ip's family check.
  av.dgid = ip("10.0.0.9");
  av.sgid_index = 1;
  CHECK(h.error_of(1, {{"op", "resolve_neighbour"}, {"ah_attr", av}}) == EINVAL);
  av.sgid_index = 0;
  av.dgid = ip("fd00::9");
  CHECK(h.error_of(1, {{"op", "resolve_neighbour"}, {"ah_attr", av}}) == EINVAL);
  CHECK(asked.empty());

  // create_ah and modify_qp leave it to the client: they ask nothing themselves.
  std::vector<uint8_t> buffer(4096);
  const SessionObjects o = create_one_of_each(h, 1, buffer.data(), buffer.size());
  connect_qp(h, 1, o.qp, o.qp);
  CHECK(asked.empty());
}

}  // namespace uroce::test::service
