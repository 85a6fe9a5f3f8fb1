// Regions registered with IBV_ACCESS_ON_DEMAND (on-demand paging, ODP). The memory itself needs nothing
// special: such a region is reached with process_vm_* (memory_for), which goes through the client's page
// tables at each access, faulting pages in as needed and seeing whatever is mapped there at that moment,
// which is what a NIC with ODP sees. A page that is not mapped fails that access, and the transport turns
// the failure into a NAK or an error completion, as rxe turns a failed ODP fault into a key violation.
//
// What is kept here is the session's list of those regions, for ibv_advise_mr: the client asks which of
// its addresses a prefetch covers (odp_ranges) and faults them in itself (verbs_shim/pd_mr.cpp).
#include <array>
#include <cerrno>
#include <limits>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/verbs_service.hpp"
#include "transport/memory/mr_table.hpp"

namespace uroce::emulator {

using nlohmann::json;

namespace {

constexpr uint64_t whole_address_space = std::numeric_limits<uint64_t>::max();

// [lkey, addr, length], each an unsigned number (the lkey one of 32 bits).
std::array<uint64_t, 3> need_sge(const json& j) {
  if (!j.is_array() || j.size() != 3 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned() ||
      !j[2].is_number_unsigned() || j[0].get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    throw ServiceError(EINVAL, "an sge is [lkey, addr, length]");
  }
  return {j[0].get<uint64_t>(), j[1].get<uint64_t>(), j[2].get<uint64_t>()};
}

}  // namespace

bool VerbsService::wants_on_demand(const json& r) { return r.contains("on_demand") && r.at("on_demand") == true; }

// ib_umem_get's rule: a range may not wrap around the address space. The one exception is the implicit
// on-demand region, addr 0 and length UINT64_MAX, which covers every address the process has or will
// have; its iova must be 0 then (as mlx5 and rxe require).
void VerbsService::check_region_range(bool on_demand, uint64_t addr, uint64_t length, uint64_t iova) {
  if (addr == 0 && length == whole_address_space) {
    if (!on_demand) throw ServiceError(EINVAL, "only an on-demand region may cover the whole address space");
    if (iova != 0) throw ServiceError(EINVAL, "an implicit on-demand region has iova 0");
    return;
  }
  if (length > whole_address_space - addr) throw ServiceError(EINVAL, "the region wraps around the address space");
}

void VerbsService::note_on_demand(Session& s, uint32_t key, const RegionRequest& region) {
  if (region.on_demand) s.on_demand[key] = {region.pd, region.addr, region.iova, region.length, region.access};
}

// ibv_advise_mr's checks, in rxe's terms: every lkey names an on-demand region of this session in `pd`
// (else EINVAL), a write prefetch needs local write on it (else EPERM), and the range lies within it
// (else EFAULT, as a fault outside the umem). The reply gives each range in the client's address space.
json VerbsService::odp_ranges(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t pd = need_u32(r, "pd");
  require_owned(s.pds, pd, "protection domain");
  const bool for_write = r.contains("write") && r.at("write") == true;
  const auto sges = r.find("sges");
  if (sges == r.end() || !sges->is_array()) throw ServiceError(EINVAL, "missing field sges");
  json ranges = json::array();
  for (const json& j : *sges) {
    const auto [lkey, addr, length] = need_sge(j);
    const auto it = s.on_demand.find(uint32_t(lkey));
    if (it == s.on_demand.end() || it->second.pd != pd) {
      throw ServiceError(EINVAL, "the lkey names no on-demand region in this protection domain");
    }
    const OnDemandRegion& m = it->second;
    if (for_write && !(m.access & verbs::access_local_write)) {
      throw ServiceError(EPERM, "a write prefetch needs local write access");
    }
    if (!transport::range_within(m.iova, m.length, addr, length)) {
      throw ServiceError(EFAULT, "the range lies outside the region");
    }
    ranges.push_back({m.addr + (addr - m.iova), length});
  }
  return {{"ranges", ranges}};
}

}  // namespace uroce::emulator
