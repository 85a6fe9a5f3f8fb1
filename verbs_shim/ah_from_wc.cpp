// Address handles back to the sender of a received datagram: ibv_init_ah_from_wc / ibv_create_ah_from_wc.
//
// A UD receive buffer starts with a 40-byte GRH area (transport/qp/responder.cpp, as rxe and RoCE NICs
// fill it): for RoCE v2 over IPv4, twenty zero bytes and then the datagram's IPv4 header; over IPv6 the
// IPv6 header itself, which has the GRH's layout. The reply goes from the GID the datagram was sent to
// (its destination address, looked up in the port's GID table) to its source address, with its TTL /
// hop limit and traffic class, as rdma-core does for RoCE. Its SL is wc->sl, as rdma-core copies it: on a
// RoCE completion that field holds the packet's type (0xA for RoCE v2 over IPv4, 0x9 over IPv6; see
// roce_packet_type in transport/qp/responder.cpp), as on ConnectX, so on a VLAN port the reply goes at
// priority 2 or 1 unless the program sets the SL itself.
#include <cstring>

#include "shim.hpp"

namespace uroce::shim {
namespace {

constexpr uint8_t ip_proto_udp = 17;  // RoCE v2; an IB next header (RoCE v1) is not spoken here

// Version 4 and 20 bytes (IHL 5): RoCE v2 sends no IP options.
bool ipv4_shaped(const uint8_t* h) { return h[0] == 0x45; }

bool ipv4_checksum_holds(const uint8_t* h) {
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += uint32_t(h[i]) << 8 | h[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return sum == 0xffff;
}

ibv_gid v4_mapped(const uint8_t* address) {
  ibv_gid g{};
  g.raw[10] = g.raw[11] = 0xff;
  std::memcpy(g.raw + 12, address, 4);
  return g;
}

// The index of `gid` in the port's table; -1 (errno ENOENT) when the port has no such address.
int gid_index(ibv_context* context, uint8_t port, const ibv_gid& gid) {
  ibv_gid entry;
  for (int i = 0; i < 256 && ibv_query_gid(context, port, i, &entry) == 0; ++i) {
    if (std::memcmp(entry.raw, gid.raw, sizeof gid.raw) == 0) return i;
  }
  errno = ENOENT;
  return -1;
}

int from_ipv4(ibv_context* context, uint8_t port, const uint8_t* ip, ibv_ah_attr& a) {
  const uint8_t* source = ip + 12;
  const uint8_t* destination = ip + 16;
  if ((destination[0] & 0xf0) == 0xe0) {  // multicast (224/4): not an address of the port to answer from
    errno = EINVAL;
    return -1;
  }
  const int index = gid_index(context, port, v4_mapped(destination));
  if (index < 0) return -1;
  a.grh.dgid = v4_mapped(source);
  a.grh.sgid_index = uint8_t(index);
  a.grh.traffic_class = ip[1];  // TOS
  a.grh.hop_limit = ip[8];      // TTL
  return 0;
}

int from_ipv6(ibv_context* context, uint8_t port, const ibv_grh& grh, ibv_ah_attr& a) {
  if (grh.dgid.raw[0] == 0xff || grh.next_hdr != ip_proto_udp) {
    errno = grh.dgid.raw[0] == 0xff ? EINVAL : EPROTONOSUPPORT;
    return -1;
  }
  const int index = gid_index(context, port, grh.dgid);
  if (index < 0) return -1;
  const uint32_t version_class_flow = ntohl(grh.version_tclass_flow);
  a.grh.dgid = grh.sgid;
  a.grh.sgid_index = uint8_t(index);
  a.grh.flow_label = version_class_flow & 0xfffff;
  a.grh.traffic_class = uint8_t(version_class_flow >> 20);
  a.grh.hop_limit = grh.hop_limit;
  return 0;
}

}  // namespace
}  // namespace uroce::shim

using namespace uroce::shim;

SHIM_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                    ibv_ah_attr* ah_attr) {
  std::memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->dlid = uint16_t(wc->slid);
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  // Without a GRH the attributes are a local route to wc->slid, which RoCE completions leave 0 (no LIDs):
  // ibv_create_ah refuses it, as a RoCE provider does.
  if (!(wc->wc_flags & IBV_WC_GRH)) return 0;
  ah_attr->is_global = 1;
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  // Which header the 40 bytes hold: an IPv6 one starts with version 6. An IPv4 datagram leaves the first
  // 20 bytes zero here, but other NICs leave them undefined, so an IPv4 header whose checksum holds wins
  // over a 6 that may be garbage.
  const uint8_t* ip4 = raw + 20;
  if ((raw[0] >> 4) == 6 && !(ipv4_shaped(ip4) && ipv4_checksum_holds(ip4))) {
    return from_ipv6(context, port_num, *grh, *ah_attr);
  }
  if (ipv4_shaped(ip4)) return from_ipv4(context, port_num, ip4, *ah_attr);
  errno = EPROTONOSUPPORT;
  return -1;
}

SHIM_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}
