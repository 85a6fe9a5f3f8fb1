// Finding uroced's device and describing it: ibv_get_device_list and friends, ibv_query_device(_ex),
// ibv_query_port, GIDs and P_Keys. The device is whatever the uroced at $UROCE_SOCKET serves; no daemon
// means no device, quietly, as with a machine that has no RDMA hardware.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "emulator/client/control_connection.hpp"
#include "emulator/protocol/verbs_json.hpp"
#include "shim.hpp"

namespace uroce::shim {
namespace {

// vendor_id: none of the RDMA vendors' (perftest and the providers key on these); the IEEE "private"
// OUI range is unassigned by design. vendor_part_id: outside every list perftest keeps (Mellanox's
// ConnectX ids are 0x1000-0x1030, 4099..4131, 41680.., ...), so it stays on generic verbs.
constexpr uint32_t vendor_id = 0xfffffe;
constexpr uint32_t vendor_part_id = 0x7552;  // "uR"

std::mutex registry_lock;
// Devices live as long as the process: an application may keep an ibv_device * after freeing the list
// (ibv_open_device is commonly called that way), so they are never freed.
std::vector<Device*> registry;

uint64_t guid_from_mac(const std::string& mac_text) {
  unsigned m[6] = {};
  if (std::sscanf(mac_text.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) return 0;
  // Modified EUI-64, as RoCE NICs derive their node GUID: flip the U/L bit, insert ff:fe.
  const uint8_t g[8] = {uint8_t(m[0] ^ 2), uint8_t(m[1]), uint8_t(m[2]), 0xff, 0xfe, uint8_t(m[3]), uint8_t(m[4]),
                        uint8_t(m[5])};
  uint64_t be = 0;
  std::memcpy(&be, g, 8);  // the bytes in wire order: a __be64
  return be;
}

Device* find_or_add(const std::string& socket, const nlohmann::json& info) {
  const std::string name = info.value("device_name", std::string("uroce0"));
  std::lock_guard g(registry_lock);
  for (Device* d : registry) {
    if (d->socket == socket && name == d->dev.name) return d;
  }
  auto* d = new Device{};
  d->socket = socket;
  d->index = int(registry.size());
  d->guid_be = guid_from_mac(info.value("mac", std::string()));
  d->dev.node_type = IBV_NODE_CA;
  d->dev.transport_type = IBV_TRANSPORT_IB;  // RoCE reports the IB transport
  std::snprintf(d->dev.name, sizeof d->dev.name, "%s", name.c_str());
  // uroced makes /dev/infiniband/<dev_name> for libraries that look for it (emulator/daemon/device_node.hpp).
  const std::string dev_name = info.value("dev_name", "uverbs-" + name);
  std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "%s", dev_name.c_str());
  std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "%s", socket.c_str());
  std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "/sys/class/infiniband/%s", name.c_str());
  registry.push_back(d);
  return d;
}

// The port's GID table has at least this many entries, its addresses first. As on a NIC (mlx5 has 256, rxe
// 1024), an entry without an address (past the addresses, or emptied by uroce address del) reads as the zero
// GID from ibv_query_gid, as ENODATA from ibv_query_gid_ex, and as a RoCE v1 entry from ibv_query_gid_type
// (rdma-core's reading of the kernel's EINVAL for it): programs that walk the table, perftest's GID choice
// among them, expect such entries.
constexpr size_t gid_table_min = 16;
size_t gid_table_length(const std::vector<wire::IpAddress>& gids) { return std::max(gid_table_min, gids.size()); }

// The address in entry `index`, or nothing for an empty entry.
std::optional<wire::IpAddress> gid_entry(const std::vector<wire::IpAddress>& gids, size_t index) {
  if (index >= gids.size() || gids[index].is_zero()) return std::nullopt;
  return gids[index];
}

}  // namespace

std::vector<wire::IpAddress> gid_table(const Context& c) {
  GidCache& cache = *c.gid_cache;
  std::lock_guard g(cache.lock);
  if (c.impl->gid_generation() != cache.generation) {
    try {
      const nlohmann::json info = c.impl->control().call({{"op", "query_device"}});
      // (the generation the daemon gave with the table: one that moves again meanwhile is seen next time)
      cache.gids = info.at("gids").get<std::vector<wire::IpAddress>>();
      cache.generation = info.value("gid_generation", 0u);
    } catch (const std::exception& e) {  // (the daemon gone: the table it last gave)
      shim_log().debug("verbs shim: the GID table could not be read again: {}", e.what());
    }
  }
  return cache.gids;
}

// uroce's LIDs, an extension (shim.hpp): the low 16 bits of the port's first IPv4 address.
namespace {

std::optional<uint32_t> first_ipv4(const Context& c) {  // host order
  for (const wire::IpAddress& ip : gid_table(c)) {
    if (ip.is_v4()) return ip.v4();
  }
  return std::nullopt;
}

// 0xc000 and up are multicast LIDs and the permissive LID.
bool is_unicast_lid(uint32_t lid) { return lid != 0 && lid <= 0xbfff; }

}  // namespace

uint16_t port_lid(const Context& c) {
  const auto ip = first_ipv4(c);
  return ip && is_unicast_lid(*ip & 0xffff) ? uint16_t(*ip & 0xffff) : 0;
}

bool lid_route(const Context& c, uint16_t dlid, wire::IpAddress& dgid) {
  if (!is_unicast_lid(dlid) || port_lid(c) == 0) return false;
  dgid = wire::IpAddress::from_v4((*first_ipv4(c) & 0xffff0000u) | dlid);
  return true;
}

void fill_port_attr(Context& c, ibv_port_attr& a) {
  // Live state (link, MTU) from the daemon; the open-time copy if it cannot answer.
  nlohmann::json info = c.info;
  try {
    info = c.impl->control().call({{"op", "query_port"}});
  } catch (const std::exception& e) {
    shim_log().debug("verbs shim: query_port: {}", e.what());
  }
  const bool up = info.value("link_up", true);
  a.state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = ibv_mtu(info.value("active_mtu", uint32_t(IBV_MTU_1024)));
  a.gid_tbl_len = int(gid_table_length(gid_table(c)));
  a.port_cap_flags = 0;
  a.max_msg_sz = 1u << 31;
  a.pkey_tbl_len = 1;
  a.max_vl_num = 1;
  a.active_width = 1;    // 1X
  a.active_speed = 32;   // 25 Gb/s (EDR lane rate): a plausible Ethernet port
  a.phys_state = up ? 5 : 3;  // LinkUp / Disabled
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  a.lid = port_lid(c);  // a RoCE port has none; uroce's is an extension (shim.hpp: lid_route)
}

int query_port_ex(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_len) {
  if (port_num != 1) return EINVAL;
  ibv_port_attr a{};
  if (int rc = guarded("query_port", [&] { fill_port_attr(*to_shim(context), a); })) return rc;
  // An older application's struct may be shorter than ours: copy what it has room for.
  std::memset(attr, 0, attr_len);
  std::memcpy(attr, &a, std::min(attr_len, sizeof a));
  return 0;
}

static void fill_device_attr(Context& c, ibv_device_attr& a) {
  const auto l = c.impl->limits();
  std::memset(&a, 0, sizeof a);
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "uroce 0.1.0");
  a.node_guid = c.device->guid_be;
  a.sys_image_guid = c.device->guid_be;
  a.max_mr_size = l.max_mr_size;
  a.page_size_cap = 0xfffff000;  // 4 KiB and up
  a.vendor_id = vendor_id;
  a.vendor_part_id = vendor_part_id;
  a.max_qp = int(l.max_qp);
  a.max_qp_wr = int(l.max_qp_wr);
  // No SRQ_RESIZE: modify_srq cannot resize yet. Memory windows of both types, type 2 as rxe's (2B: bound
  // to the QP that binds it).
  // Raw packet QPs fill in IPv4 and TCP/UDP checksums (IBV_SEND_IP_CSUM) and check them on receipt
  // (IBV_WC_IP_CSUM_OK), and take flow steering rules (ibv_create_flow).
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_XRC |
                       IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_RAW_IP_CSUM |
                       IBV_DEVICE_MANAGED_FLOW_STEERING;
  a.max_sge = int(l.max_sge);
  a.max_sge_rd = int(l.max_sge);
  a.max_cq = int(l.max_cq);
  a.max_cqe = int(l.max_cqe);
  a.max_mr = int(l.max_mr);
  a.max_mw = int(l.max_mr);  // windows take their keys from the same table as regions (transport/memory)
  a.max_pd = int(l.max_pd);
  a.max_qp_rd_atom = l.max_qp_rd_atom;
  a.max_qp_init_rd_atom = l.max_qp_rd_atom;
  a.max_res_rd_atom = int(l.max_qp_rd_atom) * int(l.max_qp);
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_ah = int(l.max_ah);
  a.max_mcast_grp = int(l.max_mcast_grp);
  a.max_mcast_qp_attach = int(l.max_mcast_qp_attach);
  a.max_total_mcast_qp_attach = int(l.max_total_mcast_qp_attach);
  a.max_srq = int(l.max_srq);
  a.max_srq_wr = int(l.max_srq_wr);
  a.max_srq_sge = int(l.max_sge);
  a.max_pkeys = 1;
  a.local_ca_ack_delay = 15;
  a.phys_port_cnt = 1;
}

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size) {
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex a{};
  if (int rc = guarded("query_device", [&] { fill_device_attr(*to_shim(context), a.orig_attr); })) return rc;
  // On-demand paging: uroced reaches an ODP region through the process's page tables at each access
  // (pd_mr.cpp), so every transport and operation has it, and so does the implicit region (the whole
  // address space), which rxe lacks and mlx5 has.
  constexpr uint32_t all_operations = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                                      IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  a.odp_caps.per_transport_caps.rc_odp_caps = all_operations;
  a.odp_caps.per_transport_caps.uc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                                              IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  a.xrc_odp_caps = all_operations;
  // Completion timestamps count nanoseconds (cq_ex.cpp), in all 64 bits.
  a.completion_timestamp_mask = ~uint64_t(0);
  a.hca_core_clock = device_clock_khz;
  // Device memory: uroced's own, shared by every client (emulator/daemon/device_memory.cpp).
  a.max_dm_size = to_shim(context)->info.value("max_dm_size", uint64_t(0));
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  a.raw_packet_caps = IBV_RAW_PACKET_CAP_IP_CSUM;
  // RSS over receive work queues (wq.cpp): raw packet QPs, Toeplitz over IPv4/IPv6 addresses and TCP/UDP ports.
  a.rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
  a.rss_caps.max_rwq_indirection_tables = to_shim(context)->info.at("limits").value("max_srq", 1024u);
  a.rss_caps.max_rwq_indirection_table_size = 1u << uroce::transport::Device::log_max_ind_table;
  a.rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
                                   IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
                                   IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
  a.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  a.max_wq_type_rq = to_shim(context)->info.at("limits").value("max_srq", 1024u);  // the 32-bit count, for devices with more than 255 ports
  fill_tm_caps(*to_shim(context), a.tm_caps);
  fill_packet_pacing_caps(a.packet_pacing_caps);
  // The other extended capabilities (TSO, ...) are none: zero is the honest answer.
  std::memset(attr, 0, attr_size);
  std::memcpy(attr, &a, std::min(attr_size, sizeof a));
  return 0;
}

// ibv_query_rt_values_ex: the device's clock now, on the scale of completion timestamps. As mlx5 gives
// its free-running counter, the raw value is all in tv_nsec, with tv_sec 0.
int query_rt_values(ibv_context*, ibv_values_ex* values) {
  if (values->comp_mask & ~uint32_t(IBV_VALUES_MASK_RAW_CLOCK)) return EINVAL;
  uint32_t answered = 0;
  if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = clock_ns(CLOCK_MONOTONIC);
    answered |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = answered;
  return 0;
}

}  // namespace uroce::shim

using namespace uroce::shim;

SHIM_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  // One device per uroced in $UROCE_SOCKET, in its order, as a host lists one per NIC.
  std::vector<Device*> found;
  std::vector<std::string> asked;
  for (const std::string& socket : uroce::emulator::client::ControlConnection::socket_paths()) {
    if (std::find(asked.begin(), asked.end(), socket) != asked.end()) continue;  // listed twice: one device
    asked.push_back(socket);
    try {
      auto conn = uroce::emulator::client::ControlConnection::connect(socket, "uroce-verbs-shim");
      Device* d = find_or_add(socket, conn->call({{"op", "query_device"}}));
      // Names are how programs choose a device (-d NAME): two daemons with one name would make the second
      // unreachable, or a program's choice depend on the order. The first keeps it, as the kernel refuses
      // a second device of a name.
      const auto same_name = [&](const Device* f) { return std::strcmp(f->dev.name, d->dev.name) == 0; };
      if (std::any_of(found.begin(), found.end(), same_name)) {
        shim_log().warn("verbs shim: the uroced at {} is also called {}: left out (uroced --device-name "
                        "gives each its own)", socket, d->dev.name);
        continue;
      }
      found.push_back(d);
    } catch (const std::exception& e) {
      // No daemon: no device. Not an error (ibv_get_device_list fails only when it cannot allocate).
      shim_log().debug("verbs shim: no device at {}: {}", socket, e.what());
    }
  }
  auto** list = static_cast<ibv_device**>(calloc(found.size() + 1, sizeof(ibv_device*)));
  if (!list) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < found.size(); ++i) list[i] = &found[i]->dev;
  if (num_devices) *num_devices = int(found.size());
  return list;
}

SHIM_EXPORT void ibv_free_device_list(ibv_device** list) { free(list); }

SHIM_EXPORT const char* ibv_get_device_name(ibv_device* device) { return device->name; }

SHIM_EXPORT __be64 ibv_get_device_guid(ibv_device* device) { return to_shim(device)->guid_be; }

SHIM_EXPORT int ibv_get_device_index(ibv_device* device) {
  // Kernel devices have an index; a user-space device has its position among uroce's (one per daemon).
  return to_shim(device)->index;
}

namespace {

// A verbs context around `c->impl`, a client context just opened or imported (`cmd_fd`: ibv_context's,
// the connection's own socket unless the application gave one).
ibv_context* finish_context(Context* c, Device* d, int cmd_fd) {
  c->device = d;
  c->info = c->impl->device();
  c->objects_lock = new std::mutex;
  c->cqs = new std::map<uint32_t, Cq*>;
  c->qps = new std::multimap<uint32_t, Qp*>;
  c->srqs = new std::map<uint32_t, Srq*>;
  c->gid_cache = new GidCache;
  c->gid_cache->gids = c->info.at("gids").get<std::vector<uroce::wire::IpAddress>>();
  c->gid_cache->generation = c->info.value("gid_generation", 0u);

  verbs_context& v = c->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = query_port_ex;
  v.query_device_ex = query_device_ex;
  v.create_qp_ex = create_qp_ex;
  v.create_cq_ex = create_cq_ex;
  v.create_srq_ex = create_srq_ex;
  v.open_xrcd = open_xrcd;
  v.close_xrcd = close_xrcd;
  v.open_qp = open_qp;
  v.get_srq_num = get_srq_num;
  v.advise_mr = advise_mr;
  v.query_rt_values = query_rt_values;
  v.modify_qp_rate_limit = modify_qp_rate_limit;
  v.alloc_dm = alloc_dm;
  v.free_dm = free_dm;
  v.reg_dm_mr = reg_dm_mr;
  install_flow_ops(v);
  install_work_queue_ops(v);
  install_domain_ops(v);
  install_tag_matching_ops(v);
  ibv_context& ctx = v.context;
  ctx.device = &d->dev;
  ctx.cmd_fd = cmd_fd;
  ctx.async_fd = c->impl->async_fd();
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.ops.poll_cq = poll_cq;
  ctx.ops.req_notify_cq = req_notify_cq;
  ctx.ops.post_send = post_send;
  ctx.ops.post_recv = post_recv;
  ctx.ops.post_srq_recv = post_srq_recv;
  ctx.ops.alloc_mw = alloc_mw;  // ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw are verbs.h inlines calling these
  ctx.ops.bind_mw = bind_mw;
  ctx.ops.dealloc_mw = dealloc_mw;
  return &ctx;
}

// ibv_open_device and ibv_import_device: a client context from `open`, in a new shim context still to be
// finished; null with errno if `open` failed.
template <typename Open>
Context* new_context(const char* what, Open open) {
  auto* c = new (std::nothrow) Context{};
  if (!c) {
    errno = ENOMEM;
    return nullptr;
  }
  if (const int rc = guarded(what, [&] { c->impl = open().release(); })) {
    delete c;
    errno = rc;
    return nullptr;
  }
  return c;
}

}  // namespace

SHIM_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  Device* d = to_shim(device);
  Context* c = new_context("open_device", [&] { return client::Context::open(d->socket, "uroce-verbs-shim"); });
  return c ? finish_context(c, d, c->impl->control().fd()) : nullptr;
}

// Another context on the objects of the context `cmd_fd` is the command descriptor of (a duplicate, or
// one passed from another process), as Linux's import shares a uverbs file: objects either creates are
// the other's too, and live until freed or until the last context on them closes. The context owns
// `cmd_fd` from now on and closes it with itself, as rdma-core's imported contexts do.
SHIM_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  Context* c = new_context("import_device", [&] { return client::Context::import(cmd_fd, "uroce-verbs-shim"); });
  if (!c) return nullptr;
  c->owned_cmd_fd = cmd_fd;
  return finish_context(c, find_or_add(c->impl->socket_path(), c->impl->device()), cmd_fd);
}

SHIM_EXPORT int ibv_close_device(ibv_context* context) {
  Context* c = to_shim(context);
  // Closing the control connection makes uroced destroy whatever the application left behind (once no
  // other context, imported or importing, is on the same objects).
  delete c->impl;
  if (c->owned_cmd_fd >= 0) close(c->owned_cmd_fd);
  delete c->cqs;
  delete c->qps;
  delete c->srqs;
  delete c->objects_lock;
  delete c->gid_cache;
  pthread_mutex_destroy(&context->mutex);
  delete c;
  return 0;
}

SHIM_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* attr) {
  return guarded("query_device", [&] { fill_device_attr(*to_shim(context), *attr); });
}

// The exported (non-inline) ibv_query_port takes the old, shorter struct: the verbs.h macro only falls
// back to it for contexts without verbs_context, but old binaries call it directly. That struct (opaque in
// verbs.h) is ibv_port_attr up to and including link_layer.
SHIM_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* attr) {
  return query_port_ex(context, port_num, reinterpret_cast<ibv_port_attr*>(attr), offsetof(ibv_port_attr, flags));
}

SHIM_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  const std::vector<uroce::wire::IpAddress> gids = gid_table(*to_shim(context));
  if (port_num != 1 || index < 0 || size_t(index) >= gid_table_length(gids)) {
    errno = EINVAL;
    return -1;
  }
  // GIDs are held as IPv6 bytes, IPv4 ones v4-mapped (::ffff:a.b.c.d): exactly RoCE v2's GID. An empty
  // entry is the zero GID.
  const uroce::wire::IpAddress ip = gid_entry(gids, size_t(index)).value_or(uroce::wire::IpAddress{});
  std::memcpy(gid->raw, ip.bytes.data(), 16);
  return 0;
}

namespace {

int gid_entry_of(const std::vector<uroce::wire::IpAddress>& gids, uint32_t port_num, uint32_t gid_index,
                 ibv_gid_entry* entry, size_t entry_size) {
  if (port_num != 1 || gid_index >= gid_table_length(gids)) return EINVAL;
  const auto ip = gid_entry(gids, gid_index);
  if (!ip) return ENODATA;  // in the table, but empty
  std::memset(entry, 0, entry_size);
  std::memcpy(entry->gid.raw, ip->bytes.data(), 16);
  entry->gid_index = gid_index;
  entry->port_num = port_num;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 0;  // no kernel netdev behind the port
  return 0;
}

}  // namespace

SHIM_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                  ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (flags) return EINVAL;
  if (entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  return gid_entry_of(gid_table(*to_shim(context)), port_num, gid_index, entry, entry_size);
}

// The valid entries only, as the kernel's table query returns them.
SHIM_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                         uint32_t flags, size_t entry_size) {
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  const std::vector<uroce::wire::IpAddress> gids = gid_table(*to_shim(context));
  const size_t n = size_t(std::count_if(gids.begin(), gids.end(), [](const auto& g) { return !g.is_zero(); }));
  if (max_entries < n) return -EINVAL;
  size_t written = 0;
  for (size_t i = 0; i < gids.size(); ++i) {
    if (gids[i].is_zero()) continue;
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + written * entry_size);
    if (int rc = gid_entry_of(gids, 1, uint32_t(i), e, entry_size)) return -rc;
    ++written;
  }
  return ssize_t(written);
}

// rdma-core's private enum ibv_gid_type_sysfs (not in the installed headers): 0 IB/RoCE v1, 1 RoCE v2.
SHIM_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  const std::vector<uroce::wire::IpAddress> gids = gid_table(*to_shim(context));
  if (port_num != 1 || index >= gid_table_length(gids)) {
    errno = EINVAL;
    return -1;
  }
  *type = gid_entry(gids, index) ? 1 : 0;  // an empty entry reads as RoCE v1, as from rdma-core
  return 0;
}

SHIM_EXPORT int ibv_query_pkey(ibv_context*, uint8_t port_num, int index, __be16* pkey) {
  if (port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = 0xffff;  // the default full-membership P_Key, the only one RoCE uses
  return 0;
}

SHIM_EXPORT int ibv_get_pkey_index(ibv_context*, uint8_t port_num, __be16 pkey) {
  if (port_num == 1 && (pkey | 0x0080) == 0xffff) return 0;  // full or limited member of the default
  errno = ENOENT;
  return -1;
}
