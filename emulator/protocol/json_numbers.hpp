// Reading numbers out of control messages strictly: a value that does not fit its field is refused, never
// cut (nlohmann's get<uint8_t>() would turn 256 into 0). What flow_json and tag_op_json share.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace uroce::emulator::protocol {

// `v` as a T; std::invalid_argument naming `name` when it is not an unsigned number that fits T.
template <class T>
T fitting_number(const nlohmann::json& v, const std::string& name) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > uint64_t(T(~T(0)))) {
    throw std::invalid_argument(name + " out of range");
  }
  return T(v.get<uint64_t>());
}

// `j`'s member `name` into `out` when present (absent: `out` is left as it is).
template <class T>
void read_number(const nlohmann::json& j, const std::string& name, T& out) {
  const auto it = j.find(name);
  if (it != j.end()) out = fitting_number<T>(*it, name);
}

}  // namespace uroce::emulator::protocol
