// librdmacm entry points uroce does not offer yet. Each fails the documented way (-1 or NULL with errno)
// so that a program learns it at once instead of believing in a silent success:
// - ECE (rdma_set_local_ece, rdma_get_remote_ece, rdma_reject_ece): EOPNOTSUPP, what librdmacm says when
//   the kernel has no ECE;
// - rsockets: rsocket() cannot make a socket (ENOSYS), so no rsocket descriptor ever exists and every call
//   on one fails with EBADF, as it would for any descriptor that is not an rsocket (rpoll and rselect on
//   plain descriptors work, as in librdmacm).
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

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

CMA_EXPORT int rsocket(int, int, int) { return fail(ENOSYS); }
CMA_EXPORT int rbind(int, const sockaddr*, socklen_t) { return fail(EBADF); }
CMA_EXPORT int rlisten(int, int) { return fail(EBADF); }
CMA_EXPORT int raccept(int, sockaddr*, socklen_t*) { return fail(EBADF); }
CMA_EXPORT int rconnect(int, const sockaddr*, socklen_t) { return fail(EBADF); }
CMA_EXPORT int rshutdown(int, int) { return fail(EBADF); }
CMA_EXPORT int rclose(int) { return fail(EBADF); }
CMA_EXPORT ssize_t rrecv(int, void*, size_t, int) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, sockaddr*, socklen_t*) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rrecvmsg(int, msghdr*, int) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rsend(int, const void*, size_t, int) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rsendto(int, const void*, size_t, int, const sockaddr*, socklen_t) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rsendmsg(int, const msghdr*, int) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rread(int, void*, size_t) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rreadv(int, const iovec*, int) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rwrite(int, const void*, size_t) { return fail<ssize_t>(EBADF); }
CMA_EXPORT ssize_t rwritev(int, const iovec*, int) { return fail<ssize_t>(EBADF); }
// With no rsocket in the set, rpoll and rselect are poll and select (as in librdmacm).
CMA_EXPORT int rpoll(pollfd* fds, nfds_t n, int timeout) { return poll(fds, n, timeout); }
CMA_EXPORT int rselect(int n, fd_set* r, fd_set* w, fd_set* e, timeval* t) { return select(n, r, w, e, t); }
CMA_EXPORT int rgetpeername(int, sockaddr*, socklen_t*) { return fail(EBADF); }
CMA_EXPORT int rgetsockname(int, sockaddr*, socklen_t*) { return fail(EBADF); }
CMA_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) { return fail(EBADF); }
CMA_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) { return fail(EBADF); }
CMA_EXPORT int rfcntl(int, int, ...) { return fail(EBADF); }
CMA_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) { return fail<off_t>(EBADF); }
CMA_EXPORT int riounmap(int, void*, size_t) { return fail(EBADF); }
CMA_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) { return fail<size_t>(EBADF); }
