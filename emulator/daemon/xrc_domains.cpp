// XRC domains (ibv_open_xrcd / ibv_close_xrcd). A domain opened through a file is found again by the
// file's identity, so that every process that opens the same file shares it, as the kernel shares one by
// inode; the descriptor comes with the request, so a client can name only a file it has opened itself.
#include <sys/stat.h>

#include <cerrno>

#include "emulator/daemon/request_fields.hpp"
#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

using nlohmann::json;

json VerbsService::open_xrcd(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const bool by_file = r.value("file", false);
  const bool create = r.value("create", false), exclusive = r.value("exclusive", false);
  uint32_t xrcd = 0;
  if (by_file) {
    if (received_ == nullptr || received_->size() != 1) throw ServiceError(EINVAL, "XRC domain file without its descriptor");
    struct stat st {};
    if (fstat(received_->front(), &st) != 0) throw ServiceError(errno, "fstat of the XRC domain's file failed");
    const std::pair<dev_t, ino_t> file{st.st_dev, st.st_ino};
    if (const auto it = xrcd_files_.find(file); it != xrcd_files_.end()) {
      // O_EXCL: the domain must be new (the kernel's EEXIST).
      if (exclusive) throw ServiceError(EEXIST, "an XRC domain exists for this file");
      xrcd = it->second;
    } else {
      // Without O_CREAT only an existing domain may be opened (the kernel's EINVAL).
      if (!create) throw ServiceError(EINVAL, "no XRC domain for this file, and no O_CREAT");
      engine_call("open_xrcd", [&](EngineContext& c) { return c.device.alloc_xrcd(xrcd); });
      xrcds_[xrcd].file = file;
      xrcd_files_[file] = xrcd;
    }
  } else {
    engine_call("open_xrcd", [&](EngineContext& c) { return c.device.alloc_xrcd(xrcd); });
  }
  ++xrcds_[xrcd].opens;
  ++s.xrcds[xrcd];
  return {{"xrcd", xrcd}};
}

json VerbsService::close_xrcd(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t xrcd = need_u32(r, "xrcd");
  require_owned(s.xrcds, xrcd, "XRC domain");
  release_xrcd(s, xrcd);
  return json::object();
}

void VerbsService::release_xrcd(Session& s, uint32_t xrcd) {
  XrcDomain& d = xrcds_.at(xrcd);
  if (d.opens == 1 && d.srqs != 0) throw ServiceError(EBUSY, "XRC SRQs are still in the domain");
  --d.opens;
  if (--s.xrcds[xrcd] == 0) s.xrcds.erase(xrcd);
  free_xrcd_if_unused(xrcd);
}

void VerbsService::free_xrcd_if_unused(uint32_t xrcd) {
  const XrcDomain& d = xrcds_.at(xrcd);
  if (d.opens != 0 || d.targets != 0) return;
  engine_call("close_xrcd", [&](EngineContext& c) { return c.device.dealloc_xrcd(xrcd); });
  if (d.file) xrcd_files_.erase(*d.file);
  xrcds_.erase(xrcd);
}

void VerbsService::forget_xrc_srq(uint32_t srqn) {
  const auto it = xrc_srq_domains_.find(srqn);
  if (it == xrc_srq_domains_.end()) return;
  --xrcds_.at(it->second).srqs;
  xrc_srq_domains_.erase(it);
}

// ---------------------------------------------------------------------------------------------------------
// XRC target QPs shared between sessions (ibv_open_qp). Each create_qp or open_qp is a handle; destroy_qp
// closes one. A target QP also keeps its domain, as the kernel's keeps a use of its XRCD, so that the
// domain's last close by a session never strands a QP another session still holds.

void VerbsService::add_target(Session& s, uint32_t qpn, uint32_t xrcd) {
  xrc_targets_[qpn] = xrcd;
  s.xrc_qp_handles[qpn] = 1;
  ++xrcds_.at(xrcd).targets;
}

json VerbsService::open_qp(Session& s, uint64_t, const json& r, std::vector<int>&) {
  const uint32_t xrcd = need_u32(r, "xrcd"), qpn = need_u32(r, "qp_num");
  require_owned(s.xrcds, xrcd, "XRC domain");
  // As the kernel's ib_open_qp: only an XRC target QP of that very domain (EINVAL otherwise, the same for
  // a QP that does not exist and one of another kind).
  const auto t = xrc_targets_.find(qpn);
  if (t == xrc_targets_.end() || t->second != xrcd) throw ServiceError(EINVAL, "no such XRC target QP");
  ++s.xrc_qp_handles[qpn];
  s.qps.insert(qpn);
  share_target(qpn);
  return {{"qp_num", qpn}};
}

void VerbsService::release_target(Session& s, uint32_t qpn, uint32_t handles) {
  uint32_t& mine = s.xrc_qp_handles.at(qpn);
  mine -= handles;
  if (mine == 0) {
    s.xrc_qp_handles.erase(qpn);
    s.qps.erase(qpn);
  }
  if (share_target(qpn)) return;
  const uint32_t xrcd = xrc_targets_.at(qpn);
  xrc_targets_.erase(qpn);
  destroy_qp_now(qpn);
  --xrcds_.at(xrcd).targets;
  free_xrcd_if_unused(xrcd);
}

std::vector<uint64_t> VerbsService::target_holders(uint32_t qpn) const {
  std::vector<uint64_t> holders;
  for (const auto& [id, session] : sessions_) {
    if (session.xrc_qp_handles.contains(qpn)) holders.push_back(id);
  }
  return holders;
}

bool VerbsService::share_target(uint32_t qpn) {
  const std::vector<uint64_t> holders = target_holders(qpn);
  if (holders.empty()) return false;
  engine_.run_on_engine([&](EngineContext& c) { c.queues.set_qp_holders(qpn, holders); });
  return true;
}

}  // namespace uroce::emulator
