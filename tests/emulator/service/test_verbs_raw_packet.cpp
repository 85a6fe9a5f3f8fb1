// Raw packet QPs through the verbs service: create_flow and destroy_flow, receive work queues,
// indirection tables and RSS QPs, with the requests as the client library sends them, the capability they
// need, which session's objects they may name, malformed requests, and a session that goes away holding
// all of them.
#include <sys/wait.h>
#include <unistd.h>

#include "emulator/protocol/flow_json.hpp"
#include "transport/flow/rss_hash.hpp"
#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {

namespace {

namespace flow = transport::flow;

json raw_qp_request(uint32_t pd, uint32_t cq) {
  json r = qp_request(pd, cq, cq);
  r["qp_type"] = uint32_t(verbs::QpType::raw_packet);
  return r;
}

flow::FlowRule eth_rule() {
  flow::FlowRule rule;
  flow::Spec s;
  s.eth.dst = {{0x01, 0x50, 0x56, 0x19, 0x20, 0xa7}};
  s.eth.dst_mask = wire::MacAddress::broadcast();
  rule.specs.push_back(s);
  return rule;
}

json flow_request(uint32_t qpn, const json& attr) {
  return {{"op", "create_flow"}, {"qp_num", qpn}, {"port", 1}, {"attr", attr}};
}

// The pid of a process that has exited (and was reaped): it shows no capability at all.
pid_t gone_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  return child;
}

}  // namespace

TEST_CASE("flow rules: created on the session's raw packet QP, kept by the session, destroyed by handle",
          "[verbs][flow]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());  // the tests run as root: CAP_NET_RAW
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(1, {{"op", "create_cq"}, {"cqe", 4}}).at("cq");
  const uint32_t raw = h.call(1, raw_qp_request(pd, cq)).at("qp_num");
  const uint32_t rc = h.call(1, qp_request(pd, cq, cq)).at("qp_num");

  const uint32_t handle = h.call(1, flow_request(raw, eth_rule())).at("flow");
  CHECK(h.device->has_flows());
  CHECK(h.error_of(1, {{"op", "destroy_qp"}, {"qp_num", raw}}) == EBUSY);  // its rule holds it
  CHECK(h.error_of(1, flow_request(rc, eth_rule())) == EINVAL);          // not a raw packet QP

  // Another session names neither the QP nor the rule.
  h.service->open_session(2, getpid(), getuid());
  CHECK(h.error_of(2, flow_request(raw, eth_rule())) == EINVAL);
  CHECK(h.error_of(2, {{"op", "destroy_flow"}, {"flow", handle}}) == EINVAL);

  h.call(1, {{"op", "destroy_flow"}, {"flow", handle}});
  CHECK_FALSE(h.device->has_flows());
  CHECK(h.error_of(1, {{"op", "destroy_flow"}, {"flow", handle}}) == EINVAL);
  h.call(1, {{"op", "destroy_qp"}, {"qp_num", raw}});

  SECTION("a session that goes away with rules on its QPs: rules first, then the QPs, nothing left") {
    const uint32_t again = h.call(1, raw_qp_request(pd, cq)).at("qp_num");
    h.call(1, flow_request(again, eth_rule()));
    flow::FlowRule sniffer;
    sniffer.type = flow::AttrType::sniffer;
    h.call(1, flow_request(again, sniffer));
    CHECK(h.device->has_sniffers());
    h.service->close_session(1);
    CHECK_FALSE(h.device->has_flows());
    uint32_t count = 0;
    h.device->for_each_qp_counters([&](uint32_t, const transport::QpCounters&) { ++count; });
    CHECK(count == 0);
  }
}

TEST_CASE("flow rules and raw packet QPs need CAP_NET_RAW, as in the kernel", "[verbs][flow]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(1, {{"op", "create_cq"}, {"cqe", 4}}).at("cq");
  const uint32_t raw = h.call(1, raw_qp_request(pd, cq)).at("qp_num");
  CHECK(emulator::process_has_net_raw(getpid()));
  const pid_t gone = gone_pid();
  CHECK_FALSE(emulator::process_has_net_raw(gone));
  // The same session's QP, asked for by a process (a joined child, say) without the capability.
  json request = json::parse(flow_request(raw, eth_rule()).dump());  // numbers as they arrive: unsigned
  std::vector<int> fds;
  CHECK_THROWS_MATCHES(h.service->handle(1, request, fds, {}, gone), emulator::ServiceError,
                       Catch::Predicate<emulator::ServiceError>([](const emulator::ServiceError& e) { return e.error == EPERM; }));
  h.service->open_session(2, gone, getuid());
  const uint32_t pd2 = h.call(2, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq2 = h.call(2, {{"op", "create_cq"}, {"cqe", 4}}).at("cq");
  CHECK(h.error_of(2, raw_qp_request(pd2, cq2)) == EPERM);
  CHECK(h.call(2, qp_request(pd2, cq2, cq2)).contains("qp_num"));  // other QPs need nothing
}

TEST_CASE("malformed flow rules are refused with EINVAL (or EOPNOTSUPP), leaving nothing", "[verbs][flow][bad]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(1, {{"op", "create_cq"}, {"cqe", 4}}).at("cq");
  const uint32_t raw = h.call(1, raw_qp_request(pd, cq)).at("qp_num");
  const json good = eth_rule();

  auto with = [&](const std::function<void(json&)>& change) {
    json attr = good;
    change(attr);
    return flow_request(raw, attr);
  };
  const std::vector<json> refused = {
      {{"op", "create_flow"}, {"qp_num", raw}},                                        // no attr
      flow_request(raw, "eth"),                                                      // not an object
      with([](json& a) { a["type"] = 4; }),                                          // no such attribute type
      with([](json& a) { a["type"] = -1; }),
      with([](json& a) { a["priority"] = 65536; }),                                  // past 16 bits
      with([](json& a) { a["priority"] = -1; }),
      with([](json& a) { a["flags"] = 0x80; }),                                      // an unknown flag
      with([](json& a) { a["specs"] = json::object(); }),                            // not an array
      with([](json& a) { a["specs"][0]["type"] = "vxlan"; }),                        // no such spec
      with([](json& a) { a["specs"][0]["dst_mac"] = json::array({1, 2, 3}); }),      // not 6 bytes
      with([](json& a) { a["specs"][0]["dst_mac"] = json::array({1, 2, 3, 4, 5, 256}); }),
      with([](json& a) { a["specs"][0]["ether_type"] = 0x10000; }),                  // past 16 bits
      with([](json& a) { a["specs"][0]["ether_type_mask"] = "all"; }),
      with([](json& a) { a["specs"][0]["ether_type"] = -2; }),
      with([](json& a) { a["type"] = uint32_t(flow::AttrType::sniffer); }),         // specs on a sniffer
      with([](json& a) { a["specs"].push_back({{"type", "ipv4"}, {"src_ip", 1ull << 32}}); }),
      with([](json& a) { a["specs"].push_back({{"type", "ipv6"}, {"src_ip", json::array({1})}}); }),
      with([](json& a) { a["specs"].push_back({{"type", "udp"}, {"dst_port", 70000}}); }),
      {{"op", "create_flow"}, {"qp_num", raw}, {"port", 2}, {"attr", good}},           // no such port
      {{"op", "create_flow"}, {"qp_num", 0x123456}, {"attr", good}},                  // no such QP
      {{"op", "destroy_flow"}},                                                       // no handle
      {{"op", "destroy_flow"}, {"flow", "one"}},
  };
  for (const json& r : refused) {
    INFO(r.dump());
    CHECK(h.error_of(1, r) == EINVAL);
  }
  CHECK(h.error_of(1, with([](json& a) { a["flags"] = flow::flag_egress; })) == EOPNOTSUPP);
  CHECK_FALSE(h.device->has_flows());
  // What was refused left the QP free to go.
  h.call(1, {{"op", "destroy_qp"}, {"qp_num", raw}});
}

TEST_CASE("work queues, indirection tables and RSS QPs: created, used in order, refused out of order",
          "[verbs][rss]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(1, {{"op", "create_cq"}, {"cqe", 64}}).at("cq");
  std::vector<int> fds;
  const json wq_reply =
      h.call(1, {{"op", "create_wq"}, {"pd", pd}, {"cq", cq}, {"max_wr", 5}, {"max_sge", 2}}, &fds);
  CHECK(fds.size() == 1);  // its receive ring
  close_all(fds);
  CHECK(wq_reply.at("max_wr") == 8);  // rounded up to the ring's power of two
  const uint32_t wq = wq_reply.at("wq");
  const uint32_t wq2 = h.call(1, {{"op", "create_wq"}, {"pd", pd}, {"cq", cq}, {"max_wr", 8}, {"max_sge", 1}}).at("wq");
  transport::WqState state{};
  REQUIRE(h.device->query_wq_state(wq, state) == 0);
  CHECK(state == transport::WqState::reset);
  h.call(1, {{"op", "modify_wq"}, {"wq", wq}, {"state", 1}});
  REQUIRE(h.device->query_wq_state(wq, state) == 0);
  CHECK(state == transport::WqState::ready);

  CHECK(h.error_of(1, {{"op", "create_rwq_ind_table"}, {"wqs", json::array({wq, wq2, wq})}}) == EINVAL);  // not 2^n
  const uint32_t table = h.call(1, {{"op", "create_rwq_ind_table"}, {"wqs", json::array({wq, wq2})}}).at("ind_table");
  CHECK(h.error_of(1, {{"op", "destroy_wq"}, {"wq", wq}}) == EBUSY);  // in the table

  json rss = raw_qp_request(pd, cq);
  rss.erase("send_cq");
  rss.erase("recv_cq");
  rss["ind_table"] = table;
  rss["rx_hash_fields"] = uint64_t(flow::hash_src_ipv4 | flow::hash_dst_ipv4);
  rss["rx_hash_key"] = std::vector<uint8_t>(40, 0x6d);
  fds.clear();
  const json qp_reply = h.call(1, rss, &fds);
  CHECK(fds.empty());  // no rings: an RSS QP neither sends nor has a receive queue
  CHECK_FALSE(qp_reply.contains("send_ring_bytes"));
  const uint32_t qpn = qp_reply.at("qp_num");
  CHECK(h.error_of(1, {{"op", "destroy_rwq_ind_table"}, {"ind_table", table}}) == EBUSY);  // the QP uses it

  json short_key = rss;
  short_key["rx_hash_key"] = std::vector<uint8_t>(16, 1);
  CHECK(h.error_of(1, short_key) == EINVAL);
  json both_ports = rss;
  both_ports["rx_hash_fields"] = uint64_t(flow::hash_src_port_tcp | flow::hash_src_port_udp);
  CHECK(h.error_of(1, both_ports) == EINVAL);
  json rc_rss = rss;
  rc_rss["qp_type"] = uint32_t(verbs::QpType::rc);
  CHECK(h.error_of(1, rc_rss) == EINVAL);
  json not_bytes = rss;
  not_bytes["rx_hash_key"] = json::array({1, 2, 300});
  CHECK(h.error_of(1, not_bytes) == EINVAL);
  // Another session names none of them.
  h.service->open_session(2, getpid(), getuid());
  CHECK(h.error_of(2, {{"op", "modify_wq"}, {"wq", wq}, {"state", 2}}) == EINVAL);
  CHECK(h.error_of(2, {{"op", "create_rwq_ind_table"}, {"wqs", json::array({wq})}}) == EINVAL);
  CHECK(h.error_of(1, {{"op", "modify_wq"}, {"wq", wq}, {"state", 3}}) == EINVAL);  // no such state
  CHECK(h.error_of(1, {{"op", "create_wq"}, {"pd", pd}, {"cq", cq}, {"max_wr", 0}, {"max_sge", 1}}) == EINVAL);

  SECTION("in order: the QP, then the table, then the work queues") {
    h.call(1, {{"op", "destroy_qp"}, {"qp_num", qpn}});
    h.call(1, {{"op", "destroy_rwq_ind_table"}, {"ind_table", table}});
    h.call(1, {{"op", "destroy_wq"}, {"wq", wq}});
    h.call(1, {{"op", "destroy_wq"}, {"wq", wq2}});
    CHECK(h.device->query_wq_state(wq, state) == EINVAL);
  }
  SECTION("a session that goes away holding all of them, with a rule on the QP: nothing is left") {
    flow::FlowRule rule = eth_rule();
    h.call(1, flow_request(qpn, rule));
    h.service->close_session(1);
    CHECK_FALSE(h.device->has_flows());
    CHECK(h.device->query_wq_state(wq, state) == EINVAL);
    uint32_t count = 0;
    h.device->for_each_qp_counters([&](uint32_t, const transport::QpCounters&) { ++count; });
    CHECK(count == 0);
    // The PD went last of all: a new session's PD may be created and freed.
    const uint32_t pd3 = h.call(2, {{"op", "alloc_pd"}}).at("pd");
    h.call(2, {{"op", "dealloc_pd"}, {"pd", pd3}});
  }
}

TEST_CASE("a flow rule travels as JSON and back unchanged", "[verbs][flow]") {
  flow::FlowRule rule;
  rule.type = flow::AttrType::normal;
  rule.priority = 7;
  rule.flags = flow::flag_dont_trap;
  rule.drop = true;
  flow::Spec eth;
  eth.eth.dst = {{1, 2, 3, 4, 5, 6}};
  eth.eth.dst_mask = {{0xff, 0xff, 0xff, 0, 0, 0}};
  eth.eth.src = {{7, 8, 9, 10, 11, 12}};
  eth.eth.ether_type = 0x86dd;
  eth.eth.ether_type_mask = 0xffff;
  eth.eth.vlan_tag = 0x0123;
  eth.eth.vlan_tag_mask = 0x0fff;
  flow::Spec v4;
  v4.kind = flow::Spec::Kind::ipv4;
  v4.ipv4 = {0x01020304, 0xffffffff, 0x05060708, 0xffff0000, 17, 0xff, 0x28, 0xfc, 64, 0xff, 2, 7};
  flow::Spec v6;
  v6.kind = flow::Spec::Kind::ipv6;
  v6.ipv6.src[0] = 0xfe;
  v6.ipv6.src_mask[0] = 0xff;
  v6.ipv6.dst[15] = 1;
  v6.ipv6.dst_mask[15] = 0xff;
  v6.ipv6.flow_label = 0xabcde;
  v6.ipv6.flow_label_mask = 0xfffff;
  v6.ipv6.next_hdr = 6;
  v6.ipv6.next_hdr_mask = 0xff;
  v6.ipv6.traffic_class = 0x10;
  v6.ipv6.traffic_class_mask = 0xf0;
  v6.ipv6.hop_limit = 1;
  v6.ipv6.hop_limit_mask = 0xff;
  flow::Spec tcp;
  tcp.kind = flow::Spec::Kind::l4;
  tcp.l4 = {6, 80, 0xffff, 1024, 0xfc00};
  rule.specs = {eth, v4, v6, tcp};
  const json j = rule;
  const flow::FlowRule back = j.get<flow::FlowRule>();
  CHECK(json(back) == j);
  CHECK(back.specs.size() == 4);
  CHECK(back.drop);
  CHECK(back.specs[3].l4.protocol == 6);
  CHECK(back.specs[2].ipv6.flow_label == 0xabcde);
  CHECK(back.specs[0].eth.dst_mask.bytes == eth.eth.dst_mask.bytes);
}

}  // namespace uroce::test::service
