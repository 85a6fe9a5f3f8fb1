// On-demand regions (IBV_ACCESS_ON_DEMAND) as the verbs service takes them: registered over the client's
// own address space (never shared pages), the implicit region and the range rule, and odp_ranges, the
// check behind ibv_advise_mr, with each of its errors. What the transport does with such a region is in
// tests/unit/transport/test_rc_errors.cpp ([odp]); the whole path through pyverbs in pyverbs_ops_odp.py.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <limits>

#include "tests/emulator/service/service_fixture.hpp"

namespace uroce::test::service {
namespace {

constexpr uint64_t everything = std::numeric_limits<uint64_t>::max();

json reg(uint32_t pd, uint64_t addr, uint64_t length, bool on_demand, uint32_t access = Pair::all_access) {
  json r = {{"op", "reg_mr"}, {"pd", pd}, {"addr", addr}, {"length", length}, {"access", access}};
  if (on_demand) r["on_demand"] = true;
  return r;
}

json ranges(uint32_t pd, json sges, bool write = false) {
  return {{"op", "odp_ranges"}, {"pd", pd}, {"write", write}, {"sges", std::move(sges)}};
}

}  // namespace

TEST_CASE("on-demand regions: the implicit one, the range rule, and no shared pages", "[verbs][memory][odp]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");

  h.call(1, reg(pd, 0x10000, 8192, true));
  // The whole address space: only on demand (implicit ODP), and only at iova 0.
  const json implicit = h.call(1, reg(pd, 0, everything, true));
  CHECK(implicit.at("lkey") == implicit.at("rkey"));
  CHECK(h.error_of(1, reg(pd, 0, everything, false)) == EINVAL);
  json shifted = reg(pd, 0, everything, true);
  shifted["iova"] = 0x1000;
  CHECK(h.error_of(1, shifted) == EINVAL);
  // Any other range may not wrap around, on demand or not.
  CHECK(h.error_of(1, reg(pd, 0x1000, everything - 0x10, true)) == EINVAL);
  CHECK(h.error_of(1, reg(pd, 0x1000, everything - 0x10, false)) == EINVAL);
  CHECK(h.error_of(1, reg(pd, everything - 4095, 8192, true)) == EINVAL);
  CHECK(h.error_of(1, reg(pd, everything - 8191, 8192, true)) == EINVAL);  // its end, 2^64, wraps to 0
  h.call(1, reg(pd, everything - 8192, 8192, true));  // up to the last byte but one, as ib_umem_get allows
  // An on-demand region is reached through the process's page tables: shared pages are refused.
  const int fd = memfd_create("uroce-test-odp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 65536) == 0);
  REQUIRE(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  json shared = reg(pd, 0x10000, 4096, true);
  shared["shared_offset"] = 0;
  CHECK(h.error_of(1, shared, {fd}) == EINVAL);
  shared.erase("on_demand");
  h.call(1, shared, nullptr, {fd});  // the same without on_demand is an ordinary shared region
  close(fd);
}

TEST_CASE("odp_ranges: each sge's place in the client's memory, or the errno ibv_advise_mr returns",
          "[verbs][memory][odp]") {
  ServiceHarness h;
  h.service->open_session(1, getpid(), getuid());
  h.service->open_session(2, getpid(), getuid());
  const uint32_t pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t other_pd = h.call(1, {{"op", "alloc_pd"}}).at("pd");
  const uint32_t stranger_pd = h.call(2, {{"op", "alloc_pd"}}).at("pd");

  json at_iova = reg(pd, 0x7000000, 0x10000, true);
  at_iova["iova"] = 0x5000;
  const uint32_t odp = h.call(1, at_iova).at("lkey");
  const uint32_t read_only = h.call(1, reg(pd, 0x8000000, 4096, true, 4 /* REMOTE_READ */)).at("lkey");
  const uint32_t pinned = h.call(1, reg(pd, 0x9000000, 4096, false)).at("lkey");
  const uint32_t elsewhere = h.call(1, reg(other_pd, 0xa000000, 4096, true)).at("lkey");
  const uint32_t strangers = h.call(2, reg(stranger_pd, 0xb000000, 4096, true)).at("lkey");
  const uint32_t implicit = h.call(1, reg(pd, 0, everything, true)).at("lkey");

  // iova -> address, in order, for reading and writing; the implicit region maps every address to itself.
  const json got =
      h.call(1, ranges(pd, {{odp, 0x5000 + 16, 100}, {odp, 0x5000, 0x10000}, {implicit, 0x1234, 8}}, true));
  CHECK(got.at("ranges") == json::parse("[[117440528, 100], [117440512, 65536], [4660, 8]]"));
  CHECK(h.call(1, ranges(pd, {{read_only, 0x8000000, 64}})).at("ranges").size() == 1);
  CHECK(h.call(1, ranges(pd, json::array())).at("ranges").empty());

  // rxe's errors: no on-demand region of this PD (EINVAL), a write prefetch without local write (EPERM),
  // a range outside the region (EFAULT).
  CHECK(h.error_of(1, ranges(pd, {{pinned, 0x9000000, 64}})) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{elsewhere, 0xa000000, 64}})) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{strangers, 0xb000000, 64}})) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{0x7fffff00, 0x5000, 64}})) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{read_only, 0x8000000, 64}}, true)) == EPERM);
  CHECK(h.error_of(1, ranges(pd, {{odp, 0x5000 - 1, 64}})) == EFAULT);
  CHECK(h.error_of(1, ranges(pd, {{odp, 0x5000 + 0x10000 - 8, 16}})) == EFAULT);
  CHECK(h.error_of(1, ranges(pd, {{odp, 0x5000, 16}, {odp, 0x5000 + 0x10000, 1}})) == EFAULT);
  CHECK(h.error_of(2, ranges(pd, {{odp, 0x5000, 16}})) == EINVAL);  // another session's PD
  // Malformed requests.
  CHECK(h.error_of(1, ranges(pd, "no")) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{odp, 0x5000}})) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{odp, -1, 16}})) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{uint64_t(1) << 32 | odp, 0x5000, 16}})) == EINVAL);
  CHECK(h.error_of(1, {{"op", "odp_ranges"}, {"pd", pd}}) == EINVAL);

  // rereg_mr and dereg_mr keep the list: a region re-registered without on_demand leaves it, one
  // re-registered with it joins under its new key, a deregistered one is gone.
  const uint32_t rereg_pinned =
      h.call(1, {{"op", "rereg_mr"}, {"key", odp}, {"pd", pd}, {"addr", 0x7000000}, {"length", 4096},
                 {"access", uint32_t(Pair::all_access)}}).at("lkey");
  CHECK(h.error_of(1, ranges(pd, {{rereg_pinned, 0x7000000, 16}})) == EINVAL);
  CHECK(h.error_of(1, ranges(pd, {{odp, 0x5000, 16}})) == EINVAL);
  const uint32_t rereg_odp =
      h.call(1, {{"op", "rereg_mr"}, {"key", pinned}, {"pd", pd}, {"addr", 0x9000000}, {"length", 4096},
                 {"access", uint32_t(Pair::all_access)}, {"on_demand", true}}).at("lkey");
  CHECK(h.call(1, ranges(pd, {{rereg_odp, 0x9000000, 16}})).at("ranges").size() == 1);
  h.call(1, {{"op", "dereg_mr"}, {"key", rereg_odp}});
  CHECK(h.error_of(1, ranges(pd, {{rereg_odp, 0x9000000, 16}})) == EINVAL);
}

}  // namespace uroce::test::service
