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
  ++xrcds_[xrcd].users;
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
  if (d.users == 1) {
    // The last user: the domain goes, unless SRQs or target QPs are still in it (EBUSY, nothing changes).
    engine_call("close_xrcd", [&](EngineContext& c) { return c.device.dealloc_xrcd(xrcd); });
    if (d.file) xrcd_files_.erase(*d.file);
    xrcds_.erase(xrcd);
  } else {
    --d.users;
  }
  if (--s.xrcds[xrcd] == 0) s.xrcds.erase(xrcd);
}

}  // namespace uroce::emulator
