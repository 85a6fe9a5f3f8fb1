// The IBVERBS_1.0 compatibility symbols (and ibv_register_driver@IBVERBS_1.1): entry points for programs
// built against libibverbs before 1.1 (2006), with that era's struct layouts. They are exported under
// their old, non-default versions as the real library does, and fail: NULL/errno ENOSYS, or ENOSYS.
// Current binaries bind the default (@@) versions and never reach these.
#include <cerrno>
#include <cstdint>

#define COMPAT(ret, name, ver, body)                                                             \
  extern "C" __attribute__((visibility("default"))) ret uroce_compat_##name() body              \
  __asm__(".symver uroce_compat_" #name ", " #name "@" ver);

#define COMPAT_PTR(name) COMPAT(void*, name, "IBVERBS_1.0", { errno = ENOSYS; return nullptr; })
#define COMPAT_INT(name) COMPAT(int, name, "IBVERBS_1.0", { errno = ENOSYS; return ENOSYS; })
#define COMPAT_VOID(name) COMPAT(void, name, "IBVERBS_1.0", {})

COMPAT_VOID(ibv_ack_async_event)
COMPAT_VOID(ibv_ack_cq_events)
COMPAT_PTR(ibv_alloc_pd)
COMPAT_INT(ibv_attach_mcast)
COMPAT_INT(ibv_close_device)
COMPAT_PTR(ibv_create_ah)
COMPAT_PTR(ibv_create_cq)
COMPAT_PTR(ibv_create_qp)
COMPAT_PTR(ibv_create_srq)
COMPAT_INT(ibv_dealloc_pd)
COMPAT_INT(ibv_dereg_mr)
COMPAT_INT(ibv_destroy_ah)
COMPAT_INT(ibv_destroy_cq)
COMPAT_INT(ibv_destroy_qp)
COMPAT_INT(ibv_destroy_srq)
COMPAT_INT(ibv_detach_mcast)
COMPAT_VOID(ibv_free_device_list)
COMPAT_INT(ibv_get_async_event)
COMPAT_INT(ibv_get_cq_event)
COMPAT(uint64_t, ibv_get_device_guid, "IBVERBS_1.0", { errno = ENOSYS; return 0; })
COMPAT_PTR(ibv_get_device_list)
COMPAT_PTR(ibv_get_device_name)
COMPAT_INT(ibv_modify_qp)
COMPAT_INT(ibv_modify_srq)
COMPAT_PTR(ibv_open_device)
COMPAT_INT(ibv_query_device)
COMPAT_INT(ibv_query_gid)
COMPAT_INT(ibv_query_pkey)
COMPAT_INT(ibv_query_port)
COMPAT_INT(ibv_query_qp)
COMPAT_INT(ibv_query_srq)
COMPAT_PTR(ibv_reg_mr)
COMPAT_INT(ibv_resize_cq)
// Providers of the 1.1 era registered through this; there is nothing to register with.
COMPAT(void, ibv_register_driver, "IBVERBS_1.1", {})
