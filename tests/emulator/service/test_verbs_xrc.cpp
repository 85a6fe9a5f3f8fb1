// XRC domains across clients: one opened through a file is found again by every session that opens the
// same file (as the kernel finds one by inode) and lives until its last open is closed; a session that
// did not open a domain cannot build in it. XRC SRQs and QPs get the queues their halves have.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

constexpr uint64_t first = 1, second = 2, stranger = 3;

struct TempFile {
  TempFile() {
    fd = mkstemp(path);
    REQUIRE(fd >= 0);
  }
  ~TempFile() {
    close(fd);
    unlink(path);
  }
  char path[32] = "/tmp/uroce-xrcd-test-XXXXXX";
  int fd = -1;
};

json open_by_file(bool create, bool exclusive = false) {
  return {{"op", "open_xrcd"}, {"file", true}, {"create", create}, {"exclusive", exclusive}};
}

}  // namespace

TEST_CASE("xrc domains: shared through a file, alive until the last close", "[service][xrc]") {
  ServiceHarness h;
  for (uint64_t s : {first, second, stranger}) h.service->open_session(s, getpid(), getuid());
  TempFile file;
  CHECK(h.error_of(first, open_by_file(false), {file.fd}) == EINVAL);  // no domain yet, and no O_CREAT
  const uint32_t xrcd = h.call(first, open_by_file(true), nullptr, {file.fd}).at("xrcd");
  CHECK(h.call(second, open_by_file(false), nullptr, {file.fd}).at("xrcd") == xrcd);
  CHECK(h.error_of(second, open_by_file(true, true), {file.fd}) == EEXIST);
  CHECK(h.error_of(first, {{"op", "open_xrcd"}, {"file", true}, {"create", true}}) == EINVAL);  // no descriptor
  // A domain without a file is a new one every time.
  const uint32_t own = h.call(first, {{"op", "open_xrcd"}, {"create", true}}).at("xrcd");
  CHECK(own != xrcd);

  // The second session builds in the shared domain: an XRC SRQ (its CQ and PD its own) and a target QP.
  const uint32_t pd = h.call(second, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(second, {{"op", "create_cq"}, {"cqe", 16}}).at("cq");
  const json srq_request = {{"op", "create_srq"}, {"pd", pd}, {"max_wr", 16}, {"max_sge", 1}, {"xrcd", xrcd}, {"cq", cq}};
  std::vector<int> fds;
  const uint32_t srq = h.call(second, srq_request, &fds).at("srq");
  CHECK(fds.size() == 1);  // the SRQ's ring
  for (int fd : fds) close(fd);
  fds.clear();
  json target = qp_request(0, 0, 0);
  target["qp_type"] = uint32_t(verbs::QpType::xrc_recv);
  target["xrcd"] = xrcd;
  const json target_reply = h.call(second, target, &fds);
  CHECK(fds.empty());  // an XRC target has no queue of its own
  CHECK_FALSE(target_reply.contains("send_ring_bytes"));
  json initiator = qp_request(pd, cq, cq);
  initiator["qp_type"] = uint32_t(verbs::QpType::xrc_send);
  const json initiator_reply = h.call(second, initiator, &fds);
  CHECK(fds.size() == 1);  // its send queue only
  CHECK(initiator_reply.contains("send_ring_bytes"));
  CHECK_FALSE(initiator_reply.contains("recv_ring_bytes"));
  for (int fd : fds) close(fd);

  // A session that never opened the domain cannot build in it, though it exists.
  const uint32_t spd = h.call(stranger, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t scq = h.call(stranger, {{"op", "create_cq"}, {"cqe", 16}}).at("cq");
  json stranger_srq = srq_request;
  stranger_srq["pd"] = spd;
  stranger_srq["cq"] = scq;
  CHECK(h.error_of(stranger, stranger_srq) == EINVAL);
  CHECK(h.error_of(stranger, target) == EINVAL);
  CHECK(h.error_of(stranger, {{"op", "close_xrcd"}, {"xrcd", xrcd}}) == EINVAL);

  // The first session leaves: the domain stays, the second still has it open (and objects in it).
  h.service->close_session(first);
  CHECK(h.call(second, open_by_file(false), nullptr, {file.fd}).at("xrcd") == xrcd);
  CHECK(h.call(second, {{"op", "close_xrcd"}, {"xrcd", xrcd}}).is_object());
  // Its last open cannot close while its SRQ and target QP are in it.
  CHECK(h.error_of(second, {{"op", "close_xrcd"}, {"xrcd", xrcd}}) == EBUSY);
  CHECK(h.call(second, {{"op", "destroy_qp"}, {"qp_num", target_reply.at("qp_num")}}).is_object());
  CHECK(h.call(second, {{"op", "destroy_srq"}, {"srq", srq}}).is_object());
  CHECK(h.call(second, {{"op", "close_xrcd"}, {"xrcd", xrcd}}).is_object());
  // Gone with its last close: the file names no domain now.
  CHECK(h.error_of(second, open_by_file(false), {file.fd}) == EINVAL);
}

}  // namespace uroce::test::service

namespace uroce::test::service {

// ibv_open_qp: a target QP is a handle per create_qp or open_qp, of any session that opened its domain;
// the QP (and the domain it keeps) goes with the last handle.
TEST_CASE("xrc target QPs: opened by other sessions, alive until the last handle", "[service][xrc]") {
  ServiceHarness h;
  for (uint64_t s : {first, second, stranger}) h.service->open_session(s, getpid(), getuid());
  TempFile file;
  const uint32_t xrcd = h.call(first, open_by_file(true), nullptr, {file.fd}).at("xrcd");
  CHECK(h.call(second, open_by_file(false), nullptr, {file.fd}).at("xrcd") == xrcd);
  const uint32_t other_domain = h.call(second, {{"op", "open_xrcd"}, {"create", true}}).at("xrcd");
  json target = qp_request(0, 0, 0);
  target["qp_type"] = uint32_t(verbs::QpType::xrc_recv);
  target["xrcd"] = xrcd;
  const uint32_t qpn = h.call(first, target).at("qp_num");
  const uint32_t pd = h.call(first, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(first, {{"op", "create_cq"}, {"cqe", 16}}).at("cq");
  json initiator = qp_request(pd, cq, cq);
  initiator["qp_type"] = uint32_t(verbs::QpType::xrc_send);
  std::vector<int> fds;
  const uint32_t initiator_qpn = h.call(first, initiator, &fds).at("qp_num");
  for (int fd : fds) close(fd);
  const auto open = [&](uint32_t domain, uint32_t n) { return json{{"op", "open_qp"}, {"xrcd", domain}, {"qp_num", n}}; };
  const json query = {{"op", "query_qp"}, {"qp_num", qpn}};
  const json destroy = {{"op", "destroy_qp"}, {"qp_num", qpn}};

  // Refused, all alike (the kernel's EINVAL): a session that did not open the domain, another domain, a QP
  // that is no XRC target, a number no QP has.
  CHECK(h.error_of(stranger, open(xrcd, qpn)) == EINVAL);
  CHECK(h.error_of(second, open(other_domain, qpn)) == EINVAL);
  CHECK(h.error_of(second, open(xrcd, initiator_qpn)) == EINVAL);
  CHECK(h.error_of(second, open(xrcd, 0xabcdef)) == EINVAL);
  CHECK(h.error_of(second, query) == EINVAL);  // before it opens the QP, the second session cannot name it

  CHECK(h.call(second, open(xrcd, qpn)).at("qp_num") == qpn);
  CHECK(h.call(second, open(xrcd, qpn)).at("qp_num") == qpn);  // a second handle of its own
  CHECK(h.call(second, query).contains("attr"));
  // Through its handle the second session moves the QP to INIT, which the first then sees.
  json modify = {{"op", "modify_qp"}, {"qp_num", qpn}, {"attr_mask", uint32_t(verbs::attr_state | verbs::attr_pkey_index |
                                                                          verbs::attr_port | verbs::attr_access_flags)}};
  verbs::QpAttr init;
  init.qp_state = verbs::QpState::init;
  modify["attr"] = init;
  CHECK(h.call(second, modify).is_object());
  CHECK(h.call(first, query).at("attr").get<verbs::QpAttr>().qp_state == verbs::QpState::init);

  // The creator lets go of its handle, closes the domain and leaves: the QP and its domain live on.
  CHECK(h.call(first, destroy).is_object());
  CHECK(h.error_of(first, query) == EINVAL);
  CHECK(h.call(first, {{"op", "close_xrcd"}, {"xrcd", xrcd}}).is_object());
  h.service->close_session(first);
  CHECK(h.call(second, query).at("attr").get<verbs::QpAttr>().qp_state == verbs::QpState::init);
  // Two handles, two destroys; after the last the QP is gone, and so is the domain it kept.
  CHECK(h.call(second, destroy).is_object());
  CHECK(h.call(second, query).contains("attr"));
  CHECK(h.call(second, {{"op", "close_xrcd"}, {"xrcd", xrcd}}).is_object());
  CHECK(h.call(second, open_by_file(false), nullptr, {file.fd}).at("xrcd") == xrcd);  // kept by the QP
  CHECK(h.call(second, destroy).is_object());
  CHECK(h.error_of(second, query) == EINVAL);
  CHECK(h.error_of(second, open(xrcd, qpn)) == EINVAL);
  CHECK(h.call(second, {{"op", "close_xrcd"}, {"xrcd", xrcd}}).is_object());
  CHECK(h.error_of(second, open_by_file(false), {file.fd}) == EINVAL);
}

TEST_CASE("xrc target QPs: a client that dies holding one leaves it to the others", "[service][xrc]") {
  ServiceHarness h;
  for (uint64_t s : {first, second}) h.service->open_session(s, getpid(), getuid());
  TempFile file;
  const uint32_t xrcd = h.call(first, open_by_file(true), nullptr, {file.fd}).at("xrcd");
  CHECK(h.call(second, open_by_file(false), nullptr, {file.fd}).at("xrcd") == xrcd);
  json target = qp_request(0, 0, 0);
  target["qp_type"] = uint32_t(verbs::QpType::xrc_recv);
  target["xrcd"] = xrcd;
  const uint32_t qpn = h.call(second, target).at("qp_num");
  CHECK(h.call(first, {{"op", "open_qp"}, {"xrcd", xrcd}, {"qp_num", qpn}}).at("qp_num") == qpn);
  h.service->close_session(second);  // the creator dies with its handle and its open of the domain
  CHECK(h.call(first, {{"op", "query_qp"}, {"qp_num", qpn}}).contains("attr"));
  h.service->close_session(first);
  // Both gone: a new session finds no domain for the file (the QP went with the last handle, and the
  // domain with it).
  h.service->open_session(stranger, getpid(), getuid());
  CHECK(h.error_of(stranger, open_by_file(false), {file.fd}) == EINVAL);
}

}  // namespace uroce::test::service
