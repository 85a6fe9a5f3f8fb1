// Device memory (alloc_dm, free_dm, reg_dm_mr) as the verbs service serves it: one budget of 256 KiB for
// the whole device, shared by every session and given back when one frees or goes away; a zero-based
// region on it; and the refusals of each request. The whole path, RDMA into device memory included, goes
// through pyverbs in pyverbs_ops_dm.py.
#include <unistd.h>

#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

constexpr uint64_t device_memory = 256 * 1024;
constexpr uint32_t zero_based = 1u << 5;

json alloc(uint64_t length, uint32_t log_align = 0) {
  return {{"op", "alloc_dm"}, {"length", length}, {"log_align_req", log_align}};
}

json reg(uint32_t pd, uint32_t dm, uint64_t offset, uint64_t length, uint32_t access = Pair::all_access | zero_based) {
  return {{"op", "reg_dm_mr"}, {"pd", pd}, {"dm", dm}, {"offset", offset}, {"length", length}, {"access", access}};
}

}  // namespace

TEST_CASE("device memory: one budget for the device, given back by free_dm and by a session's end",
          "[verbs][memory][dm]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  h.service->open_session(2, getpid(), getuid());
  CHECK(h.call(1, {{"op", "query_device"}}).at("max_dm_size") == device_memory);

  std::vector<int> fds;
  const json first = h.call(1, alloc(100000), &fds);
  REQUIRE(fds.size() == 1);  // the memory itself, for the client to map
  CHECK(first.at("length") == 100000);
  CHECK(first.at("size") == 102400);  // whole pages are what it takes
  fds.clear();
  const json second = h.call(2, alloc(device_memory - 102400), &fds);
  CHECK(h.error_of(1, alloc(1)) == ENOMEM);  // nothing left, whoever asks
  h.call(2, {{"op", "free_dm"}, {"dm", second.at("dm")}});
  h.call(1, alloc(4096));
  h.service->close_session(1);  // its 100000 + 4096 bytes go back
  h.call(2, alloc(device_memory - 4096), &fds);
  CHECK(h.error_of(2, alloc(4096 + 1)) == ENOMEM);

  // Refusals: no length, more than the device has, an alignment above a page, another session's memory.
  h.service->open_session(3, getpid(), getuid());
  CHECK(h.error_of(3, alloc(0)) == EINVAL);
  CHECK(h.error_of(3, alloc(device_memory + 1)) == EINVAL);
  CHECK(h.error_of(3, alloc(64, 13)) == EINVAL);
  CHECK(h.error_of(3, {{"op", "free_dm"}, {"dm", second.at("dm")}}) == EINVAL);
}

TEST_CASE("device memory: a zero-based region on it, and what reg_dm_mr, free_dm and rereg_mr refuse",
          "[verbs][memory][dm]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  std::vector<int> fds;
  const uint32_t dm = h.call(1, alloc(8192), &fds).at("dm");
  for (int fd : fds) close(fd);

  const json mr = h.call(1, reg(pd, dm, 4096, 4096));
  CHECK(mr.at("lkey") == mr.at("rkey"));
  // Zero based only, within the allocation, on memory the session has.
  CHECK(h.error_of(1, reg(pd, dm, 0, 4096, Pair::all_access)) == EINVAL);
  CHECK(h.error_of(1, reg(pd, dm, 4096, 4097)) == EINVAL);
  CHECK(h.error_of(1, reg(pd, dm, 8193, 0)) == EINVAL);
  CHECK(h.error_of(1, reg(pd, dm + 1, 0, 64)) == EINVAL);
  // A region on it keeps it; it cannot be re-registered elsewhere.
  CHECK(h.error_of(1, {{"op", "free_dm"}, {"dm", dm}}) == EBUSY);
  CHECK(h.error_of(1, {{"op", "rereg_mr"}, {"key", mr.at("lkey")}, {"pd", pd}, {"addr", 0x1000}, {"length", 64},
                       {"access", uint32_t(Pair::all_access)}}) == EINVAL);
  h.call(1, {{"op", "dereg_mr"}, {"key", mr.at("lkey")}});
  h.call(1, {{"op", "free_dm"}, {"dm", dm}});
}

}  // namespace uroce::test::service
