// Thread domains and parent domains: ibv_alloc_td, ibv_dealloc_td and ibv_alloc_parent_domain (verbs_context
// ops that verbs.h's inline functions call). ibv_dealloc_pd frees a parent domain (pd_mr.cpp).
//
// A parent domain is a PD: it carries its protection domain's handle, so every verb that takes a PD (QPs,
// SRQs, work queues, regions, windows, address handles) works on the protection domain through it, and
// the objects report the parent domain as their pd. A CQ can be made with one too
// (IBV_CQ_INIT_ATTR_MASK_PD). The references are counted as mlx5 counts them: a protection domain with
// parent domains over it, a parent domain with QPs, SRQs, CQs or work queues made with it, and a thread
// domain named by a parent domain cannot be freed (EBUSY).
//
// What uroce makes of the rest, where verbs leave it to the provider:
// - A thread domain lets mlx5 give the QPs in it a doorbell register of their own and drop their locks.
//   In uroce every QP already has rings and a doorbell word of its own, so a thread domain shares nothing
//   out; it is kept and counted, and the shim keeps its locks (uncontended, as the application promised).
// - The allocators are for "provider memory allocations": the buffers a device reads and writes in the
//   process's memory (mlx5: work queue, CQ and SRQ buffers, doorbell records). uroce's provider makes
//   none. Its queues are rings uroced creates and shares with the process, as a NIC's own memory would
//   be, so the allocators are kept with the parent domain and never called.
#include "shim.hpp"

namespace uroce::shim {
namespace {

ibv_td* alloc_td(ibv_context* context, ibv_td_init_attr* attr) {
  if (!attr || attr->comp_mask) {
    errno = EINVAL;  // no optional field is defined
    return nullptr;
  }
  auto* t = new (std::nothrow) Td{};
  if (!t) {
    errno = ENOMEM;
    return nullptr;
  }
  t->td.context = context;
  return &t->td;
}

int dealloc_td(ibv_td* td) {
  Td* t = to_shim(td);
  if (t->parents != 0) {
    errno = EBUSY;
    return EBUSY;
  }
  delete t;
  return 0;
}

ibv_pd* alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  const bool with_allocators = attr && (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS);
  // The PD must be a protection domain of this context (a parent domain over a parent domain has no
  // meaning), the thread domain too, and allocators come in pairs.
  if (!attr || (attr->comp_mask & ~known) || !attr->pd || attr->pd->context != context ||
      to_shim(attr->pd)->protection_domain || (attr->td && attr->td->context != context) ||
      (with_allocators && (!attr->alloc || !attr->free))) {
    errno = EINVAL;
    return nullptr;
  }
  auto* p = new (std::nothrow) Pd{};
  if (!p) {
    errno = ENOMEM;
    return nullptr;
  }
  p->pd.context = context;
  p->pd.handle = attr->pd->handle;
  p->protection_domain = to_shim(attr->pd);
  ++p->protection_domain->users;
  if (attr->td) {
    p->td = to_shim(attr->td);
    ++p->td->parents;
  }
  if (with_allocators) {
    p->alloc = attr->alloc;
    p->free = attr->free;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) p->pd_context = attr->pd_context;
  return &p->pd;
}

}  // namespace

void free_parent_domain(Pd* parent) {
  --parent->protection_domain->users;
  if (parent->td) --parent->td->parents;
  delete parent;
}

void install_domain_ops(verbs_context& v) {
  v.alloc_td = alloc_td;
  v.dealloc_td = dealloc_td;
  v.alloc_parent_domain = alloc_parent_domain;
}

}  // namespace uroce::shim
