// Device memory (ibv_alloc_dm, ibv_free_dm, ibv_memcpy_to_dm / _from_dm, ibv_reg_dm_mr; verbs_context
// ops that verbs.h's inlines call). The memory is uroced's own (emulator/daemon/device_memory.cpp),
// mapped here the way mlx5 maps its on-chip memory into the process; the copies are plain memcpy into
// that mapping, and a region registered on it is zero based, as ibv_reg_dm_mr defines.
#include <cstring>

#include "shim.hpp"

namespace uroce::shim {
namespace {

struct Dm {
  ibv_dm dm;  // first: the application's ibv_dm* is this object
  emulator::client::DeviceMemory impl;
};

Dm* to_dm(ibv_dm* d) { return reinterpret_cast<Dm*>(d); }

// Whether a copy may touch the bytes [offset, offset + length) of the allocation: EFAULT outside it, EINVAL
// for an offset or length that is not a multiple of 4. The 4 bytes are mlx5's rule (its MEMIC is accessed
// in 32-bit words), the only device memory there is; uroce keeps it so that a program that works here
// works on a ConnectX, and rdma-core's tests (test_mr's test_dm_bad_access) expect it of every device.
int check_copy(const Dm& d, uint64_t offset, size_t length) {
  if (offset > d.impl.length || length > d.impl.length - offset) return EFAULT;
  if ((offset | length) & 3) return EINVAL;
  return 0;
}

int memcpy_to_dm(ibv_dm* dm, uint64_t dm_offset, const void* host_addr, size_t length) {
  Dm& d = *to_dm(dm);
  if (int e = check_copy(d, dm_offset, length)) return e;
  std::memcpy(d.impl.pages.data() + dm_offset, host_addr, length);
  return 0;
}

int memcpy_from_dm(void* host_addr, ibv_dm* dm, uint64_t dm_offset, size_t length) {
  const Dm& d = *to_dm(dm);
  if (int e = check_copy(d, dm_offset, length)) return e;
  std::memcpy(host_addr, d.impl.pages.data() + dm_offset, length);
  return 0;
}

ibv_dm* finish_dm(Dm* d, ibv_context* context) {
  d->dm.context = context;
  d->dm.memcpy_to_dm = memcpy_to_dm;
  d->dm.memcpy_from_dm = memcpy_from_dm;
  d->dm.handle = d->impl.dm;
  return &d->dm;
}

}  // namespace

ibv_dm* alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  if (attr == nullptr || attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* d = new (std::nothrow) Dm{};
  if (d == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (guarded("alloc_dm", [&] { d->impl = to_shim(context)->impl->alloc_dm(attr->length, attr->log_align_req); })) {
    delete d;  // guarded set errno
    return nullptr;
  }
  return finish_dm(d, context);
}

int free_dm(ibv_dm* dm) {
  Dm* d = to_dm(dm);
  if (int rc = guarded("free_dm", [&] { to_shim(dm->context)->impl->free_dm(d->impl.dm); })) return rc;
  delete d;
  return 0;
}

ibv_mr* reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned int access) {
  const uint32_t dm_number = to_dm(dm)->impl.dm;
  const unsigned classic = access & transport_access;
  // Zero based: its address is NULL, and work requests name offsets from the region's start.
  return new_mr("reg_dm_mr", pd, nullptr, length, classic, [&] {
    return to_shim(pd->context)->impl->reg_dm_mr(pd->handle, dm_number, dm_offset, length, classic);
  });
}

}  // namespace uroce::shim

using namespace uroce::shim;

// ibv_import_dm: the session's allocation `dm_handle`, mapped for this context's copies. Freeing it
// through any context frees it for all; unimporting unmaps it here only.
SHIM_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  auto* d = new (std::nothrow) Dm{};
  if (d == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (guarded("import_dm", [&] { d->impl = to_shim(context)->impl->import_dm(dm_handle); })) {
    delete d;
    return nullptr;
  }
  return finish_dm(d, context);
}

SHIM_EXPORT void ibv_unimport_dm(ibv_dm* dm) { delete to_dm(dm); }
