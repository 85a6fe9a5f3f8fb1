// XRC domains across clients: one opened through a file is found again by every session that opens the
// same file (as the kernel finds one by inode) and lives until its last open is closed; a session that
// did not open a domain cannot build in it. XRC SRQs and QPs get the queues their halves have.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

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
