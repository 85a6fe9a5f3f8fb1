// Tag matching SRQs through the verbs service: create_srq with a "tm" object and post_srq_ops, with the
// requests as the client library sends them. What the list operations alone show (messages are matched by
// the transport, tested with it): ADD's handles, each operation's completion on the SRQ's CQ (opcode,
// wr_id, IBV_WC_TM_ERR for a DEL of no entry, IBV_WC_TM_SYNC_REQ while the unexpected count software
// reports differs from the device's), ENOMEM at max_num_tags, operations carried out up to the first one
// refused; malformed requests, another session's objects, and a session that goes away holding all of it.
#include <unistd.h>

#include <array>
#include <functional>

#include "emulator/protocol/tag_op_json.hpp"
#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

using verbs::TagOp;
using verbs::TagOpcode;
using verbs::WcOpcode;
using verbs::WcStatus;

constexpr uint64_t owner = 1, other = 2;

// One session's PD, a registered buffer, a CQ whose ring the test polls, and a TM SRQ completing to it.
struct TmSession {
  TmSession(ServiceHarness& harness, uint64_t id, uint32_t max_num_tags = 4) : h(harness), session(id) {
    pd = h.call(session, {{"op", "alloc_pd"}}).at("pd");
    mr = h.call(session, {{"op", "reg_mr"}, {"pd", pd}, {"addr", addr(0)}, {"length", uint64_t(buffer.size())},
                          {"access", uint32_t(Pair::all_access)}})
             .at("lkey");
    std::vector<int> fds;
    const json reply = h.call(session, {{"op", "create_cq"}, {"cqe", 64}}, &fds);
    REQUIRE(fds.size() == 1);
    cqn = reply.at("cq");
    cq = client::CompletionRing(fds[0], reply.at("ring_bytes").get<size_t>(), reply.at("cqe").get<uint32_t>());
    fds.clear();
    srq = h.call(session, tm_srq_request(max_num_tags, 8), &fds).at("srq");
    CHECK(fds.size() == 1);  // its ring: its ordinary receives are posted there, as to any SRQ's
    close_all(fds);
  }

  json tm_srq_request(uint32_t max_num_tags, uint32_t max_ops) const {
    return {{"op", "create_srq"}, {"pd", pd},   {"max_wr", 16},
            {"max_sge", 1},       {"cq", cqn}, {"tm", {{"max_num_tags", max_num_tags}, {"max_ops", max_ops}}}};
  }
  uint64_t addr(size_t offset) const { return reinterpret_cast<uint64_t>(buffer.data() + offset); }

  static TagOp tag_op(TagOpcode opcode, uint64_t wr_id, uint32_t flags) {
    TagOp op;
    op.wr_id = wr_id;
    op.opcode = opcode;
    op.flags = flags;
    return op;
  }
  // A tagged buffer of 64 bytes at `offset` of the buffer.
  TagOp add(uint64_t wr_id, uint64_t tag, size_t offset = 0, uint32_t flags = verbs::tag_op_signaled) const {
    TagOp op = tag_op(TagOpcode::add, wr_id, flags);
    op.recv_wr_id = wr_id + 1000;
    op.tag = tag;
    op.mask = 0xffff;
    op.sg_list.push_back({addr(offset), 64, mr});
    return op;
  }
  static TagOp del(uint64_t wr_id, uint32_t handle, uint32_t flags = verbs::tag_op_signaled) {
    TagOp op = tag_op(TagOpcode::del, wr_id, flags);
    op.handle = handle;
    return op;
  }
  // A SYNC reporting `handled` unexpected messages (IBV_OPS_TM_SYNC).
  static TagOp sync(uint64_t wr_id, uint32_t handled) {
    TagOp op = tag_op(TagOpcode::sync, wr_id, verbs::tag_op_signaled | verbs::tag_op_sync);
    op.unexpected_cnt = handled;
    return op;
  }

  json post(const std::vector<TagOp>& ops, uint64_t as = 0) const {
    return h.call(as ? as : session, ops_request(ops));
  }
  json ops_request(const std::vector<TagOp>& ops) const {
    json list = json::array();
    for (const TagOp& op : ops) list.push_back(op);
    return {{"op", "post_srq_ops"}, {"srq", srq}, {"ops", list}};
  }
  std::vector<protocol::CompletionEntry> completions() { return poll_all(cq); }

  ServiceHarness& h;
  uint64_t session;
  std::array<uint8_t, 4096> buffer{};
  uint32_t pd = 0, mr = 0, cqn = 0, srq = 0;
  client::CompletionRing cq;
};

bool is(const protocol::CompletionEntry& c, uint64_t wr_id, WcOpcode opcode, WcStatus status = WcStatus::success,
        uint32_t wc_flags = 0) {
  UNSCOPED_INFO("completion: wr_id " << c.wr_id << " opcode " << c.opcode << " status " << c.status << " wc_flags "
                                     << c.wc_flags << " tm_tag " << c.tm_tag << " tm_priv " << c.tm_priv);
  // A list operation's completion carries no tag information (only a receive's does).
  return c.wr_id == wr_id && c.opcode == uint32_t(opcode) && c.status == uint32_t(status) && c.wc_flags == wc_flags &&
         c.tm_tag == 0 && c.tm_priv == 0;
}

std::vector<uint32_t> handles_of(const json& reply) { return reply.at("handles").get<std::vector<uint32_t>>(); }

}  // namespace

TEST_CASE("tag matching SRQs: ADD, DEL and SYNC complete on the SRQ's CQ", "[verbs][tm]") {
  ServiceHarness h;
  h.service->open_session(owner, getpid(), getuid());
  TmSession t(h, owner);

  const json added = t.post({t.add(11, 0x1234), t.add(12, 0x5678, 64)});
  CHECK_FALSE(added.contains("failed"));
  const std::vector<uint32_t> handles = handles_of(added);
  REQUIRE(handles.size() == 2);
  CHECK(handles[0] != 0);
  CHECK(handles[1] != handles[0]);
  // In the ring when the reply leaves: ibv_post_srq_ops returns, the application polls at once.
  std::vector<protocol::CompletionEntry> got = t.completions();
  REQUIRE(got.size() == 2);
  CHECK(is(got[0], 11, WcOpcode::tm_add));
  CHECK(is(got[1], 12, WcOpcode::tm_add));

  CHECK(handles_of(t.post({t.del(13, handles[0])})) == std::vector<uint32_t>{0});
  // A DEL of an entry that is not there (gone already, or never added) is carried out and completes with
  // IBV_WC_TM_ERR, signalled or not, as a failed work request does.
  CHECK(handles_of(t.post({t.del(14, handles[0], 0), t.del(15, 0x7777)})) == std::vector<uint32_t>{0, 0});
  got = t.completions();
  REQUIRE(got.size() == 3);
  CHECK(is(got[0], 13, WcOpcode::tm_del));
  CHECK(is(got[1], 14, WcOpcode::tm_del, WcStatus::tm_err));
  CHECK(is(got[2], 15, WcOpcode::tm_del, WcStatus::tm_err));

  // An unsignalled ADD that succeeds completes nothing.
  CHECK(handles_of(t.post({t.add(16, 0x9999, 128, 0)})).at(0) != 0);
  CHECK(t.completions().empty());

  // Software reports 3 unexpected messages handled, the device delivered none: out of step, every list
  // operation's completion asks for a SYNC (IBV_WC_TM_SYNC_REQ) until one brings the counts together.
  t.post({t.sync(17, 3), t.add(18, 0x4321, 192)});
  t.post({t.sync(19, 0)});
  got = t.completions();
  REQUIRE(got.size() == 3);
  CHECK(is(got[0], 17, WcOpcode::tm_sync, WcStatus::success, verbs::wc_tm_sync_req));
  CHECK(is(got[1], 18, WcOpcode::tm_add, WcStatus::success, verbs::wc_tm_sync_req));
  CHECK(is(got[2], 19, WcOpcode::tm_sync));
}

TEST_CASE("tag matching SRQs: the device's capabilities are in open_device's reply", "[verbs][tm]") {
  ServiceHarness h;
  h.service->open_session(owner, getpid(), getuid());
  std::vector<int> fds;
  const transport::DeviceLimits limits =
      h.call(owner, {{"op", "open_device"}}, &fds).at("limits").get<transport::DeviceLimits>();
  close_all(fds);
  CHECK(limits.max_num_tags == h.limits.max_num_tags);
  CHECK(limits.max_tm_ops == h.limits.max_tm_ops);
  CHECK(limits.max_rndv_hdr_size == h.limits.max_rndv_hdr_size);
  CHECK(limits.max_tm_sge == h.limits.max_tm_sge);
}

TEST_CASE("tag matching SRQs: operations are carried out up to the first refused, which the reply names",
          "[verbs][tm]") {
  ServiceHarness h;
  h.service->open_session(owner, getpid(), getuid());
  h.service->open_session(other, getpid(), getuid());
  TmSession t(h, owner, 2);
  TmSession stranger(h, other);
  const auto failed = [](const json& reply, size_t index, int error) {
    INFO(reply.dump());
    return reply.contains("failed") && reply.at("failed").at("index") == index &&
           reply.at("failed").at("errno") == error && reply.at("failed").at("error").is_string() &&
           reply.at("handles").size() == index;
  };

  SECTION("a full list: ENOMEM, and what came after it is not tried") {
    const json reply = t.post({t.add(1, 1), t.add(2, 2), t.add(3, 3), t.sync(4, 0)});
    CHECK(failed(reply, 2, ENOMEM));
    const std::vector<protocol::CompletionEntry> got = t.completions();
    REQUIRE(got.size() == 2);
    CHECK(is(got[0], 1, WcOpcode::tm_add));
    CHECK(is(got[1], 2, WcOpcode::tm_add));
    // A DEL makes room again.
    const json again = t.post({TmSession::del(5, handles_of(reply).at(0)), t.add(6, 6)});
    CHECK_FALSE(again.contains("failed"));
    CHECK(handles_of(again).at(1) != 0);
  }
  SECTION("what the device refuses: an unknown opcode or flag, more SGEs than a tagged buffer takes") {
    TagOp unknown = t.sync(2, 0);
    unknown.opcode = TagOpcode(3);
    CHECK(failed(t.post({t.add(1, 1), unknown}), 1, EINVAL));
    TagOp flagged = t.sync(3, 0);
    flagged.flags |= 4;
    CHECK(failed(t.post({flagged}), 0, EINVAL));
    TagOp wide = t.add(4, 4);
    for (uint32_t i = 0; i < h.limits.max_tm_sge; ++i) wide.sg_list.push_back({t.addr(256), 8, t.mr});
    CHECK(failed(t.post({wide}), 0, EINVAL));
    const std::vector<protocol::CompletionEntry> got = t.completions();
    REQUIRE(got.size() == 1);  // the first ADD's
    CHECK(is(got[0], 1, WcOpcode::tm_add));
  }
  SECTION("a tagged buffer in another session's region, or in none") {
    CHECK(failed(t.post({t.add(1, 1), stranger.add(2, 2)}), 1, EINVAL));
    TagOp nowhere = t.add(3, 3);
    nowhere.sg_list.clear();
    nowhere.sg_list.push_back({t.addr(0), 64, 0x00abcdef});
    CHECK(failed(t.post({nowhere}), 0, EINVAL));
    CHECK(t.completions().size() == 1);
    CHECK(stranger.completions().empty());
  }
  SECTION("an SRQ that is not a tag matching one has no list") {
    std::vector<int> fds;
    const uint32_t basic =
        h.call(owner, {{"op", "create_srq"}, {"pd", t.pd}, {"max_wr", 4}, {"max_sge", 1}}, &fds).at("srq");
    close_all(fds);
    json request = t.ops_request({t.sync(1, 0)});
    request["srq"] = basic;
    CHECK(failed(h.call(owner, request), 0, EINVAL));
  }
}

TEST_CASE("tag matching SRQs: malformed requests are EINVAL and do nothing", "[verbs][tm][bad]") {
  ServiceHarness h;
  h.service->open_session(owner, getpid(), getuid());
  h.service->open_session(other, getpid(), getuid());
  TmSession t(h, owner);
  TmSession stranger(h, other);

  const uint32_t xrcd = h.call(owner, {{"op", "open_xrcd"}, {"create", true}}).at("xrcd");
  const auto create_with = [&](const std::function<void(json&)>& change) {
    json r = t.tm_srq_request(4, 8);
    change(r);
    return r;
  };
  const std::vector<json> refused_creates = {
      create_with([](json& r) { r["tm"] = 4; }),                                   // not an object
      create_with([](json& r) { r["tm"].erase("max_num_tags"); }),
      create_with([](json& r) { r["tm"].erase("max_ops"); }),
      create_with([](json& r) { r["tm"]["max_num_tags"] = 0; }),
      create_with([&](json& r) { r["tm"]["max_num_tags"] = h.limits.max_num_tags + 1; }),
      create_with([](json& r) { r["tm"]["max_ops"] = 0; }),
      create_with([&](json& r) { r["tm"]["max_ops"] = h.limits.max_tm_ops + 1; }),
      create_with([](json& r) { r["tm"]["max_ops"] = (uint64_t(1) << 32) + 8; }),  // not cut to 8
      create_with([](json& r) { r["tm"]["max_num_tags"] = -4; }),
      create_with([](json& r) { r["tm"]["max_num_tags"] = "4"; }),
      create_with([](json& r) { r["tm"]["max_ops"] = 1.5; }),
      create_with([](json& r) { r.erase("cq"); }),                                 // a TM SRQ needs its CQ
      create_with([&](json& r) { r["cq"] = stranger.cqn; }),                       // another session's
      create_with([](json& r) { r["cq"] = "cq"; }),
      create_with([&](json& r) { r["xrcd"] = xrcd; }),                             // XRC and TM at once
  };
  for (const json& r : refused_creates) {
    INFO(r.dump());
    CHECK(h.error_of(owner, r) == EINVAL);
  }

  const json good = json(t.add(1, 1));
  const auto ops_with = [&](const std::function<void(json&)>& change) {
    json op = good;
    change(op);
    return json{{"op", "post_srq_ops"}, {"srq", t.srq}, {"ops", json::array({good, op})}};
  };
  const std::vector<json> refused_posts = {
      {{"op", "post_srq_ops"}, {"ops", json::array({good})}},                    // no SRQ
      {{"op", "post_srq_ops"}, {"srq", "one"}, {"ops", json::array({good})}},
      {{"op", "post_srq_ops"}, {"srq", (uint64_t(1) << 32) + t.srq}, {"ops", json::array({good})}},
      {{"op", "post_srq_ops"}, {"srq", stranger.srq}, {"ops", json::array({good})}},  // another session's
      {{"op", "post_srq_ops"}, {"srq", t.srq}},                                   // no ops
      {{"op", "post_srq_ops"}, {"srq", t.srq}, {"ops", good}},                    // not an array
      {{"op", "post_srq_ops"}, {"srq", t.srq}, {"ops", json::array({good, 7})}},  // an op that is no object
      ops_with([](json& op) { op["wr_id"] = -1; }),
      ops_with([](json& op) { op["wr_id"] = "x"; }),
      ops_with([](json& op) { op["opcode"] = 256; }),  // beyond the field: not cut to ADD
      ops_with([](json& op) { op["opcode"] = "add"; }),
      ops_with([](json& op) { op["flags"] = uint64_t(1) << 32; }),
      ops_with([](json& op) { op["unexpected_cnt"] = -1; }),
      ops_with([](json& op) { op["handle"] = (uint64_t(1) << 32) + 1; }),
      ops_with([](json& op) { op["recv_wr_id"] = 2.5; }),
      ops_with([](json& op) { op["tag"] = json::array(); }),
      ops_with([](json& op) { op["mask"] = -1; }),
      ops_with([](json& op) { op["sg_list"] = 5; }),
      ops_with([](json& op) { op["sg_list"] = json::array({json::array({1, 2})}); }),        // not a triple
      ops_with([](json& op) { op["sg_list"] = json::array({json::array({1, 2, 3, 4})}); }),
      ops_with([](json& op) { op["sg_list"] = json::array({json::object()}); }),
      ops_with([](json& op) { op["sg_list"][0][0] = -8; }),                     // addr
      ops_with([](json& op) { op["sg_list"][0][1] = uint64_t(1) << 32; }),      // length
      ops_with([](json& op) { op["sg_list"][0][2] = "lkey"; }),
  };
  for (const json& r : refused_posts) {
    INFO(r.dump());
    CHECK(h.error_of(owner, r) == EINVAL);
  }
  // Nothing reached the device: not even the good first operation of each, and the list is empty.
  CHECK(t.completions().empty());
  CHECK(stranger.completions().empty());
  const json fill = t.post({t.add(1, 1), t.add(2, 2), t.add(3, 3), t.add(4, 4)});
  CHECK_FALSE(fill.contains("failed"));
  // An empty list does nothing, and is no error.
  CHECK(handles_of(t.post({})).empty());
}

TEST_CASE("tag matching SRQs: another session can neither use nor destroy one, and one goes with its session",
          "[verbs][tm]") {
  ServiceHarness h;
  h.service->open_session(owner, getpid(), getuid());
  h.service->open_session(other, getpid(), getuid());
  TmSession t(h, owner);
  TmSession stranger(h, other);
  const uint32_t tag_handle = handles_of(t.post({t.add(1, 1)})).at(0);
  CHECK(h.error_of(other, {{"op", "destroy_srq"}, {"srq", t.srq}}) == EINVAL);
  CHECK(h.error_of(other, {{"op", "modify_srq"}, {"srq", t.srq}, {"srq_limit", 1}}) == EINVAL);
  CHECK(h.error_of(other, t.ops_request({TmSession::del(2, tag_handle)})) == EINVAL);
  CHECK(h.error_of(other, qp_request(stranger.pd, stranger.cqn, stranger.cqn, t.srq)) == EINVAL);

  // A QP on the TM SRQ: the SRQ and its CQ are held while it is there.
  const uint32_t qpn = h.call(owner, qp_request(t.pd, t.cqn, t.cqn, t.srq)).at("qp_num");
  CHECK(h.error_of(owner, {{"op", "destroy_srq"}, {"srq", t.srq}}) == EBUSY);

  SECTION("destroyed in order") {
    h.call(owner, {{"op", "destroy_qp"}, {"qp_num", qpn}});
    CHECK(h.error_of(owner, {{"op", "destroy_cq"}, {"cq", t.cqn}}) == EBUSY);  // the SRQ completes to it
    h.call(owner, {{"op", "destroy_srq"}, {"srq", t.srq}});
    CHECK(h.error_of(owner, t.ops_request({t.sync(3, 0)})) == EINVAL);
    h.call(owner, {{"op", "destroy_cq"}, {"cq", t.cqn}});
  }
  SECTION("the session goes away holding the QP, the SRQ with a tagged buffer, its CQ and region") {
    h.service->close_session(owner);
    uint32_t handle = 0;
    CHECK(h.device->post_srq_op(t.srq, TmSession::sync(3, 0), handle, 0) == EINVAL);  // no such SRQ
    CHECK(h.device->destroy_cq(t.cqn) == EINVAL);                                    // gone too
    CHECK(h.device->dereg_mr(t.mr) != 0);
    // The other session's SRQ is untouched.
    CHECK(handles_of(stranger.post({stranger.add(4, 4)})).size() == 1);
  }
}

TEST_CASE("a list operation travels as JSON and back unchanged", "[verbs][tm]") {
  TagOp op;
  op.wr_id = ~uint64_t(0);
  op.opcode = TagOpcode::add;
  op.flags = verbs::tag_op_signaled | verbs::tag_op_sync;
  op.unexpected_cnt = 0xffffffff;
  op.handle = 9;
  op.recv_wr_id = 0x8000000000000001ull;
  op.tag = 0xfedcba9876543210ull;
  op.mask = 0xffff0000ffff0000ull;
  op.sg_list.push_back({0x7fff00001000ull, 4096, 0x1234});
  op.sg_list.push_back({1, 0, 0xffffffff});
  const json j = json::parse(json(op).dump());  // as it arrives
  const TagOp back = j.get<TagOp>();
  CHECK(json(back) == j);
  CHECK(back.wr_id == op.wr_id);
  CHECK(back.tag == op.tag);
  CHECK(back.mask == op.mask);
  REQUIRE(back.sg_list.size() == 2);
  CHECK(back.sg_list[1].lkey == 0xffffffff);
  // Fields left out are 0.
  const TagOp bare = json::parse(R"({"opcode": 2})").get<TagOp>();
  CHECK(bare.opcode == TagOpcode::sync);
  CHECK(bare.wr_id == 0);
  CHECK(bare.sg_list.empty());
}

}  // namespace uroce::test::service
