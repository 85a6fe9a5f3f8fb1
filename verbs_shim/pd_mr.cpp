// Protection domains and memory regions: thin wrappers over the client library, which also moves the
// registered pages onto memory shared with uroced (emulator/client/shared_pages.hpp), except for
// on-demand (ODP) regions, whose pages stay where they are; and ibv_advise_mr for those.
#include <sys/mman.h>
#include <unistd.h>

#include "shim.hpp"

// Linux 5.14's madvise advices (older C library headers lack them).
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

using namespace uroce::shim;

SHIM_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto* p = new (std::nothrow) Pd{};
  if (!p) {
    errno = ENOMEM;
    return nullptr;
  }
  uint32_t pd = 0;
  if (guarded("alloc_pd", [&] { pd = to_shim(context)->impl->alloc_pd(); })) {
    delete p;
    return nullptr;
  }
  p->pd.context = context;
  p->pd.handle = pd;
  return &p->pd;
}

SHIM_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  Pd* p = to_shim(pd);
  if (p->users != 0) {
    errno = EBUSY;  // a PD with parent domains over it, or a parent domain objects were made with
    return EBUSY;
  }
  if (p->protection_domain != nullptr) {
    free_parent_domain(p);
    return 0;
  }
  if (int rc = guarded("dealloc_pd", [&] { to_shim(pd->context)->impl->dealloc_pd(pd->handle); })) return rc;
  delete to_shim(pd);
  return 0;
}

static ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, std::optional<uint64_t> iova, unsigned access) {
  const bool on_demand = access & IBV_ACCESS_ON_DEMAND;
  const uint32_t classic = access & transport_access;
  return new_mr("reg_mr", pd, addr, length, classic | (access & IBV_ACCESS_ON_DEMAND), [&] {
    return to_shim(pd->context)->impl->reg_mr(pd->handle, addr, length, classic, iova, on_demand);
  });
}

SHIM_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return reg_mr(pd, addr, length, std::nullopt, unsigned(access));
}

SHIM_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return reg_mr(pd, addr, length, iova, unsigned(access));
}

SHIM_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned int access) {
  return reg_mr(pd, addr, length, iova, access);
}

SHIM_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  if (int rc = guarded("dereg_mr", [&] { to_shim(mr->context)->impl->dereg_mr(mr->handle); })) return rc;
  delete to_shim(mr);
  return 0;
}

SHIM_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  if (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS)) {
    return IBV_REREG_MR_ERR_INPUT;
  }
  ibv_pd* new_pd = (flags & IBV_REREG_MR_CHANGE_PD) ? pd : mr->pd;
  void* new_addr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->addr;
  const size_t new_len = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : mr->length;
  const unsigned new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS)
                                  ? unsigned(access) & (transport_access | IBV_ACCESS_ON_DEMAND)
                                  : to_shim(mr)->access;
  uroce::emulator::client::MemoryRegion r;
  if (guarded("rereg_mr", [&] {
        r = to_shim(mr->context)->impl->rereg_mr(mr->handle, new_pd->handle, new_addr, new_len,
                                                 new_access & transport_access, new_access & IBV_ACCESS_ON_DEMAND,
                                                 (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0);
      })) {
    return IBV_REREG_MR_ERR_CMD;
  }
  mr->pd = new_pd;
  mr->addr = new_addr;
  mr->length = new_len;
  mr->handle = mr->lkey = r.lkey;
  mr->rkey = r.rkey;
  to_shim(mr)->access = new_access;
  return 0;
}

namespace uroce::shim {

// ibv_advise_mr (a verbs_context op: verbs.h's inline calls it). A prefetch faults in the pages under
// on-demand regions before the device needs them; uroced reaches those pages through the process's page
// tables (process_vm_*), so faulting them in here, with madvise(MADV_POPULATE_READ or _WRITE), is
// exactly the prefetch: readable pages for PREFETCH, writable ones for PREFETCH_WRITE. PREFETCH_NO_FAULT
// maps only pages already present, which for uroce is nothing to do. uroced checks the list first (every
// lkey an on-demand region of this PD: EINVAL; local write for a write prefetch: EPERM; within the
// region: EFAULT), as rxe does. With IBV_ADVISE_MR_FLAG_FLUSH a page that cannot be faulted in fails
// the call (EFAULT); without it the prefetch is best effort and its faults are not reported, as the
// kernel's asynchronous prefetch does not report them.
int advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge) {
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) {
    return EOPNOTSUPP;
  }
  if (flags & ~uint32_t(IBV_ADVISE_MR_FLAG_FLUSH)) return EINVAL;
  if (num_sge == 0) return 0;  // the kernel's answer to an empty list
  if (sg_list == nullptr) return EINVAL;
  std::vector<std::array<uint64_t, 3>> sges;
  for (uint32_t i = 0; i < num_sge; ++i) sges.push_back({sg_list[i].lkey, sg_list[i].addr, sg_list[i].length});
  const bool for_write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  if (int rc = guarded("advise_mr", [&] {
        ranges = to_shim(pd->context)->impl->odp_ranges(pd->handle, for_write, sges);
      })) {
    return rc;
  }
  if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) return 0;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  for (const auto& [start, length] : ranges) {
    if (length == 0) continue;
    // No user page lies in the address space's last page, so a range reaching it (an implicit region
    // allows one) cannot be faulted in; stopping short also keeps the rounding below from wrapping.
    const bool faultable = start <= ~uint64_t(0) - page && length <= ~uint64_t(0) - page - start;
    const uint64_t first = start & ~(page - 1);
    const uint64_t end = faultable ? (start + length + page - 1) & ~(page - 1) : first;
    const int advice_code = for_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    const bool faulted = faultable && madvise(reinterpret_cast<void*>(first), end - first, advice_code) == 0;
    // ENOMEM (not mapped) or EFAULT (would be SIGSEGV or SIGBUS): the pages cannot be faulted in.
    if (!faulted && (flags & IBV_ADVISE_MR_FLAG_FLUSH)) return EFAULT;
  }
  return 0;
}

}  // namespace uroce::shim

// ibv_import_pd / ibv_import_mr (on a context from ibv_import_device, or any context of the session): a
// handle of this context's on an object the session holds. Deallocating or deregistering through it frees
// the object for every context; unimporting drops only the handle.
SHIM_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  auto* p = new (std::nothrow) Pd{};
  if (!p) {
    errno = ENOMEM;
    return nullptr;
  }
  if (guarded("import_pd", [&] { to_shim(context)->impl->import_pd(pd_handle); })) {
    delete p;
    return nullptr;
  }
  p->pd.context = context;
  p->pd.handle = pd_handle;
  return &p->pd;
}

SHIM_EXPORT void ibv_unimport_pd(ibv_pd* pd) { delete to_shim(pd); }

// The region's address is its iova (where it starts as work requests name it; NULL for a zero-based one).
// `pd` must be the region's own PD (EINVAL otherwise).
SHIM_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  uroce::emulator::client::Context::ImportedRegion r;
  if (guarded("import_mr", [&] { r = to_shim(pd->context)->impl->import_mr(mr_handle); })) return nullptr;
  if (r.pd != pd->handle) {
    errno = EINVAL;
    return nullptr;
  }
  return new_mr("import_mr", pd, reinterpret_cast<void*>(uintptr_t(r.iova)), r.length, r.access,
                [&] { return uroce::emulator::client::MemoryRegion{r.key, r.key}; });
}

SHIM_EXPORT void ibv_unimport_mr(ibv_mr* mr) { delete to_shim(mr); }
