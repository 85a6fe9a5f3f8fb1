// Tag matching SRQs through the verbs (rdma-core's Documentation/tag_matching.md): ibv_create_srq_ex with
// IBV_SRQT_TM (xrc.cpp's create_srq_ex hands those here), ibv_post_srq_ops (a verbs_context op: verbs.h's
// inline calls it) and the device's tm_caps. Messages are matched by uroced's transport; here the list
// operations are read from their struct ibv_ops_wr chain and sent to uroced in one request, which carries
// them out in order and answers ADD's handles before the call returns.
#include "shim.hpp"

namespace uroce::shim {
namespace {

// What ibv_post_srq_ops refuses before asking uroced: an opcode verbs.h does not define, a negative SGE
// count or a list that is not there, more SGEs than a tagged buffer takes (the request stays small). 0 or
// the errno, with `op` filled.
int tag_op_from(const ibv_ops_wr& wr, uint32_t max_sge, verbs::TagOp& op) {
  if (wr.opcode != IBV_WR_TAG_ADD && wr.opcode != IBV_WR_TAG_DEL && wr.opcode != IBV_WR_TAG_SYNC) return EINVAL;
  op = verbs::TagOp{};
  op.wr_id = wr.wr_id;
  op.opcode = verbs::TagOpcode(wr.opcode);  // verbs.h's numbering (transport/verbs/work.hpp)
  op.flags = uint32_t(wr.flags);            // flags uroce does not know are uroced's to refuse, in order
  op.unexpected_cnt = wr.tm.unexpected_cnt;
  op.handle = wr.tm.handle;
  if (wr.opcode != IBV_WR_TAG_ADD) return 0;
  const int n = wr.tm.add.num_sge;
  if (n < 0 || uint32_t(n) > max_sge || (n > 0 && wr.tm.add.sg_list == nullptr)) return EINVAL;
  op.recv_wr_id = wr.tm.add.recv_wr_id;
  op.tag = wr.tm.add.tag;
  op.mask = wr.tm.add.mask;
  for (int i = 0; i < n; ++i) {
    const ibv_sge& s = wr.tm.add.sg_list[i];
    op.sg_list.push_back({s.addr, s.length, s.lkey});
  }
  return 0;
}

// The operations of the chain are carried out up to the first that fails, which *bad_wr names; ADD writes
// the new entry's handle into its wr->tm.handle.
int post_srq_ops(ibv_srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad_wr) {
  Srq* s = to_shim(srq);
  Context* c = to_shim(srq->context);
  if (!s->tm) {
    *bad_wr = wr;
    return EINVAL;  // no list on an SRQ of another type
  }
  const uint32_t max_sge = c->impl->limits().max_tm_sge;
  std::vector<verbs::TagOp> ops;
  std::vector<ibv_ops_wr*> wrs;
  int refused = 0;  // the errno of the first operation refused here, which is wrs.back()
  for (ibv_ops_wr* w = wr; w != nullptr; w = w->next) {
    wrs.push_back(w);
    verbs::TagOp op;
    if ((refused = tag_op_from(*w, max_sge, op)) != 0) break;
    ops.push_back(std::move(op));
  }
  if (ops.empty() && refused == 0) return 0;
  client::SrqOpsResult result;
  if (!ops.empty()) {
    if (int rc = guarded("post_srq_ops", [&] { result = c->impl->post_srq_ops(*s->impl, ops); })) {
      *bad_wr = wr;  // uroced tried none of them
      return rc;
    }
  }
  for (size_t i = 0; i < result.handles.size(); ++i) {
    if (wrs[i]->opcode == IBV_WR_TAG_ADD) wrs[i]->tm.handle = result.handles[i];
  }
  if (result.error != 0) {
    shim_log().debug("verbs shim: post_srq_ops: operation {}: {}", result.handles.size(),
                     result.reason);
    *bad_wr = wrs[result.handles.size()];
    return result.error;
  }
  if (refused != 0) {
    *bad_wr = wrs.back();
    return refused;
  }
  return 0;
}

}  // namespace

ibv_srq* create_tm_srq(ibv_srq_init_attr_ex& attr) {
  const client::TagMatchingCap tm{attr.tm_cap.max_num_tags, attr.tm_cap.max_ops};
  return new_srq(attr.pd, attr.srq_context, attr.attr, 0, attr.cq, &tm);
}

void fill_tm_caps(const Context& c, ibv_tm_caps& caps) {
  const transport::DeviceLimits l = c.impl->limits();
  caps.max_rndv_hdr_size = l.max_rndv_hdr_size;
  caps.max_num_tags = l.max_num_tags;
  caps.flags = IBV_TM_CAP_RC;  // RC QPs on a TM SRQ are matched (uroce has no DC)
  caps.max_ops = l.max_tm_ops;
  caps.max_sge = l.max_tm_sge;
}

void install_tag_matching_ops(verbs_context& v) { v.post_srq_ops = post_srq_ops; }

}  // namespace uroce::shim
