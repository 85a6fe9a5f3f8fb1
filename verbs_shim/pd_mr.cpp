// Protection domains and memory regions: thin wrappers over the client library, which also moves the
// registered pages onto memory shared with uroced (emulator/client/shared_pages.hpp).
#include "shim.hpp"

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
  if (int rc = guarded("dealloc_pd", [&] { to_shim(pd->context)->impl->dealloc_pd(pd->handle); })) return rc;
  delete to_shim(pd);
  return 0;
}

static ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, std::optional<uint64_t> iova, unsigned access) {
  auto* m = new (std::nothrow) Mr{};
  if (!m) {
    errno = ENOMEM;
    return nullptr;
  }
  uroce::emulator::client::MemoryRegion r;
  // Access flags beyond the classic ones (ODP, relaxed ordering, ...) are hints a real NIC may ignore
  // too, except on-demand paging, which changes semantics: refuse that.
  if (access & IBV_ACCESS_ON_DEMAND) {
    delete m;
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const uint32_t classic = access & 0x3f;
  if (guarded("reg_mr", [&] { r = to_shim(pd->context)->impl->reg_mr(pd->handle, addr, length, classic, iova); })) {
    delete m;
    return nullptr;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = r.lkey;
  m->mr.lkey = r.lkey;
  m->mr.rkey = r.rkey;
  m->access = classic;
  return &m->mr;
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
  const unsigned new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? unsigned(access) & 0x3f : to_shim(mr)->access;
  uroce::emulator::client::MemoryRegion r;
  if (guarded("rereg_mr", [&] {
        r = to_shim(mr->context)->impl->rereg_mr(mr->handle, new_pd->handle, new_addr, new_len, new_access);
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
