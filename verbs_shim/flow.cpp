// ibv_create_flow / ibv_destroy_flow (verbs_context ops: verbs.h's inline functions call them): flow
// steering rules that give a raw packet QP the frames the port receives. The ibv_flow_attr and the specs
// after it are read here, with the sizes the kernel's uverbs checks, into uroced's rule (transport/flow);
// uroced decides the rest (a raw packet QP of this context, CAP_NET_RAW, the port).
//
// Specs uroce matches: ETH, IPV4, IPV4_EXT, IPV6, TCP, UDP, and the drop action. Tunnels (VXLAN, GRE,
// MPLS), inner headers, ESP, tags, counters and flow actions: EOPNOTSUPP, as a provider without them
// answers, so that applications (and rdma-core's tests) can tell "not supported" from "wrong".
#include <arpa/inet.h>

#include <cstring>

#include "shim.hpp"

namespace uroce::shim {
namespace {

namespace flow = transport::flow;

template <size_t N>
void copy_bytes(std::array<uint8_t, N>& to, const uint8_t (&from)[N]) {
  std::memcpy(to.data(), from, N);
}

flow::Spec eth_spec(const ibv_flow_spec_eth& s) {
  flow::Spec out;
  out.kind = flow::Spec::Kind::eth;
  copy_bytes(out.eth.dst.bytes, s.val.dst_mac);
  copy_bytes(out.eth.dst_mask.bytes, s.mask.dst_mac);
  copy_bytes(out.eth.src.bytes, s.val.src_mac);
  copy_bytes(out.eth.src_mask.bytes, s.mask.src_mac);
  out.eth.ether_type = ntohs(s.val.ether_type);  // filters are in network order (the kernel's __be16)
  out.eth.ether_type_mask = ntohs(s.mask.ether_type);
  out.eth.vlan_tag = ntohs(s.val.vlan_tag);
  out.eth.vlan_tag_mask = ntohs(s.mask.vlan_tag);
  return out;
}

flow::Spec ipv4_spec(const ibv_flow_ipv4_ext_filter& val, const ibv_flow_ipv4_ext_filter& mask) {
  flow::Spec out;
  out.kind = flow::Spec::Kind::ipv4;
  out.ipv4 = {ntohl(val.src_ip), ntohl(mask.src_ip), ntohl(val.dst_ip), ntohl(mask.dst_ip),
              val.proto,         mask.proto,         val.tos,           mask.tos,
              val.ttl,           mask.ttl,           val.flags,         mask.flags};
  return out;
}

flow::Spec ipv6_spec(const ibv_flow_spec_ipv6& s) {
  flow::Spec out;
  out.kind = flow::Spec::Kind::ipv6;
  copy_bytes(out.ipv6.src, s.val.src_ip);
  copy_bytes(out.ipv6.src_mask, s.mask.src_ip);
  copy_bytes(out.ipv6.dst, s.val.dst_ip);
  copy_bytes(out.ipv6.dst_mask, s.mask.dst_ip);
  out.ipv6.flow_label = ntohl(s.val.flow_label);
  out.ipv6.flow_label_mask = ntohl(s.mask.flow_label);
  out.ipv6.next_hdr = s.val.next_hdr;
  out.ipv6.next_hdr_mask = s.mask.next_hdr;
  out.ipv6.traffic_class = s.val.traffic_class;
  out.ipv6.traffic_class_mask = s.mask.traffic_class;
  out.ipv6.hop_limit = s.val.hop_limit;
  out.ipv6.hop_limit_mask = s.mask.hop_limit;
  return out;
}

flow::Spec l4_spec(const ibv_flow_spec_tcp_udp& s, uint8_t protocol) {
  flow::Spec out;
  out.kind = flow::Spec::Kind::l4;
  out.l4 = {protocol, ntohs(s.val.dst_port), ntohs(s.mask.dst_port), ntohs(s.val.src_port), ntohs(s.mask.src_port)};
  return out;
}

// Reads the specs after `attr` into `rule`; 0 or the errno ibv_create_flow fails with.
int read_specs(const ibv_flow_attr& attr, flow::FlowRule& rule) {
  const auto* at = reinterpret_cast<const uint8_t*>(&attr + 1);
  for (unsigned i = 0; i < attr.num_of_specs; ++i) {
    const auto* spec = reinterpret_cast<const ibv_flow_spec*>(at);
    const unsigned type = spec->hdr.type;
    const size_t size = spec->hdr.size;
    // Each spec must be at least as large as its type's struct (ib_uverbs' kern_spec_to_ib_spec checks this).
    auto sized = [&](size_t expected) { return size >= expected; };
    switch (type) {
      case IBV_FLOW_SPEC_ETH:
        if (!sized(sizeof(ibv_flow_spec_eth))) return EINVAL;
        rule.specs.push_back(eth_spec(spec->eth));
        break;
      case IBV_FLOW_SPEC_IPV4:
        if (!sized(sizeof(ibv_flow_spec_ipv4))) return EINVAL;
        rule.specs.push_back(ipv4_spec({spec->ipv4.val.src_ip, spec->ipv4.val.dst_ip, 0, 0, 0, 0},
                                       {spec->ipv4.mask.src_ip, spec->ipv4.mask.dst_ip, 0, 0, 0, 0}));
        break;
      case IBV_FLOW_SPEC_IPV4_EXT:
        if (!sized(sizeof(ibv_flow_spec_ipv4_ext))) return EINVAL;
        rule.specs.push_back(ipv4_spec(spec->ipv4_ext.val, spec->ipv4_ext.mask));
        break;
      case IBV_FLOW_SPEC_IPV6:
        if (!sized(sizeof(ibv_flow_spec_ipv6))) return EINVAL;
        rule.specs.push_back(ipv6_spec(spec->ipv6));
        break;
      case IBV_FLOW_SPEC_TCP:
      case IBV_FLOW_SPEC_UDP:
        if (!sized(sizeof(ibv_flow_spec_tcp_udp))) return EINVAL;
        rule.specs.push_back(l4_spec(spec->tcp_udp, type == IBV_FLOW_SPEC_TCP ? IPPROTO_TCP : IPPROTO_UDP));
        break;
      case IBV_FLOW_SPEC_ACTION_DROP:
        if (!sized(sizeof(ibv_flow_spec_action_drop))) return EINVAL;
        rule.drop = true;
        break;
      default:
        shim_log().debug("verbs shim: ibv_create_flow: spec type {:#x} is not supported", type);
        return EOPNOTSUPP;
    }
    at += size;
  }
  return 0;
}

ibv_flow* create_flow(ibv_qp* qp, ibv_flow_attr* attr) {
  if (qp == nullptr || attr == nullptr || attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->type > IBV_FLOW_ATTR_SNIFFER) {
    errno = EINVAL;
    return nullptr;
  }
  flow::FlowRule rule;
  rule.type = flow::AttrType(attr->type);
  rule.priority = attr->priority;
  rule.flags = attr->flags;
  if (int rc = read_specs(*attr, rule)) {
    errno = rc;
    return nullptr;
  }
  auto* f = new (std::nothrow) ibv_flow{};
  if (f == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  Context* c = to_shim(qp->context);
  if (guarded("create_flow", [&] { f->handle = c->impl->create_flow(*to_shim(qp)->impl, attr->port, rule); })) {
    delete f;
    return nullptr;
  }
  f->context = qp->context;
  return f;
}

int destroy_flow(ibv_flow* f) {
  if (f == nullptr) return EINVAL;
  if (int rc = guarded("destroy_flow", [&] { to_shim(f->context)->impl->destroy_flow(f->handle); })) return rc;
  delete f;
  return 0;
}

}  // namespace

void install_flow_ops(verbs_context& v) {
  v.ibv_create_flow = create_flow;
  v.ibv_destroy_flow = destroy_flow;
}

}  // namespace uroce::shim
