// The string helpers and the rate conversions: pure functions of their argument. The texts are the ones
// libibverbs prints (applications and scripts match on them); ibv_wc_status_str's come from the
// transport, which already keeps them word for word.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "shim.hpp"

SHIM_EXPORT const char* ibv_wc_status_str(enum ibv_wc_status status) {
  // A string_view over a literal: NUL-terminated.
  return uroce::verbs::to_string(uroce::verbs::WcStatus(status)).data();
}

SHIM_EXPORT const char* ibv_node_type_str(enum ibv_node_type node_type) {
  switch (node_type) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED: return "unspecified";
    default: return "unknown";
  }
}

SHIM_EXPORT const char* ibv_port_state_str(enum ibv_port_state port_state) {
  switch (port_state) {
    case IBV_PORT_NOP: return "PORT_NOP";
    case IBV_PORT_DOWN: return "PORT_DOWN";
    case IBV_PORT_INIT: return "PORT_INIT";
    case IBV_PORT_ARMED: return "PORT_ARMED";
    case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
    default: return "invalid state";
  }
}

SHIM_EXPORT const char* ibv_event_type_str(enum ibv_event_type event) {
  switch (event) {
    case IBV_EVENT_CQ_ERR: return "CQ error";
    case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
    case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
    case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
    case IBV_EVENT_COMM_EST: return "communication established";
    case IBV_EVENT_SQ_DRAINED: return "send queue drained";
    case IBV_EVENT_PATH_MIG: return "path migrated";
    case IBV_EVENT_PATH_MIG_ERR: return "path migration request error";
    case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_LID_CHANGE: return "LID change";
    case IBV_EVENT_PKEY_CHANGE: return "P_Key change";
    case IBV_EVENT_SM_CHANGE: return "SM change";
    case IBV_EVENT_SRQ_ERR: return "SRQ catastrophic error";
    case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ limit reached";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "last WQE reached";
    case IBV_EVENT_CLIENT_REREGISTER: return "client reregistration";
    case IBV_EVENT_GID_CHANGE: return "GID table change";
    case IBV_EVENT_WQ_FATAL: return "WQ fatal";
    default: return "unknown";
  }
}

namespace {

// ibv_rate in order of the enum's values 2..22, with the rate in Mb/s and, for the multiples of
// 2.5 Gb/s, the multiplier.
struct Rate {
  ibv_rate rate;
  int mbps;
  int mult;
};
constexpr Rate rates[] = {
    {IBV_RATE_2_5_GBPS, 2500, 1},     {IBV_RATE_5_GBPS, 5000, 2},       {IBV_RATE_10_GBPS, 10000, 4},
    {IBV_RATE_20_GBPS, 20000, 8},     {IBV_RATE_30_GBPS, 30000, 12},    {IBV_RATE_40_GBPS, 40000, 16},
    {IBV_RATE_60_GBPS, 60000, 24},    {IBV_RATE_80_GBPS, 80000, 32},    {IBV_RATE_120_GBPS, 120000, 48},
    {IBV_RATE_14_GBPS, 14062, -1},    {IBV_RATE_56_GBPS, 56250, -1},    {IBV_RATE_112_GBPS, 112500, -1},
    {IBV_RATE_168_GBPS, 168750, -1},  {IBV_RATE_25_GBPS, 25781, -1},    {IBV_RATE_100_GBPS, 103125, -1},
    {IBV_RATE_200_GBPS, 206250, -1},  {IBV_RATE_300_GBPS, 309375, -1},  {IBV_RATE_28_GBPS, 28125, -1},
    {IBV_RATE_50_GBPS, 53125, -1},    {IBV_RATE_400_GBPS, 425000, -1},  {IBV_RATE_600_GBPS, 637500, -1},
};

}  // namespace

SHIM_EXPORT int ibv_rate_to_mult(enum ibv_rate rate) {
  for (const auto& r : rates) {
    if (r.rate == rate) return r.mult;
  }
  return -1;
}

SHIM_EXPORT enum ibv_rate mult_to_ibv_rate(int mult) {
  for (const auto& r : rates) {
    if (r.mult == mult) return r.rate;
  }
  return IBV_RATE_MAX;
}

SHIM_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate) {
  for (const auto& r : rates) {
    if (r.rate == rate) return r.mbps;
  }
  return -1;
}

SHIM_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps) {
  for (const auto& r : rates) {
    if (r.mbps == mbps) return r.rate;
  }
  return IBV_RATE_MAX;
}

// Fork safety: registered memory lives on shared mappings that a fork neither copies nor breaks, so
// there is nothing to set up and nothing to protect.
// Fork needs no preparation: a child gets private copies of the registered pages (emulator/client/
// shared_pages.cpp, as Linux gives since 5.13) and may use its parent's context (docs/daemon.md, "fork()").
SHIM_EXPORT int ibv_fork_init(void) { return 0; }
SHIM_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
SHIM_EXPORT int ibv_dontfork_range(void*, size_t) { return 0; }
SHIM_EXPORT int ibv_dofork_range(void*, size_t) { return 0; }

// sysfs helpers: generic file reading, kept real (ibv_devinfo reads optional attributes with it; uroce's
// device has no sysfs directory, so those reads fail with ENOENT as an absent attribute does).
SHIM_EXPORT const char* ibv_get_sysfs_path(void) { return "/sys"; }

SHIM_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[4096];
  if (std::snprintf(path, sizeof path, "%s/%s", dir, file) >= int(sizeof path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, size);
  close(fd);
  if (n <= 0) return -1;
  ssize_t len = n;
  if (size_t(len) == size) --len;
  if (len > 0 && buf[len - 1] == '\n') --len;
  buf[len] = '\0';
  return int(len);
}
