// Entry points of libibverbs that uroce does not provide (yet). Each exists, so that programs and the
// provider libraries they pull in load, and each fails the documented way: NULL with errno, or an error
// number; never a pretended success.
#include <cstring>

#include <infiniband/sa.h>

#include "shim.hpp"

SHIM_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) { return EOPNOTSUPP; }

SHIM_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

SHIM_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }
SHIM_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) { return EOPNOTSUPP; }

// 0: no in-order guarantee is promised beyond what the verbs specification gives.
SHIM_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, enum ibv_wr_opcode, uint32_t) { return 0; }

// Kernel-ABI marshalling helpers (infiniband/marshall.h, not installed): they copy between the kernel's
// structs and the verbs ones. uroce has no kernel structs to copy from; the destination is cleared so a
// caller never reads uninitialised memory as if it were data.
SHIM_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, const void*) { std::memset(dst, 0, sizeof *dst); }
SHIM_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, const void*) { std::memset(dst, 0, sizeof *dst); }
SHIM_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, const void*) { std::memset(dst, 0, sizeof *dst); }
SHIM_EXPORT void ibv_copy_path_rec_to_kern(void*, const ibv_sa_path_rec*) {}

// IBVERBS_PRIVATE_34: the interface between libibverbs and its providers (libmlx5, libefa, ...), which
// Debian's perftest links. The providers register themselves from constructors at load time: that must
// be harmless (nothing registers, no device is ever matched to them). The command wrappers are only
// reached through a provider's context, which never exists, but fail properly all the same.
extern "C" {
__attribute__((visibility("default"))) bool verbs_allow_disassociate_destroy = false;
}
SHIM_EXPORT void verbs_register_driver_34(const void*) {}
SHIM_EXPORT void verbs_set_ops(void*, const void*) {}
SHIM_EXPORT void verbs_init_cq(void*, void*, void*, void*) {}
SHIM_EXPORT void verbs_uninit_context(void*) {}
SHIM_EXPORT void __verbs_log(void*, const char*, ...) {}
SHIM_EXPORT void* _verbs_init_and_alloc_context(void*, int, size_t, void*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}
SHIM_EXPORT void* verbs_open_device(void*, void*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
SHIM_EXPORT unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void*) { return num_attrs; }
SHIM_EXPORT int execute_ioctl(void*, void*) { return EOPNOTSUPP; }
SHIM_EXPORT int ibv_read_ibdev_sysfs_file(char*, size_t, void*, const char*, ...) {
  errno = ENOENT;
  return -1;
}

// Every ibv_cmd_* returns an errno value (0 on success); their argument lists do not matter to a
// function that uses none of them (the caller owns its arguments in the x86-64 calling convention).
#define UNSUPPORTED_CMD(name) \
  SHIM_EXPORT int name() { return EOPNOTSUPP; }
UNSUPPORTED_CMD(ibv_cmd_advise_mr)
UNSUPPORTED_CMD(ibv_cmd_alloc_dm)
UNSUPPORTED_CMD(ibv_cmd_alloc_mw)
UNSUPPORTED_CMD(ibv_cmd_alloc_pd)
UNSUPPORTED_CMD(ibv_cmd_attach_mcast)
UNSUPPORTED_CMD(ibv_cmd_close_xrcd)
UNSUPPORTED_CMD(ibv_cmd_create_ah)
UNSUPPORTED_CMD(ibv_cmd_create_counters)
UNSUPPORTED_CMD(ibv_cmd_create_cq)
UNSUPPORTED_CMD(ibv_cmd_create_cq_ex)
UNSUPPORTED_CMD(ibv_cmd_create_flow)
UNSUPPORTED_CMD(ibv_cmd_create_flow_action_esp)
UNSUPPORTED_CMD(ibv_cmd_create_qp)
UNSUPPORTED_CMD(ibv_cmd_create_qp_ex)
UNSUPPORTED_CMD(ibv_cmd_create_qp_ex2)
UNSUPPORTED_CMD(ibv_cmd_create_rwq_ind_table)
UNSUPPORTED_CMD(ibv_cmd_create_srq)
UNSUPPORTED_CMD(ibv_cmd_create_srq_ex)
UNSUPPORTED_CMD(ibv_cmd_create_wq)
UNSUPPORTED_CMD(ibv_cmd_dealloc_mw)
UNSUPPORTED_CMD(ibv_cmd_dealloc_pd)
UNSUPPORTED_CMD(ibv_cmd_dereg_mr)
UNSUPPORTED_CMD(ibv_cmd_destroy_ah)
UNSUPPORTED_CMD(ibv_cmd_destroy_counters)
UNSUPPORTED_CMD(ibv_cmd_destroy_cq)
UNSUPPORTED_CMD(ibv_cmd_destroy_flow)
UNSUPPORTED_CMD(ibv_cmd_destroy_flow_action)
UNSUPPORTED_CMD(ibv_cmd_destroy_qp)
UNSUPPORTED_CMD(ibv_cmd_destroy_rwq_ind_table)
UNSUPPORTED_CMD(ibv_cmd_destroy_srq)
UNSUPPORTED_CMD(ibv_cmd_destroy_wq)
UNSUPPORTED_CMD(ibv_cmd_detach_mcast)
UNSUPPORTED_CMD(ibv_cmd_free_dm)
UNSUPPORTED_CMD(ibv_cmd_get_context)
UNSUPPORTED_CMD(ibv_cmd_modify_cq)
UNSUPPORTED_CMD(ibv_cmd_modify_flow_action_esp)
UNSUPPORTED_CMD(ibv_cmd_modify_qp)
UNSUPPORTED_CMD(ibv_cmd_modify_qp_ex)
UNSUPPORTED_CMD(ibv_cmd_modify_srq)
UNSUPPORTED_CMD(ibv_cmd_modify_wq)
UNSUPPORTED_CMD(ibv_cmd_open_qp)
UNSUPPORTED_CMD(ibv_cmd_open_xrcd)
UNSUPPORTED_CMD(ibv_cmd_poll_cq)
UNSUPPORTED_CMD(ibv_cmd_post_recv)
UNSUPPORTED_CMD(ibv_cmd_post_send)
UNSUPPORTED_CMD(ibv_cmd_post_srq_recv)
UNSUPPORTED_CMD(ibv_cmd_query_context)
UNSUPPORTED_CMD(ibv_cmd_query_device_any)
UNSUPPORTED_CMD(ibv_cmd_query_mr)
UNSUPPORTED_CMD(ibv_cmd_query_port)
UNSUPPORTED_CMD(ibv_cmd_query_qp)
UNSUPPORTED_CMD(ibv_cmd_query_srq)
UNSUPPORTED_CMD(ibv_cmd_read_counters)
UNSUPPORTED_CMD(ibv_cmd_reg_dm_mr)
UNSUPPORTED_CMD(ibv_cmd_reg_dmabuf_mr)
UNSUPPORTED_CMD(ibv_cmd_reg_mr)
UNSUPPORTED_CMD(ibv_cmd_req_notify_cq)
UNSUPPORTED_CMD(ibv_cmd_rereg_mr)
UNSUPPORTED_CMD(ibv_cmd_resize_cq)
