// Requests a broken or hostile client can send: missing or mistyped members, unknown operations, values
// beyond the device. Each one is a ServiceError with an errno (the control server turns it into an error
// reply), never a crash, and none leaves a descriptor or an object behind.
#include <unistd.h>

#include "emulator/protocol/verbs_json.hpp"
#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {

TEST_CASE("malformed requests are refused with EINVAL or EOPNOTSUPP", "[verbs][bad]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(1, {{"op", "create_cq"}, {"cqe", 4}}).at("cq");
  const uint32_t qp = h.call(1, qp_request(pd, cq, cq)).at("qp_num");
  int buffer = 0;
  const uint64_t addr = reinterpret_cast<uint64_t>(&buffer);

  CHECK(h.error_of(1, {{"op", "frobnicate"}}) == EOPNOTSUPP);

  json cap_too_big = qp_request(pd, cq, cq);
  cap_too_big["cap"]["max_send_sge"] = h.limits.max_sge + 1;
  json cap_mistyped = qp_request(pd, cq, cq);
  cap_mistyped["cap"]["max_send_wr"] = "lots";
  json no_cap = qp_request(pd, cq, cq);
  no_cap.erase("cap");
  json bad_type = qp_request(pd, cq, cq);
  bad_type["qp_type"] = 7;  // no such QP type in verbs.h
  json xrc_target_without_domain = qp_request(pd, cq, cq);
  xrc_target_without_domain["qp_type"] = 10;  // IBV_QPT_XRC_RECV names an XRC domain, not a PD
  json xrc_target_foreign_domain = xrc_target_without_domain;
  xrc_target_foreign_domain["xrcd"] = 1;  // no domain this session opened
  json sig_all_text = qp_request(pd, cq, cq);
  sig_all_text["sq_sig_all"] = "yes";

  const std::vector<json> refused = {
      json::object(),                                     // no op
      json::array({"alloc_pd"}),                          // not an object
      {{"op", 5}},                                        // op of the wrong type
      {{"op", "dealloc_pd"}},                             // missing member
      {{"op", "dealloc_pd"}, {"pd", "1"}},                // wrong type
      {{"op", "dealloc_pd"}, {"pd", -1}},                 // negative
      {{"op", "dealloc_pd"}, {"pd", 1.5}},                // not an integer
      {{"op", "dealloc_pd"}, {"pd", (uint64_t(1) << 32) + pd}},  // does not fit: not truncated to `pd`
      {{"op", "reg_mr"}, {"pd", pd}, {"addr", addr}, {"length", 4}},                   // no access
      {{"op", "reg_mr"}, {"pd", pd}, {"addr", addr}, {"length", 4}, {"access", 1}, {"iova", "x"}},
      {{"op", "reg_mr"}, {"pd", pd}, {"addr", addr}, {"length", 4}, {"access", 1}, {"shared_offset", 0}},  // no fd
      {{"op", "create_cq"}, {"cqe", 0}},
      {{"op", "create_cq"}, {"cqe", h.limits.max_cqe + 1}},
      {{"op", "create_cq"}, {"cqe", 4}, {"channel", "one"}},
      {{"op", "create_cq"}, {"cqe", 4}, {"channel", 12345}},  // no such channel
      {{"op", "create_srq"}, {"pd", pd}, {"max_wr", 0}, {"max_sge", 1}},
      {{"op", "create_srq"}, {"pd", pd}, {"max_wr", 4}, {"max_sge", h.limits.max_sge + 1}},
      {{"op", "create_ah"}, {"pd", pd}},
      {{"op", "create_ah"}, {"pd", pd}, {"ah_attr", {{"dgid", "not an address"}}}},
      {{"op", "create_ah"}, {"pd", pd}, {"ah_attr", {{"dgid", 17}}}},
      {{"op", "resolve_neighbour"}},
      {{"op", "resolve_neighbour"}, {"ah_attr", {{"dgid", "not an address"}}}},
      {{"op", "resolve_neighbour"}, {"ah_attr", {{"dgid", "10.0.0.2"}, {"sgid_index", 7}}}},    // no such GID
      cap_too_big,
      cap_mistyped,
      no_cap,
      bad_type,
      xrc_target_without_domain,
      xrc_target_foreign_domain,
      sig_all_text,
      {{"op", "modify_qp"}, {"qp_num", qp}, {"attr_mask", 1}},                          // no attr
      {{"op", "modify_qp"}, {"qp_num", qp}, {"attr", {{"qp_state", 3}}}},               // no mask
      {{"op", "modify_qp"}, {"qp_num", qp}, {"attr", {{"qp_state", 3}}}, {"attr_mask", 1}},  // RESET -> RTS
      {{"op", "modify_qp"}, {"qp_num", qp}, {"attr", {{"qp_state", "init"}}}, {"attr_mask", 1}},
      {{"op", "query_qp"}, {"qp_num", qp + 1000}},
      {{"op", "destroy_comp_channel"}},
  };
  for (const json& r : refused) {
    INFO(r.dump());
    CHECK(h.error_of(1, r) == EINVAL);
  }

  // The session is intact: its objects are there and usable, and nothing extra was created.
  CHECK(h.call(1, {{"op", "query_qp"}, {"qp_num", qp}}).at("attr").at("qp_state") == 0);
  h.call(1, {{"op", "destroy_qp"}, {"qp_num", qp}});
  h.call(1, {{"op", "destroy_cq"}, {"cq", cq}});
  h.call(1, {{"op", "dealloc_pd"}, {"pd", pd}});
}

TEST_CASE("a create the device refuses leaks no descriptor", "[verbs][bad]") {
  transport::DeviceLimits limits;
  limits.max_cq = 1;
  limits.max_qp = 1;
  limits.max_srq = 1;
  ServiceHarness h(limits);
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t cq = h.call(1, {{"op", "create_cq"}, {"cqe", 4}}).at("cq");
  h.call(1, qp_request(pd, cq, cq));
  h.call(1, {{"op", "create_srq"}, {"pd", pd}, {"max_wr", 4}, {"max_sge", 1}});

  // Each refused create made a ring (a memfd) before the device said no; 100 of each must leave no
  // descriptor (and so no memfd) behind in the daemon.
  const size_t before = open_fd_count();
  for (int i = 0; i < 100; ++i) {
    CHECK(h.error_of(1, {{"op", "create_cq"}, {"cqe", 4}}) != 0);
    CHECK(h.error_of(1, qp_request(pd, cq, cq)) != 0);
    CHECK(h.error_of(1, {{"op", "create_srq"}, {"pd", pd}, {"max_wr", 4}, {"max_sge", 1}}) != 0);
  }
  CHECK(open_fd_count() == before);
}

}  // namespace uroce::test::service
