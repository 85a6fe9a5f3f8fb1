// Reading a control request's fields and checking what it names, for the verbs service's handlers:
// numbers are refused rather than truncated, and another session's object is reported as a missing one.
#pragma once

#include <cerrno>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "emulator/daemon/verbs_service.hpp"

namespace uroce::emulator {

inline uint32_t need_u32(const nlohmann::json& r, const char* key) {
  const auto it = r.find(key);
  // A value beyond 32 bits is refused, not truncated: 2^32 + n must not name object n.
  if (it == r.end() || !it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX) {
    throw ServiceError(EINVAL, std::string("missing or invalid field ") + key);
  }
  return it->get<uint32_t>();
}

inline uint64_t need_u64(const nlohmann::json& r, const char* key) {
  const auto it = r.find(key);
  if (it == r.end() || !it->is_number_unsigned()) throw ServiceError(EINVAL, std::string("missing field ") + key);
  return it->get<uint64_t>();
}

// An optional 32-bit field: absent means `fallback`; present, it must fit (no silent truncation).
inline uint32_t opt_u32(const nlohmann::json& r, const char* key, uint32_t fallback) {
  return r.contains(key) ? need_u32(r, key) : fallback;
}

// `owned`: the session's objects of one kind, as a set or as a map keyed by object (XRC domains, with how
// often the session opened each).
template <class Owned>
void require_owned(const Owned& owned, uint32_t object, const char* kind) {
  // Another client's object is reported exactly like a nonexistent one: a client learns nothing about
  // the others.
  if (!owned.contains(object)) throw ServiceError(EINVAL, std::string("no such ") + kind);
}

}  // namespace uroce::emulator
