// librdmacm entry points uroce does not offer yet. Each fails the documented way (-1 or NULL with errno)
// so that a program learns it at once instead of believing in a silent success:
// - ECE (rdma_set_local_ece, rdma_get_remote_ece, rdma_reject_ece): EOPNOTSUPP, what librdmacm says when
//   the kernel has no ECE.
#include "verbs_shim/rdmacm/cma.hpp"

namespace {
template <class T = int>
T fail(int e) {
  errno = e;
  return T(-1);
}
}  // namespace

CMA_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }
CMA_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) { return fail(EOPNOTSUPP); }
CMA_EXPORT int rdma_reject_ece(rdma_cm_id*, const void*, uint8_t) { return fail(EOPNOTSUPP); }

